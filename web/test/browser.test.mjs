// <agvisor-desktop> in real Chromium (Debian's package, driven by playwright-core; no browser is
// downloaded) against the real desktop gateway and a real desktop sandbox, started by the C++
// fixture tests/e2e/desktop_fixture (path in $AGVISOR_DESKTOP_FIXTURE; web/run-tests sets it): a
// gui sandbox's own desktop (agent-started Xvnc, xfce, the terminal) plus an input recorder window.
// Screenshots go to web/test-artifacts/.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { readFile, mkdir } from "node:fs/promises";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { chromium } from "playwright-core";

const webDir = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const artifacts = path.join(webDir, "test-artifacts");

let http, page, browser, fixture, lines, info, origin;

// One request to the fixture, one JSON answer.
async function fixtureCall(command) {
  fixture.stdin.write(command + "\n");
  const { value, done } = await lines.next();
  assert.ok(!done, "the fixture exited");
  return JSON.parse(value);
}
const sandboxExec = (cmd) => fixtureCall(`exec ${cmd}`);

async function poll(what, fn, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.fail(`${what}: not seen within ${timeoutMs} ms (last: ${JSON.stringify(last)})`);
}

const page_html = `<!doctype html>
<html><head><meta charset="utf-8">
<script type="importmap">{"imports": {
  "@novnc/novnc": "/node_modules/@novnc/novnc/core/rfb.js",
  "agvisor-desktop": "/dist/index.js"}}</script>
<style>body{margin:0} #box{width:800px;height:600px}</style></head>
<body><div id="box"></div>
<script type="module">
  import "agvisor-desktop";
  window.events = [];
  window.mount = (gateway, token) => {
    const el = document.createElement("agvisor-desktop");
    el.id = "desk";
    el.style.width = "100%"; el.style.height = "100%";
    for (const t of ["connect", "disconnect", "error"]) {
      el.addEventListener(t, (e) => window.events.push({ type: t, detail: e.detail ?? null }));
    }
    el.setAttribute("gateway", gateway);
    el.setAttribute("token", token);
    document.getElementById("box").appendChild(el);
  };
  window.ready = true;
</script></body></html>`;

const types = { ".js": "text/javascript", ".mjs": "text/javascript", ".html": "text/html" };

before(async () => {
  await mkdir(artifacts, { recursive: true });
  // The page and the package over loopback HTTP (a secure context, as noVNC wants).
  http = createServer(async (req, res) => {
    const url = new URL(req.url, "http://x");
    if (url.pathname === "/") {
      res.writeHead(200, { "content-type": "text/html" }).end(page_html);
      return;
    }
    const file = path.normalize(path.join(webDir, url.pathname));
    if (!file.startsWith(path.join(webDir, "dist")) &&
        !file.startsWith(path.join(webDir, "node_modules", "@novnc"))) {
      res.writeHead(404).end();
      return;
    }
    try {
      const body = await readFile(file);
      res.writeHead(200, { "content-type": types[path.extname(file)] ?? "application/octet-stream" });
      res.end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise((r) => http.listen(0, "127.0.0.1", r));
  origin = `http://127.0.0.1:${http.address().port}`;

  const bin = process.env.AGVISOR_DESKTOP_FIXTURE;
  assert.ok(bin, "set AGVISOR_DESKTOP_FIXTURE to the desktop_fixture binary (web/test does)");
  fixture = spawn(bin, ["--origin", origin], { stdio: ["pipe", "pipe", "inherit"] });
  lines = createInterface({ input: fixture.stdout })[Symbol.asyncIterator]();
  const first = await lines.next();
  assert.ok(!first.done, "desktop_fixture exited before it was ready");
  info = JSON.parse(first.value);

  const executablePath = execFileSync("sh", ["-c", "command -v chromium"]).toString().trim();
  browser = await chromium.launch({
    executablePath,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  page = await browser.newPage({ viewport: { width: 1000, height: 700 } });
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(origin + "/");
  await page.waitForFunction(() => window.ready === true);
});

after(async () => {
  await browser?.close();
  if (fixture) {
    fixture.stdin.end("quit\n");
    await new Promise((r) => fixture.once("exit", r));
  }
  http?.close();
});

const events = () => page.evaluate(() => window.events);
async function waitEvent(type, from) {
  return poll(`event ${type}`, async () => (await events()).slice(from).find((e) => e.type === type));
}
// Whether the canvas shows more than one colour (a desktop, not a black box).
const canvasHasContent = () =>
  page.evaluate(() => {
    const c = document.querySelector("#desk canvas");
    if (!c || !c.width) return false;
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    const first = d.slice(0, 3).join();
    for (let i = 0; i < d.length; i += 4 * 97) {
      if (`${d[i]},${d[i + 1]},${d[i + 2]}` !== first) return true;
    }
    return false;
  });
// Established TCP connections to Xvnc (port 5900 = 0x170C) inside the sandbox.
const vncConnections = async () => {
  const r = await sandboxExec("awk 'NR>1 && $2 ~ /:170C$/ && $4 == \"01\"' /proc/net/tcp | wc -l");
  return Number(r.out.trim());
};
const canvasBox = () => page.locator("#desk canvas").boundingBox();

test("renders the sandbox's desktop scaled to its box", async () => {
  await page.evaluate(([g, t]) => window.mount(g, t), [info.gateway, info.token]);
  await waitEvent("connect", 0);
  try {
    await poll("desktop pixels", canvasHasContent);
  } finally {
    await page.locator("#desk").screenshot({ path: path.join(artifacts, "desktop.png") });
  }
  const box = await canvasBox();
  // The screen (1280x800) scaled into the 800x600 box: as wide as the box, aspect kept.
  const height = (800 * info.height) / info.width;
  assert.ok(Math.abs(box.width - 800) <= 2 && Math.abs(box.height - height) <= 2,
            `${JSON.stringify(box)} for a ${info.width}x${info.height} screen`);
  assert.equal(await vncConnections(), 1);
});

test("clicks and keys reach the sandbox", async () => {
  const box = await canvasBox();
  const scale = box.width / info.width;
  // Into the recorder window (the fixture says where it is on the remote screen), a third of the
  // way in from its top left corner.
  const rx = Math.round(info.recorder.x + info.recorder.width / 3);
  const ry = Math.round(info.recorder.y + info.recorder.height / 3);
  await page.mouse.click(box.x + rx * scale, box.y + ry * scale);
  await poll(`pointer at ${rx},${ry} inside`, async () => {
    const r = await sandboxExec("xdotool getmouselocation");
    const m = /x:(\d+) y:(\d+)/.exec(r.out);
    return m && Math.abs(+m[1] - rx) <= 2 && Math.abs(+m[2] - ry) <= 2;
  });
  // The window saw the click there (it records screen coordinates).
  const click = await poll("the click in the window", async () => {
    const r = await sandboxExec("cat /tmp/clicks");
    return r.exit_code === 0 && r.out ? r.out : null;
  });
  const [cx, cy] = click.trim().split("\n")[0].split(" ").map(Number);
  assert.ok(Math.abs(cx - rx) <= 3 && Math.abs(cy - ry) <= 3, `click at ${cx},${cy}, not ${rx},${ry}`);
  await page.keyboard.type("Typed in Chromium: <agvisor> 42!");
  await page.keyboard.press("Enter");
  const typed = await poll("the typed text", async () => {
    const r = await sandboxExec("cat /tmp/typed");
    return r.exit_code === 0 && r.out.endsWith("\n") ? r.out : null;
  });
  assert.equal(typed, "Typed in Chromium: <agvisor> 42!\n");
  await page.locator("#desk").screenshot({ path: path.join(artifacts, "typed.png") });
});

test("follows its box when resized", async () => {
  await page.evaluate(() => {
    const b = document.getElementById("box");
    b.style.width = "512px";
    b.style.height = "600px";
  });
  await poll("canvas scaled to 512 wide", async () => {
    const b = await canvasBox();
    return Math.abs(b.width - 512) <= 2 && Math.abs(b.height - (512 * info.height) / info.width) <= 2;
  });
  await page.locator("#desk").screenshot({ path: path.join(artifacts, "resized.png") });
  await page.evaluate(() => {
    const b = document.getElementById("box");
    b.style.width = "800px";
  });
});

test("a bad token fires error with the gateway's message; a new token reconnects", async () => {
  let from = (await events()).length;
  await page.evaluate((t) => document.getElementById("desk").setAttribute("token", t), info.foreign_token);
  const bad = await waitEvent("error", from);
  assert.match(bad.detail, /token rejected/);
  await page.locator("#desk").screenshot({ path: path.join(artifacts, "bad-token.png") });

  from = (await events()).length;
  await page.evaluate((t) => document.getElementById("desk").setAttribute("token", t), info.rdp_token);
  const rdp = await waitEvent("error", from);
  assert.match(rdp.detail, /rdp/);

  from = (await events()).length;
  const fresh = (await fixtureCall("token")).token;
  await page.evaluate((t) => document.getElementById("desk").setAttribute("token", t), fresh);
  await waitEvent("connect", from);
  await poll("desktop pixels again", canvasHasContent);
});

test("removing the element disconnects and cleans up", async () => {
  const from = (await events()).length;
  await page.evaluate(() => document.getElementById("desk").remove());
  await waitEvent("disconnect", from);
  assert.equal(await page.evaluate(() => document.querySelectorAll("canvas").length), 0);
  // No session is left on the desktop: no established TCP connection to Xvnc's port inside.
  await poll("VNC connections closed inside the sandbox", async () => (await vncConnections()) === 0);
});

test("a page from another origin is refused", async () => {
  const other = await browser.newPage();
  // about:blank has origin "null": not in the allowlist.
  const result = await other.evaluate(
    ([g]) =>
      new Promise((resolve) => {
        const ws = new WebSocket(g);
        ws.onclose = (e) => resolve({ code: e.code, reason: e.reason });
      }),
    [info.gateway],
  );
  assert.equal(result.code, 4003);
  assert.match(result.reason, /origin/);
  await other.close();
});
