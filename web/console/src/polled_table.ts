// A table of one sandbox's that reloads itself every few seconds while its view is shown (the
// background processes, the egress log): a message line (empty, an error, or what an empty
// table means) and the rows its loader makes.

import { h, replaceChildren } from "./dom";

const kEveryMs = 3000;

export class PolledTable {
  readonly element: HTMLTableElement;
  readonly message: HTMLElement;
  readonly #body = h("tbody");
  readonly #load: () => Promise<HTMLTableRowElement[]>;
  readonly #whenEmpty: string;
  readonly #whenFailed: (e: unknown) => string;
  #timer: number | undefined;

  /** `load` makes the rows (it throws to show an error: `whenFailed` says it). */
  constructor(
    cls: string,
    headings: string[],
    load: () => Promise<HTMLTableRowElement[]>,
    whenEmpty: string,
    whenFailed: (e: unknown) => string = (e) => (e as Error).message,
  ) {
    this.#load = load;
    this.#whenEmpty = whenEmpty;
    this.#whenFailed = whenFailed;
    this.message = h("p", { class: "message" });
    this.element = h(
      "table",
      { class: cls },
      h("thead", {}, h("tr", {}, ...headings.map((t) => h("th", {}, t)))),
      this.#body,
    );
  }

  start(): void {
    void this.refresh();
    this.#timer = window.setInterval(() => void this.refresh(), kEveryMs);
  }

  async refresh(): Promise<void> {
    try {
      const rows = await this.#load();
      replaceChildren(this.#body, ...rows);
      this.message.textContent = rows.length ? "" : this.#whenEmpty;
    } catch (e) {
      this.message.textContent = this.#whenFailed(e);
    }
  }

  stop(): void {
    if (this.#timer !== undefined) window.clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
