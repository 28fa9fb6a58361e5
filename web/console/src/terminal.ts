// A shell in a sandbox: xterm.js over agvisord's exec WebSocket with a PTY. Keys go in as stdin
// (Ctrl-C is the PTY's interrupt character: the shell's foreground job gets SIGINT), the
// terminal's size follows its box (resize messages), output is drawn as the PTY sends it.

import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { Api, closeText, parseStreamMessage, sandboxPath } from "./api";
import { button, h } from "./dom";

// bash when the image has it, else sh; interactive either way.
const kShell = "if command -v bash >/dev/null 2>&1; then exec bash -i; fi; exec sh -i";

export class TerminalView {
  readonly element: HTMLElement;
  readonly #api: Api;
  readonly #id: string;
  readonly #status: HTMLElement;
  readonly #screen: HTMLElement;
  #term: Terminal | undefined;
  #ws: WebSocket | undefined;
  #observer: ResizeObserver | undefined;
  readonly #encoder = new TextEncoder();

  constructor(api: Api, sandboxId: string) {
    this.#api = api;
    this.#id = sandboxId;
    this.#status = h("span", { class: "status", attrs: { "data-role": "terminal-status" } });
    this.#screen = h("div", { class: "term-screen", attrs: { "data-role": "terminal" } });
    this.element = h(
      "section",
      { class: "terminal-view" },
      h("div", { class: "toolbar" }, this.#status, button("New shell", () => this.#connect())),
      this.#screen,
    );
  }

  /** Call once the element is in the document (xterm.js measures its box). */
  start(): void {
    this.#connect();
  }

  #connect(): void {
    this.dispose();
    const term = new Terminal({
      cursorBlink: true,
      fontFamily: "monospace",
      fontSize: 14,
      scrollback: 5000,
      convertEol: false,
    });
    const fit = new FitAddon();
    term.loadAddon(fit);
    this.#screen.replaceChildren();
    term.open(this.#screen);
    fit.fit();
    this.#term = term;
    this.#status.textContent = "connecting…";

    const ws = this.#api.openStream(sandboxPath(this.#id, "/exec/ws"));
    this.#ws = ws;
    const send = (bytes: Uint8Array) => {
      if (ws.readyState !== WebSocket.OPEN) return;
      const msg = new Uint8Array(bytes.length + 1);
      msg[0] = 0; // stdin
      msg.set(bytes, 1);
      ws.send(msg);
    };
    ws.addEventListener("open", () => {
      ws.send(
        JSON.stringify({
          argv: ["/bin/sh", "-c", kShell],
          pty: true,
          stdin: true,
          rows: term.rows,
          cols: term.cols,
          env: { TERM: "xterm-256color" },
          timeout: 0,
        }),
      );
    });
    ws.addEventListener("message", (ev) => {
      const m = parseStreamMessage(ev.data);
      if (!m) return;
      if (m.kind === "stdout" || m.kind === "stderr") {
        term.write(m.data);
      } else if (m.kind === "started") {
        this.#status.textContent = `shell running (pid ${m.pid})`;
        term.focus();
      } else if (m.kind === "exit") {
        this.#status.textContent =
          m.signal > 0 ? `shell ended by signal ${m.signal}` : `shell exited (code ${m.exitCode})`;
      } else if (m.kind === "error") {
        this.#status.textContent = m.message;
      }
    });
    ws.addEventListener("close", (ev) => {
      if (this.#ws !== ws) return;
      if (!/^shell (exited|ended)/.test(this.#status.textContent ?? "") || ev.code !== 1000) {
        this.#status.textContent = closeText(ev);
      }
    });
    term.onData((data) => send(this.#encoder.encode(data)));
    term.onBinary((data) => send(Uint8Array.from(data, (c) => c.charCodeAt(0) & 0xff)));
    term.onResize(({ rows, cols }) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", rows, cols }));
    });
    this.#observer = new ResizeObserver(() => fit.fit());
    this.#observer.observe(this.#screen);
  }

  /** Ends the shell (closing the stream kills it) and frees the terminal. */
  dispose(): void {
    this.#observer?.disconnect();
    this.#observer = undefined;
    const ws = this.#ws;
    this.#ws = undefined;
    ws?.close(1000);
    this.#term?.dispose();
    this.#term = undefined;
  }
}
