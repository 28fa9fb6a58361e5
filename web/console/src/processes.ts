// A sandbox's background processes: the list (pid, command, state), starting one, and the
// output of one (agvisord's attach WebSocket: the last 1 MiB is replayed, then it follows).
// Output is text in a <pre> (textContent): whatever a process prints stays text.

import { Api, ProcessInfo, closeText, parseStreamMessage, sandboxPath } from "./api";
import { button, h } from "./dom";
import { PolledTable } from "./polled_table";

// The most output kept on the page per process; older text is dropped.
const kMaxOutputChars = 256 * 1024;

export class ProcessesView {
  readonly element: HTMLElement;
  readonly #api: Api;
  readonly #id: string;
  readonly #table: PolledTable;
  readonly #output: HTMLPreElement;
  readonly #outputTitle: HTMLElement;
  #ws: WebSocket | undefined;

  constructor(api: Api, sandboxId: string) {
    this.#api = api;
    this.#id = sandboxId;
    this.#table = new PolledTable(
      "processes",
      ["PID", "Command", "State", ""],
      () => this.#rows(),
      "No background processes.",
    );
    this.#output = h("pre", { class: "output", attrs: { "data-role": "process-output" } });
    this.#outputTitle = h("h3", {}, "Output");
    const command = h("input", {
      attrs: { type: "text", placeholder: "a command, e.g. python3 -m http.server 8000", "aria-label": "command" },
    });
    const form = h(
      "form",
      { class: "start-process" },
      command,
      h("button", { attrs: { type: "submit" } }, "Start in background"),
    );
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const text = command.value.trim();
      if (!text) return;
      void this.#start(text).then(() => (command.value = ""));
    });
    this.element = h(
      "section",
      { class: "processes-view" },
      form,
      this.#table.message,
      this.#table.element,
      this.#outputTitle,
      this.#output,
    );
  }

  start(): void {
    this.#table.start();
  }

  refresh(): Promise<void> {
    return this.#table.refresh();
  }

  async #rows(): Promise<HTMLTableRowElement[]> {
    const r = await this.#api.call<{ processes: ProcessInfo[] }>(
      "GET",
      sandboxPath(this.#id, "/processes"),
    );
    return (r.processes ?? []).map((p) =>
      h(
        "tr",
        { attrs: { "data-pid": String(p.pid) } },
        h("td", {}, String(p.pid)),
        h("td", { class: "mono" }, String(p.argv0)),
        h("td", {}, p.running ? "running" : `exited (${p.exit_code ?? "?"})`),
        h("td", {}, button("Output", () => this.#attach(p))),
      ),
    );
  }

  async #start(command: string): Promise<void> {
    try {
      const r = await this.#api.call<{ pid: number }>("POST", sandboxPath(this.#id, "/processes"), {
        command,
      });
      await this.refresh();
      this.#attach({ pid: r.pid, argv0: command, running: true, exit_code: null });
    } catch (e) {
      this.#table.message.textContent = (e as Error).message;
    }
  }

  #attach(p: ProcessInfo): void {
    this.#closeStream();
    this.#outputTitle.textContent = `Output of ${p.pid} (${p.argv0})`;
    this.#output.textContent = "";
    const decoder = new TextDecoder();
    const ws = this.#api.openStream(sandboxPath(this.#id, `/processes/${p.pid}/ws`));
    this.#ws = ws;
    const append = (text: string) => {
      let all = (this.#output.textContent ?? "") + text;
      if (all.length > kMaxOutputChars) all = all.slice(all.length - kMaxOutputChars);
      this.#output.textContent = all;
      this.#output.scrollTop = this.#output.scrollHeight;
    };
    ws.addEventListener("message", (ev) => {
      const m = parseStreamMessage(ev.data);
      if (!m) return;
      if (m.kind === "stdout" || m.kind === "stderr") append(decoder.decode(m.data, { stream: true }));
      else if (m.kind === "exit") append(`\n[exited with code ${m.exitCode}]\n`);
      else if (m.kind === "error") append(`\n[${m.message}]\n`);
    });
    ws.addEventListener("close", (ev) => {
      if (this.#ws === ws && ev.code !== 1000) append(`\n[${closeText(ev)}]\n`);
    });
  }

  #closeStream(): void {
    const ws = this.#ws;
    this.#ws = undefined;
    ws?.close(1000); // detaches: the process runs on
  }

  dispose(): void {
    this.#table.stop();
    this.#closeStream();
  }
}
