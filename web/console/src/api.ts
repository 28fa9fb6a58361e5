// agvisord's API as the console uses it (docs/openapi.yaml): JSON calls with the bearer token in
// the Authorization header, and WebSocket streams that send the token as their first message (a
// browser cannot set headers on a WebSocket). The token never goes into a URL.

export interface Sandbox {
  id: string;
  container_name: string;
  name: string | null;
  image: string;
  state: string;
  running: boolean;
  end_reason: string | null;
  created?: number | null;
  limits?: { cpus?: string; memory?: string };
}

export interface Metrics {
  cpu_percent: number;
  memory_bytes: number;
  memory_limit_bytes: number;
  pids: number;
  pids_limit: number;
}

export interface ProcessInfo {
  pid: number;
  argv0: string;
  running: boolean;
  exit_code: number | null;
}

export interface DesktopToken {
  token: string;
  expires_in: number;
  gateway_path: string;
}

/** An error answer of agvisord: its status, code ("not_found", ...) and message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export class Api {
  readonly #token: string;
  constructor(token: string) {
    this.#token = token;
  }

  /** One call; the answer's JSON, or an ApiError with agvisord's message. */
  async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.#token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
      redirect: "error",
    });
    const text = await res.text();
    let data: unknown = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!res.ok) {
      const err = (data as { error?: { code?: unknown; message?: unknown } } | null)?.error;
      throw new ApiError(
        res.status,
        typeof err?.code === "string" ? err.code : `http_${res.status}`,
        typeof err?.message === "string" ? err.message : `${method} ${path}: HTTP ${res.status}`,
      );
    }
    return data as T;
  }

  /** A WebSocket to a stream route of this agvisord (same origin), authenticated by its first
   * message. Listeners added to "open" after this call run after the token was sent. */
  openStream(path: string): WebSocket {
    const url = new URL(path, location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    ws.addEventListener("open", () => ws.send(JSON.stringify({ type: "auth", token: this.#token })), {
      once: true,
    });
    return ws;
  }
}

/** One message of an exec or attach stream (docs/agvisord.md, "WebSocket streams"). */
export type StreamEvent =
  | { kind: "stdout" | "stderr"; data: Uint8Array }
  | { kind: "started"; pid: number }
  | { kind: "exit"; exitCode: number; signal: number; timedOut: boolean }
  | { kind: "error"; message: string };

export function parseStreamMessage(data: unknown): StreamEvent | null {
  if (data instanceof ArrayBuffer) {
    const bytes = new Uint8Array(data);
    if (bytes.length === 0 || (bytes[0] !== 1 && bytes[0] !== 2)) return null;
    return { kind: bytes[0] === 1 ? "stdout" : "stderr", data: bytes.subarray(1) };
  }
  if (typeof data !== "string") return null;
  let m: Record<string, unknown>;
  try {
    m = JSON.parse(data);
  } catch {
    return null;
  }
  switch (m.type) {
    case "started":
      return { kind: "started", pid: Number(m.pid) };
    case "exit":
      return {
        kind: "exit",
        exitCode: Number(m.exit_code),
        signal: Number(m.signal ?? 0),
        timedOut: m.timed_out === true,
      };
    case "error": {
      const e = m.error as { message?: unknown } | undefined;
      return { kind: "error", message: typeof e?.message === "string" ? e.message : "stream error" };
    }
    default:
      return null;
  }
}

/** Why a stream closed, for people: the server's reason, else a generic text. */
export function closeText(ev: CloseEvent): string {
  if (ev.reason) return ev.reason;
  return ev.code === 1000 ? "the stream ended" : `the connection dropped (code ${ev.code})`;
}

/** The path of a sandbox's route: the id is encoded as a path segment. */
export function sandboxPath(id: string, rest = ""): string {
  return `/v1/sandboxes/${encodeURIComponent(id)}${rest}`;
}
