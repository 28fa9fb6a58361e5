// <agvisor-desktop gateway="wss://host/v1/desktop/ws" token="...">: one agvisor sandbox's
// desktop in a page, through agvisor's desktop gateway (docs/desktop-gateway.md), drawn by noVNC.
//
// - Renders into its own box and scales the remote screen to fit it (and follows resizes).
// - Mouse and keyboard go to the sandbox; a click focuses the desktop.
// - Fires `error` (a CustomEvent whose `detail` is a message a person can act on) when the
//   gateway refuses the token, the sandbox ends, or the connection drops; `connect` when the
//   desktop shows; `disconnect` when it goes.
// - A new `token` (or `gateway`) reconnects; removing the element disconnects and cleans up.
// - Importing the module where there is no DOM (server-side rendering in Node) does nothing:
//   noVNC is loaded only when an element is attached to a document.
//
// The token is sent as the WebSocket's first message, never in the URL, so it stays out of
// access logs. Mint it server side (`agvisor desktop token`, agvisord): it opens the desktop.

export const TAG = "agvisor-desktop";

/** The `detail` of the element's `error` event. */
export type AgvisorDesktopErrorEvent = CustomEvent<string>;

export interface AgvisorDesktopEventMap extends Omit<HTMLElementEventMap, "error"> {
  error: AgvisorDesktopErrorEvent;
  connect: CustomEvent<void>;
  disconnect: CustomEvent<void>;
}

// During server-side rendering there is no HTMLElement: the class then extends a stand-in and is
// never registered, so `import "agvisor-desktop"` is safe anywhere.
const ElementBase: typeof HTMLElement =
  typeof HTMLElement === "undefined"
    ? (class {} as unknown as typeof HTMLElement)
    : HTMLElement;

type Rfb = import("@novnc/novnc").default;
type RfbConstructor = typeof import("@novnc/novnc").default;

let rfbModule: Promise<RfbConstructor> | undefined;
function loadRfb(): Promise<RfbConstructor> {
  rfbModule ??= import("@novnc/novnc").then((m) => m.default);
  return rfbModule;
}

// Close codes of the gateway (4000-4999) carry a reason meant for people; others are generic.
function closeMessage(code: number, reason: string, opened: boolean): string {
  if (reason) return reason;
  if (!opened) return "could not connect to the desktop gateway";
  if (code === 1000) return "the desktop connection ended";
  return `the desktop connection dropped (code ${code})`;
}

export class AgvisorDesktop extends ElementBase {
  static get observedAttributes(): string[] {
    return ["gateway", "token", "resize"];
  }

  #screen: HTMLDivElement | undefined;
  #ws: WebSocket | undefined;
  #rfb: Rfb | undefined;
  #generation = 0; // bumps on every (re)connect and on removal: stale callbacks check it
  #connected = false;

  /** The gateway's WebSocket URL (ws:// or wss://). */
  get gateway(): string {
    return this.getAttribute("gateway") ?? "";
  }
  set gateway(v: string) {
    this.setAttribute("gateway", v);
  }
  /** The desktop token; setting a new one reconnects. */
  get token(): string {
    return this.getAttribute("token") ?? "";
  }
  set token(v: string) {
    this.setAttribute("token", v);
  }
  /** "scale" (default): the remote screen is scaled to the box; "remote": the sandbox's
   * screen is resized to the box (when its VNC server allows it). */
  get resize(): string {
    return this.getAttribute("resize") ?? "scale";
  }
  set resize(v: string) {
    this.setAttribute("resize", v);
  }
  /** True while the desktop is shown. */
  get connected(): boolean {
    return this.#connected;
  }

  connectedCallback(): void {
    if (getComputedStyle(this).display === "inline") this.style.display = "block";
    this.#reconnect();
  }

  disconnectedCallback(): void {
    this.#teardown();
  }

  attributeChangedCallback(name: string, oldValue: string | null, newValue: string | null): void {
    if (oldValue === newValue || !this.isConnected) return;
    if (name === "resize") {
      this.#applyResizeMode();
      return;
    }
    this.#reconnect();
  }

  /** Keyboard focus to the desktop. */
  override focus(options?: FocusOptions): void {
    if (this.#rfb) this.#rfb.focus(options);
    else super.focus(options);
  }

  /** Sends Ctrl+Alt+Del to the sandbox. */
  sendCtrlAltDel(): void {
    this.#rfb?.sendCtrlAltDel();
  }

  /** The remote screen as a data: URL (PNG), or "" when not connected. */
  screenshot(): string {
    return this.#rfb && this.#connected ? this.#rfb.toDataURL("image/png") : "";
  }

  #applyResizeMode(): void {
    if (!this.#rfb) return;
    const remote = this.resize === "remote";
    this.#rfb.resizeSession = remote;
    this.#rfb.scaleViewport = !remote;
  }

  #emit(type: "error" | "connect" | "disconnect", detail?: string): void {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }

  #teardown(): void {
    this.#generation++;
    const wasConnected = this.#connected;
    this.#connected = false;
    if (this.#rfb) {
      try {
        this.#rfb.disconnect();
      } catch {
        // already disconnected
      }
      this.#rfb = undefined;
    }
    if (this.#ws && this.#ws.readyState <= WebSocket.OPEN) this.#ws.close(1000);
    this.#ws = undefined;
    this.#screen?.remove();
    this.#screen = undefined;
    if (wasConnected) this.#emit("disconnect");
  }

  #reconnect(): void {
    this.#teardown();
    const gateway = this.gateway;
    const token = this.token;
    if (!gateway || !token) return;
    const generation = this.#generation;
    const current = () => generation === this.#generation && this.isConnected;

    const screen = document.createElement("div");
    screen.style.cssText = "width:100%;height:100%;overflow:hidden";
    this.appendChild(screen);
    this.#screen = screen;

    let ws: WebSocket;
    try {
      ws = new WebSocket(gateway);
    } catch (e) {
      this.#emit("error", `bad gateway URL ${gateway}: ${(e as Error).message}`);
      return;
    }
    ws.binaryType = "arraybuffer";
    this.#ws = ws;
    let opened = false;
    let failed = false;
    const fail = (message: string) => {
      if (failed || !current()) return;
      failed = true;
      this.#connected = false;
      this.#emit("error", message);
    };
    ws.addEventListener("close", (e) => {
      if (!current()) return;
      const wasConnected = this.#connected;
      this.#connected = false;
      if (e.code !== 1000 || !wasConnected) fail(closeMessage(e.code, e.reason, opened));
      if (wasConnected) this.#emit("disconnect");
    });
    // noVNC must be loaded before the socket opens: the first bytes after the token are RFB.
    Promise.all([
      loadRfb(),
      new Promise<void>((resolve) => ws.addEventListener("open", () => resolve(), { once: true })),
    ]).then(
      ([RFB]) => {
        if (!current() || ws.readyState !== WebSocket.OPEN) return;
        opened = true;
        ws.send(token);
        const rfb = new RFB(screen, ws, { shared: true });
        this.#rfb = rfb;
        rfb.background = "#000";
        rfb.focusOnClick = true;
        this.#applyResizeMode();
        rfb.addEventListener("connect", () => {
          if (!current()) return;
          this.#connected = true;
          this.#emit("connect");
        });
        rfb.addEventListener("securityfailure", (e: Event) => {
          const reason = (e as CustomEvent<{ reason?: string }>).detail?.reason;
          fail(`the desktop refused the connection${reason ? `: ${reason}` : ""}`);
        });
      },
      (e: unknown) => fail(`could not load noVNC: ${(e as Error).message ?? e}`),
    );
  }

  override addEventListener<K extends keyof AgvisorDesktopEventMap>(
    type: K,
    listener: (this: AgvisorDesktop, ev: AgvisorDesktopEventMap[K]) => unknown,
    options?: boolean | AddEventListenerOptions,
  ): void;
  override addEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject,
    options?: boolean | AddEventListenerOptions,
  ): void;
  override addEventListener(
    type: string,
    listener: EventListenerOrEventListenerObject,
    options?: boolean | AddEventListenerOptions,
  ): void {
    super.addEventListener(type, listener, options);
  }
}

if (typeof customElements !== "undefined" && !customElements.get(TAG)) {
  customElements.define(TAG, AgvisorDesktop);
}

declare global {
  interface HTMLElementTagNameMap {
    "agvisor-desktop": AgvisorDesktop;
  }
}
