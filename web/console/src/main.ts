// agvisord's web console (docs/console.md): sign in with the daemon's token (kept in this tab's
// sessionStorage), see the sandboxes in a live table, and open one: its terminal, its desktop,
// its background processes, its egress log; stop or delete it after a confirmation.
//
// Everything a sandbox says (names, images, process names, output) is shown as text; the page's
// Content-Security-Policy allows scripts of this origin only, and it talks to this origin only.

import { Api, ApiError, Metrics, Sandbox, sandboxPath } from "./api";
import { DesktopView } from "./desktop";
import { button, confirmDialog, formatAge, formatBytes, h, replaceChildren } from "./dom";
import { EgressView } from "./egress";
import { ProcessesView } from "./processes";
import { TerminalView } from "./terminal";

const kTokenKey = "agvisor.console.token";
const kListEveryMs = 2000;
const kMetricsEveryMs = 5000; // per sandbox; agvisord takes about a second per sample
const kMetricsInFlight = 2;
// The tabs of a sandbox's view.
type TabName = "terminal" | "desktop" | "processes" | "egress";

const root = h("main", { class: "console" });
document.body.append(root);

function showLogin(message = ""): void {
  const input = h("input", {
    attrs: { type: "password", id: "token", autocomplete: "off", spellcheck: "false", required: "" },
  });
  const error = h("p", { class: "error", attrs: { "data-role": "login-error" } }, message);
  const form = h(
    "form",
    { class: "login" },
    h("h1", {}, "agvisor console"),
    h("label", { attrs: { for: "token" } }, "agvisord token"),
    input,
    h("p", { class: "hint" }, "The token is in agvisord's --token-file. It stays in this tab only."),
    h("button", { attrs: { type: "submit" } }, "Sign in"),
    error,
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = input.value.trim();
    const api = new Api(token);
    api.call("GET", "/v1/sandboxes").then(
      () => {
        sessionStorage.setItem(kTokenKey, token);
        new ConsoleView(api).show();
      },
      (e: Error) => {
        error.textContent =
          e instanceof ApiError && e.status === 401 ? "That token is wrong." : e.message;
      },
    );
  });
  replaceChildren(root, form);
  input.focus();
}

interface Row {
  tr: HTMLTableRowElement;
  cells: Record<"name" | "state" | "image" | "limits" | "age" | "cpu" | "memory" | "actions", HTMLElement>;
  sandbox: Sandbox;
  stoppedActions?: boolean; // which buttons the actions cell holds
  metrics?: Metrics;
  metricsAt: number;
  metricsBusy: boolean;
}

class ConsoleView {
  readonly #api: Api;
  readonly #rows = new Map<string, Row>();
  readonly #tbody = h("tbody");
  readonly #notice = h("p", { class: "notice", attrs: { "data-role": "notice" } });
  readonly #detail = h("section", { class: "detail", attrs: { "data-role": "detail" } });
  #open: { id: string; view?: { element: HTMLElement; start(): void; dispose(): void } } | undefined;
  #timers: number[] = [];

  constructor(api: Api) {
    this.#api = api;
  }

  show(): void {
    const table = h(
      "table",
      { class: "sandboxes", attrs: { "data-role": "sandboxes" } },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ...["Name", "State", "Image", "Limits", "Age", "CPU", "Memory", ""].map((t) => h("th", {}, t)),
        ),
      ),
      this.#tbody,
    );
    replaceChildren(
      root,
      h(
        "header",
        {},
        h("h1", {}, "agvisor console"),
        button("Sign out", () => this.#signOut()),
      ),
      this.#notice,
      table,
      this.#detail,
    );
    void this.#refresh();
    this.#timers.push(window.setInterval(() => void this.#refresh(), kListEveryMs));
    this.#timers.push(window.setInterval(() => this.#sampleMetrics(), 1000));
  }

  #signOut(): void {
    for (const t of this.#timers) window.clearInterval(t);
    this.#closeDetail();
    sessionStorage.removeItem(kTokenKey);
    showLogin();
  }

  async #refresh(): Promise<void> {
    let list: Sandbox[];
    try {
      list = (await this.#api.call<{ sandboxes: Sandbox[] }>("GET", "/v1/sandboxes")).sandboxes ?? [];
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        this.#signOut();
        showLogin("agvisord no longer takes this token: sign in again.");
        return;
      }
      this.#notice.textContent = `Cannot list the sandboxes: ${(e as Error).message}`;
      return;
    }
    if (this.#notice.textContent?.startsWith("Cannot list")) this.#notice.textContent = "";
    const seen = new Set<string>();
    for (const s of list) {
      seen.add(s.id);
      let row = this.#rows.get(s.id);
      if (!row) {
        row = this.#newRow(s);
        this.#rows.set(s.id, row);
        this.#tbody.append(row.tr);
      }
      row.sandbox = s;
      this.#render(row);
    }
    for (const [id, row] of this.#rows) {
      if (seen.has(id)) continue;
      row.tr.remove();
      this.#rows.delete(id);
      if (this.#open?.id === id) {
        this.#closeDetail();
        this.#notice.textContent = `${row.sandbox.name ?? id} is gone.`;
      }
    }
    if (this.#open) this.#renderDetailHeader();
  }

  #newRow(s: Sandbox): Row {
    const cell = () => h("td");
    const cells = {
      name: cell(),
      state: cell(),
      image: cell(),
      limits: cell(),
      age: cell(),
      cpu: cell(),
      memory: cell(),
      actions: cell(),
    };
    const tr = h(
      "tr",
      { attrs: { "data-id": s.id } },
      cells.name,
      cells.state,
      cells.image,
      cells.limits,
      cells.age,
      cells.cpu,
      cells.memory,
      cells.actions,
    );
    return { tr, cells, sandbox: s, metricsAt: 0, metricsBusy: false };
  }

  #render(row: Row): void {
    const s = row.sandbox;
    row.cells.name.textContent = s.name ?? s.id;
    row.cells.state.textContent =
      s.end_reason && s.end_reason !== s.state ? `${s.state} (${s.end_reason})` : s.state;
    // A stopped named sandbox is only its /workspace: resume it (a new container on it) or
    // erase it; the others open.
    const stopped = s.state === "stopped";
    if (row.stoppedActions !== stopped) {
      row.stoppedActions = stopped;
      row.cells.actions.replaceChildren(
        ...(stopped
          ? [button("Resume", () => this.#resume(row.sandbox)), button("Erase", () => this.#erase(row.sandbox), "danger")]
          : [button("Open", () => this.#openDetail(s.id))]),
      );
    }
    row.cells.image.textContent = s.image;
    const limits: string[] = [];
    if (s.limits?.cpus) limits.push(`${s.limits.cpus} CPU`);
    if (s.limits?.memory) limits.push(s.limits.memory);
    row.cells.limits.textContent = limits.join(" · ") || "–";
    row.cells.age.textContent = s.created ? formatAge(Date.now() / 1000 - s.created) : "–";
    const m = s.running ? row.metrics : undefined;
    row.cells.cpu.textContent = m ? `${m.cpu_percent.toFixed(1)} %` : "–";
    row.cells.memory.textContent = m
      ? `${formatBytes(m.memory_bytes)} / ${formatBytes(m.memory_limit_bytes)}`
      : "–";
  }

  // Docker takes about a second per sample: a few at a time, each sandbox every few seconds.
  #sampleMetrics(): void {
    const now = Date.now();
    let busy = [...this.#rows.values()].filter((r) => r.metricsBusy).length;
    for (const row of this.#rows.values()) {
      if (busy >= kMetricsInFlight) break;
      if (!row.sandbox.running || row.sandbox.state !== "running" || row.metricsBusy) continue;
      if (now - row.metricsAt < kMetricsEveryMs) continue;
      row.metricsBusy = true;
      busy++;
      this.#api
        .call<Metrics>("GET", sandboxPath(row.sandbox.id, "/metrics"))
        .then(
          (m) => {
            row.metrics = m;
          },
          () => {
            row.metrics = undefined;
          },
        )
        .finally(() => {
          row.metricsBusy = false;
          row.metricsAt = Date.now();
          this.#render(row);
        });
    }
  }

  #openDetail(id: string): void {
    this.#closeDetail();
    this.#open = { id };
    for (const [rid, row] of this.#rows) row.tr.classList.toggle("selected", rid === id);
    this.#renderDetailHeader();
    this.#showTab("terminal");
  }

  #closeDetail(): void {
    this.#open?.view?.dispose();
    this.#open = undefined;
    for (const row of this.#rows.values()) row.tr.classList.remove("selected");
    replaceChildren(this.#detail);
  }

  #renderDetailHeader(): void {
    const open = this.#open;
    if (!open) return;
    const s = this.#rows.get(open.id)?.sandbox;
    if (!s) return;
    let header = this.#detail.querySelector<HTMLElement>(":scope > .detail-header");
    if (!header) {
      header = h("div", { class: "detail-header" });
      this.#detail.prepend(header);
    }
    const tab = (label: string, name: TabName) =>
      h("button", { class: "tab", attrs: { type: "button", "data-tab": name }, on: { click: () => this.#showTab(name) } }, label);
    const current = header.querySelector<HTMLElement>(".tab.active")?.dataset.tab;
    replaceChildren(
      header,
      h("h2", {}, s.name ?? s.id),
      h("span", { class: "state" }, s.state),
      h(
        "nav",
        {},
        tab("Terminal", "terminal"),
        tab("Desktop", "desktop"),
        tab("Processes", "processes"),
        tab("Egress", "egress"),
      ),
      h(
        "div",
        { class: "actions" },
        button("Stop", () => void this.#stop(s), "warn"),
        button("Delete", () => void this.#delete(s), "danger"),
      ),
    );
    if (current) header.querySelector(`.tab[data-tab="${current}"]`)?.classList.add("active");
  }

  #showTab(name: TabName): void {
    const open = this.#open;
    if (!open) return;
    open.view?.dispose();
    open.view?.element.remove();
    const view =
      name === "terminal"
        ? new TerminalView(this.#api, open.id)
        : name === "desktop"
          ? new DesktopView(this.#api, open.id)
          : name === "processes"
            ? new ProcessesView(this.#api, open.id)
            : new EgressView(this.#api, open.id);
    open.view = view;
    this.#detail.append(view.element);
    for (const t of this.#detail.querySelectorAll<HTMLElement>(".tab")) {
      t.classList.toggle("active", t.dataset.tab === name);
    }
    view.start();
  }

  async #stop(s: Sandbox): Promise<void> {
    const label = s.name ?? s.id;
    if (!(await confirmDialog(`Stop ${label}? Its processes end; a named sandbox keeps its /workspace.`, "Stop"))) return;
    await this.#act(() => this.#api.call("POST", sandboxPath(s.id, "/stop")), `${label} stopped.`);
  }

  async #delete(s: Sandbox): Promise<void> {
    const label = s.name ?? s.id;
    if (!(await confirmDialog(`Delete ${label}? It is removed with its data.`, "Delete"))) return;
    await this.#act(() => this.#api.call("DELETE", sandboxPath(s.id)), `${label} deleted.`);
  }

  async #resume(s: Sandbox): Promise<void> {
    const label = s.name ?? s.id;
    await this.#act(() => this.#api.call("POST", "/v1/sandboxes", { name: label }), `${label} resumed.`);
  }

  async #erase(s: Sandbox): Promise<void> {
    const label = s.name ?? s.id;
    if (!(await confirmDialog(`Erase ${label}? Its /workspace is deleted.`, "Erase"))) return;
    await this.#act(() => this.#api.call("DELETE", sandboxPath(s.id)), `${label} erased.`);
  }

  async #act(call: () => Promise<unknown>, done: string): Promise<void> {
    let said: string;
    try {
      await call();
      said = done;
    } catch (e) {
      said = (e as Error).message;
    }
    await this.#refresh();
    // After the refresh: it finds the sandbox gone and says "X is gone.", which is not news here.
    this.#notice.textContent = said;
  }
}

const saved = sessionStorage.getItem(kTokenKey);
if (saved) new ConsoleView(new Api(saved)).show();
else showLogin();
