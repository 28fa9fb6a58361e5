// agvisord's web console (docs/console.md) in real Chromium (Debian's package, driven by
// playwright-core), against a real agvisord (--console) and real runsc sandboxes made through
// its API: sign in, a sandbox appears in the live table with its limits and metrics, its
// terminal runs commands (typing, Ctrl-C, resize), a background process's output shows as text
// (hostile markup included), a desktop sandbox's screen shows and changes, delete asks first.
// Each view's screenshot goes to docs/console/ (docs/console.md shows them).
//
//   AGVISORD_BINARY=build/ci/apps/agvisord/agvisord node --test test/console.test.mjs
// (web/run-tests BUILD_DIR sets it). Needs dockerd + runsc and the agvisor/base and
// agvisor/desktop images. The agvisord runs with --no-egress: it touches no firewall.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { chromium } from "playwright-core";

const webDir = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const shots = path.join(webDir, "..", "docs", "console");
const agvisord = process.env.AGVISORD_BINARY;
const run = Math.random().toString(36).slice(2, 8);

let daemon, dir, origin, token, browser, page;
const created = [];
const started = Date.now();
const mark = (what) => console.log(`# ${((Date.now() - started) / 1000).toFixed(1)} s: ${what}`);

async function api(method, p, body) {
  const res = await fetch(origin + p, {
    method,
    headers: { Authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) throw new Error(`${method} ${p}: ${res.status} ${text}`);
  return data;
}

async function createSandbox(spec) {
  const s = await api("POST", "/v1/sandboxes", {
    lifetime: 600,
    network: "none",
    labels: { "console-test": run },
    ...spec,
  });
  created.push(s.id);
  return s;
}

async function poll(what, fn, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.fail(`${what}: not seen within ${timeoutMs} ms (last: ${JSON.stringify(last)})`);
}

const shot = (name, locator = page) => locator.screenshot({ path: path.join(shots, name) });
const row = (id) => page.locator(`tr[data-id="${id}"]`);
const cell = (id, n) => row(id).locator("td").nth(n);
const terminalText = () => page.locator('[data-role="terminal"] .xterm-rows').innerText();

let desktopSandbox; // created early: a desktop takes a few seconds to be ready

before(async () => {
  assert.ok(agvisord, "set AGVISORD_BINARY to the agvisord binary (web/run-tests does)");
  mkdirSync(shots, { recursive: true });
  dir = mkdtempSync(path.join(tmpdir(), "agvisor-console-"));
  daemon = spawn(agvisord, ["--socket", path.join(dir, "d.sock"), "--listen", "127.0.0.1:0",
    "--token-file", path.join(dir, "token"), "--no-egress", "--console"],
  { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  const port = await new Promise((resolve, reject) => {
    daemon.stderr.on("data", (b) => {
      log += b;
      const m = log.match(/"tcp_port":"?(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    daemon.on("exit", (code) => reject(new Error(`agvisord exited (${code}): ${log}`)));
  });
  origin = `http://127.0.0.1:${port}`;
  token = readFileSync(path.join(dir, "token"), "utf8").trim();
  desktopSandbox = createSandbox({ gui: true });
  desktopSandbox.catch(() => {}); // awaited by its test
  const executablePath = execFileSync("sh", ["-c", "command -v chromium"]).toString().trim();
  browser = await chromium.launch({
    executablePath,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  page.on("pageerror", (e) => console.error("page error:", e.message));
  page.on("console", (m) => { if (m.type() === "error") console.error("page console:", m.text()); });
  mark("agvisord and Chromium started");
});

after(async () => {
  await browser?.close();
  await Promise.allSettled(created.map((id) => api("DELETE", `/v1/sandboxes/${id}`)));
  if (daemon) {
    daemon.kill("SIGTERM");
    await new Promise((r) => (daemon.exitCode !== null ? r() : daemon.on("exit", r)));
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
  mark("cleaned up");
});

test("signs in with the token, which stays out of URLs", async () => {
  const res = await page.goto(origin + "/console");
  const csp = res.headers()["content-security-policy"];
  assert.match(csp, /script-src 'self';/);
  assert.match(csp, /frame-ancestors 'none'/);
  await page.locator("#token").waitFor();
  await shot("login.png");
  await page.fill("#token", token + "x");
  await page.click('form.login button[type="submit"]');
  await poll("the wrong token refused", async () =>
    (await page.locator('[data-role="login-error"]').innerText()).includes("wrong"));
  await page.fill("#token", token);
  await page.click('form.login button[type="submit"]');
  await page.locator('[data-role="sandboxes"]').waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem("agvisor.console.token")), token);
  assert.ok(!page.url().includes(token));
  // A reload keeps the session (sessionStorage), without asking again.
  await page.reload();
  await page.locator('[data-role="sandboxes"]').waitFor();
  mark("signed in");
});

let shell;
test("a sandbox made through the API appears with its limits and metrics", async () => {
  shell = await createSandbox({ name: `console-${run}`, limits: { cpus: 1, memory: "512m", disk: "none" } });
  await row(shell.id).waitFor({ timeout: 10000 });
  assert.equal(await cell(shell.id, 0).innerText(), `console-${run}`);
  // A refresh between the volume and the container of a named create may list it as stopped
  // for a moment (ls lists a named sandbox's volume without a container so).
  await poll("running", async () => (await cell(shell.id, 1).innerText()) === "running", 5000);
  assert.equal(await cell(shell.id, 3).innerText(), "1 CPU · 512m");
  await poll("CPU and memory from the metrics", async () =>
    /%$/.test(await cell(shell.id, 5).innerText()) && /MiB/.test(await cell(shell.id, 6).innerText()));
  assert.match(await cell(shell.id, 6).innerText(), /\/ 512\.0 MiB$/);
  await shot("sandboxes.png");
  mark("sandbox listed with metrics");
});

test("its terminal runs commands; Ctrl-C interrupts; the size follows the box", async () => {
  await row(shell.id).getByRole("button", { name: "Open" }).click();
  await poll("the shell started", async () =>
    (await page.locator('[data-role="terminal-status"]').innerText()).startsWith("shell running"));
  await page.locator('[data-role="terminal"]').click();
  await page.keyboard.type("echo $((6*7))-ok\n");
  await poll("the command's output", async () => (await terminalText()).includes("42-ok"));
  // Ctrl-C: the PTY interrupts the foreground job; the shell answers the next command at once.
  await page.keyboard.type("sleep 300\n");
  await new Promise((r) => setTimeout(r, 500));
  await page.keyboard.press("Control+C");
  await page.keyboard.type("echo after-$((1+1))-int\n");
  await poll("a command after Ctrl-C", async () => (await terminalText()).includes("after-2-int"), 10000);
  // The PTY has the terminal's size, and follows it.
  const size = async (tag) => {
    await page.keyboard.type(`echo ${tag} $(stty size)\n`);
    return poll(`stty size (${tag})`, async () => {
      const m = new RegExp(`${tag} (\\d+) (\\d+)`).exec(await terminalText());
      return m && { rows: +m[1], cols: +m[2] };
    });
  };
  const wide = await size("wide");
  assert.ok(wide.cols > 80, JSON.stringify(wide));
  await shot("terminal.png");
  await page.setViewportSize({ width: 700, height: 900 });
  await new Promise((r) => setTimeout(r, 500));
  await page.keyboard.type("clear\n");
  const narrow = await size("narrow");
  assert.ok(narrow.cols < wide.cols - 20, `${JSON.stringify(narrow)} after ${JSON.stringify(wide)}`);
  // Issue 33: the terminal was 420 px high whatever the window; it fills the view and follows
  // its height both ways.
  assert.ok(wide.rows > 30, `900 px high: ${JSON.stringify(wide)}`);
  await page.setViewportSize({ width: 700, height: 600 });
  await new Promise((r) => setTimeout(r, 500));
  await page.keyboard.type("clear\n");
  const short = await size("short");
  assert.ok(short.rows < narrow.rows - 10, `${JSON.stringify(short)} after ${JSON.stringify(narrow)}`);
  // Below ~1000 px the table broke words ("runnin g"): the state is one line at 700 px.
  const lines = await cell(shell.id, 1).evaluate((td) => {
    const r = document.createRange();
    r.selectNodeContents(td);
    return new Set([...r.getClientRects()].map((c) => Math.round(c.top))).size;
  });
  assert.equal(lines, 1, "the state cell's word is broken across lines");
  await page.setViewportSize({ width: 1200, height: 900 });
  await new Promise((r) => setTimeout(r, 500));
  await page.keyboard.type("clear\n");
  const tall = await size("tall");
  assert.ok(tall.rows > short.rows + 10, `${JSON.stringify(tall)} after ${JSON.stringify(short)}`);
  mark("terminal");
});

test("background processes show their output as text", async () => {
  await page.locator('button.tab[data-tab="processes"]').click();
  await page.fill('form.start-process input', "echo '<img src=x onerror=window.pwned=1>'; for i in 1 2 3; do echo tick$i; sleep 0.2; done; sleep 120");
  await page.click('form.start-process button[type="submit"]');
  const out = page.locator('[data-role="process-output"]');
  await poll("the process's output", async () => (await out.innerText()).includes("tick3"));
  assert.ok((await out.innerText()).startsWith("<img src=x onerror=window.pwned=1>\n"));
  assert.equal(await out.locator("img").count(), 0);
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  await poll("the process listed", async () => (await page.locator("table.processes tbody tr").count()) >= 1);
  await shot("processes.png");
  mark("processes");
});

// This agvisord runs --no-egress: the tab says the sandbox has no egress log to show.
test("the egress tab of a sandbox without a policy says so", async () => {
  await page.locator('button.tab[data-tab="egress"]').click();
  await poll("the egress tab's message", async () =>
    (await page.locator(".egress-view .message").innerText()) === "This sandbox has no egress policy.");
  assert.equal(await page.locator("table.egress tbody tr").count(), 0);
  mark("egress");
});

// The share of sampled canvas pixels that are magenta.
const magenta = () =>
  page.evaluate(() => {
    const c = document.querySelector("agvisor-desktop canvas");
    if (!c || !c.width) return 0;
    const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    let n = 0, all = 0;
    for (let i = 0; i < d.length; i += 4 * 31) {
      all++;
      if (d[i] > 200 && d[i + 1] < 60 && d[i + 2] > 200) n++;
    }
    return n / all;
  });

test("a desktop sandbox's screen shows and changes", async () => {
  const desk = await desktopSandbox;
  await row(desk.id).waitFor({ timeout: 10000 });
  await row(desk.id).getByRole("button", { name: "Open" }).click();
  await page.locator('button.tab[data-tab="desktop"]').click();
  await poll("the desktop connected", async () =>
    (await page.locator('[data-role="desktop-status"]').innerText()) === "connected");
  assert.equal(await magenta(), 0);
  // A magenta window drawn inside the sandbox shows in the page.
  await api("POST", `/v1/sandboxes/${desk.id}/processes`, {
    argv: ["xterm", "-geometry", "100x30+80+80", "-bg", "#ff00ff"],
    user: "user",
    env: { DISPLAY: ":0" },
  });
  await poll("the new window's pixels", async () => (await magenta()) > 0.05);
  await shot("desktop.png");
  mark("desktop");
});

// Issue 33: a stopped named sandbox vanished from the console; it is listed as stopped, with
// Resume (a new container on its /workspace) and Erase.
test("a stopped named sandbox can be resumed or erased", async () => {
  const kept = await createSandbox({ name: `console-kept-${run}`, limits: { memory: "256m", disk: "none" } });
  await api("POST", `/v1/sandboxes/${kept.id}/processes`, { argv: ["sh", "-c", "echo kept > /workspace/f"] });
  await api("POST", `/v1/sandboxes/${kept.id}/stop`);
  await poll("listed as stopped", async () => (await cell(kept.id, 1).innerText()) === "stopped", 10000);
  assert.equal(await row(kept.id).getByRole("button", { name: "Open" }).count(), 0);
  await row(kept.id).getByRole("button", { name: "Resume" }).click();
  await poll("resumed", async () => (await cell(kept.id, 1).innerText()) === "running", 20000);
  assert.equal(await page.locator('[data-role="notice"]').innerText(), `console-kept-${run} resumed.`);
  await api("POST", `/v1/sandboxes/${kept.id}/stop`);
  await poll("stopped again", async () => (await cell(kept.id, 1).innerText()) === "stopped", 10000);
  await row(kept.id).getByRole("button", { name: "Erase" }).click();
  await page.locator("dialog.confirm").getByRole("button", { name: "Erase" }).click();
  await row(kept.id).waitFor({ state: "detached", timeout: 15000 });
  const left = await api("GET", "/v1/sandboxes");
  assert.ok(!left.sandboxes.some((s) => s.id === kept.id), "erased: nothing of it is listed");
  mark("stopped: resumed and erased");
});

test("delete asks first, then removes the sandbox", async () => {
  await row(shell.id).getByRole("button", { name: "Open" }).click();
  await page.locator(".detail-header button.danger").click();
  const dialog = page.locator("dialog.confirm");
  await dialog.waitFor();
  assert.match(await dialog.innerText(), new RegExp(`Delete console-${run}\\?`));
  await shot("delete.png");
  await dialog.getByRole("button", { name: "Cancel" }).click();
  await new Promise((r) => setTimeout(r, 2500)); // a list refresh passes: still there
  assert.equal(await row(shell.id).count(), 1);
  await page.locator(".detail-header button.danger").click();
  await page.locator("dialog.confirm").getByRole("button", { name: "Delete" }).click();
  await row(shell.id).waitFor({ state: "detached", timeout: 15000 });
  // Issue 33: the list refresh overwrote "deleted" with "... is gone.".
  await poll("the notice", async () =>
    (await page.locator('[data-role="notice"]').innerText()) === `console-${run} deleted.`);
  await new Promise((r) => setTimeout(r, 2500)); // a list refresh passes: the notice stays
  assert.equal(await page.locator('[data-role="notice"]').innerText(), `console-${run} deleted.`);
  const after = await api("GET", "/v1/sandboxes");
  assert.ok(!after.sandboxes.some((s) => s.id === shell.id));
  mark("deleted");
});
