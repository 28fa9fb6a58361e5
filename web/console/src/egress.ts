// A sandbox's egress log (docs/egress.md, "Log"): its enforcer's last records, newest first,
// reloaded every few seconds. Every field is text (names and paths come from the sandbox).

import { Api, ApiError, sandboxPath } from "./api";
import { h } from "./dom";
import { PolledTable } from "./polled_table";

/** One record of GET .../egress/log (docs/openapi.yaml, EgressRecord). */
interface EgressRecord {
  time: string;
  via: string;
  name: string;
  port: number;
  allowed: boolean;
  reason: string;
  method: string;
  path: string;
  status: number;
  secret: string;
}

// The newest records shown: the console stays a glance, the CLI and the files have the rest.
const kShown = 30;

function row(e: EgressRecord): HTMLTableRowElement {
  const request = e.method ? `${e.method} ${e.path} ${e.status || "-"}` : "";
  return h(
    "tr",
    { class: e.allowed ? "allowed" : "denied" },
    h("td", {}, e.time.replace("T", " ").replace("Z", "")),
    h("td", {}, e.allowed ? "allowed" : "denied"),
    h("td", { class: "mono" }, `${e.via} ${e.name}:${e.port}`),
    h("td", { class: "mono" }, request + (e.secret ? ` (secret ${e.secret})` : "")),
    h("td", {}, e.reason),
  );
}

export class EgressView {
  readonly element: HTMLElement;
  readonly #table: PolledTable;

  constructor(api: Api, sandboxId: string) {
    const load = async () => {
      const r = await api.call<{ records: EgressRecord[] }>(
        "GET",
        sandboxPath(sandboxId, `/egress/log?last=${kShown}`),
      );
      return (r.records ?? []).reverse().map(row);
    };
    // 404: no egress network is served for it (no policy); 501: agvisord enforces none.
    const failed = (e: unknown) =>
      e instanceof ApiError && (e.status === 404 || e.status === 501)
        ? "This sandbox has no egress policy."
        : (e as Error).message;
    this.#table = new PolledTable(
      "egress",
      ["Time", "Verdict", "Destination", "Request", "Rule"],
      load,
      "Nothing recorded yet.",
      failed,
    );
    this.element = h("section", { class: "egress-view" }, this.#table.message, this.#table.element);
  }

  start(): void {
    this.#table.start();
  }

  dispose(): void {
    this.#table.stop();
  }
}
