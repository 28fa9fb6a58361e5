// A sandbox's desktop: the <agvisor-desktop> element (web/src) with a desktop token this
// agvisord mints for the signed-in person (POST .../desktop/token), through this agvisord's
// gateway. Tokens live a minute: a reconnect mints a fresh one.

import "../../src/index";
import { Api, ApiError, DesktopToken, sandboxPath } from "./api";
import { button, h } from "./dom";

export class DesktopView {
  readonly element: HTMLElement;
  readonly #api: Api;
  readonly #id: string;
  readonly #status: HTMLElement;
  readonly #box: HTMLElement;
  #desktop: HTMLElement | undefined;

  constructor(api: Api, sandboxId: string) {
    this.#api = api;
    this.#id = sandboxId;
    this.#status = h("span", { class: "status", attrs: { "data-role": "desktop-status" } });
    this.#box = h("div", { class: "desktop-box" });
    this.element = h(
      "section",
      { class: "desktop-view" },
      h("div", { class: "toolbar" }, this.#status, button("Reconnect", () => void this.#connect())),
      this.#box,
    );
  }

  start(): void {
    void this.#connect();
  }

  async #connect(): Promise<void> {
    this.dispose();
    this.#status.textContent = "connecting…";
    let minted: DesktopToken;
    try {
      minted = await this.#api.call<DesktopToken>("POST", sandboxPath(this.#id, "/desktop/token"), {
        ttl: 60,
      });
    } catch (e) {
      this.#status.textContent =
        e instanceof ApiError && e.status === 404
          ? "This sandbox has no desktop (create it with \"gui\": true)."
          : (e as Error).message;
      return;
    }
    const gateway = new URL(minted.gateway_path, location.href);
    gateway.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    const el = document.createElement("agvisor-desktop");
    el.setAttribute("gateway", gateway.href);
    el.setAttribute("token", minted.token);
    el.addEventListener("connect", () => (this.#status.textContent = "connected"));
    el.addEventListener("disconnect", () => (this.#status.textContent = "disconnected"));
    el.addEventListener("error", (ev) => {
      this.#status.textContent = String((ev as CustomEvent<string>).detail ?? "desktop error");
    });
    this.#desktop = el;
    this.#box.append(el);
  }

  dispose(): void {
    this.#desktop?.remove();
    this.#desktop = undefined;
  }
}
