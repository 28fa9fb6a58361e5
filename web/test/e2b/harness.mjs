// The E2B suites' agvisord: the build's daemon (AGVISORD_BINARY, set by web/run-e2b-tests) on a
// loopback port with a fresh token and state directory and --e2b, and the three variables the
// official `e2b` SDK reads (docs/e2b.md), set in this process so the SDK runs unchanged.
//
//   import { startAgvisord } from './harness.mjs';
//   const d = await startAgvisord();   // sets E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY
//   ... Sandbox.create({ metadata: d.metadata }) ...
//   await d.restart();                 // agvisord again on the same token and state
//   await d.stop();                    // kills every sandbox made with d.metadata, then agvisord
//
// Every sandbox a test makes carries `d.metadata` (a run id), and stop() kills them by it, so a
// failing test leaves nothing behind.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';

export async function startAgvisord({ args = [] } = {}) {
  const binary = process.env.AGVISORD_BINARY;
  if (!binary) throw new Error('set AGVISORD_BINARY (web/run-e2b-tests does)');
  const dir = mkdtempSync(join(tmpdir(), 'agvisor-e2b-'));
  const tokenFile = join(dir, 'token');
  let daemon, log = '', port, token;
  const env = {};
  // Starts agvisord on the directory (again, after restart(): same token and state).
  async function launch() {
    daemon = spawn(binary, ['--socket', join(dir, 'd.sock'), '--listen', '127.0.0.1:0',
      '--token-file', tokenFile, '--no-egress', '--e2b', ...args],
    { stdio: ['ignore', 'ignore', 'pipe'] });
    log = '';
    port = await new Promise((resolve, reject) => {
      daemon.stderr.on('data', (b) => {
        log += b;
        const m = log.match(/"tcp_port":"?(\d+)/);
        if (m) resolve(Number(m[1]));
      });
      daemon.on('exit', (code) => reject(new Error(`agvisord exited (${code}): ${log}`)));
    });
    token = readFileSync(tokenFile, 'utf8').trim();
    const origin = `http://127.0.0.1:${port}`;
    Object.assign(env, {
      E2B_API_URL: `${origin}/e2b`,
      E2B_SANDBOX_URL: origin,
      E2B_API_KEY: `e2b_${token}`,
    });
    Object.assign(process.env, env);
    Object.assign(handle, { port, origin, token });
  }
  async function halt() {
    daemon.kill('SIGTERM');
    await new Promise((resolve) => (daemon.exitCode !== null ? resolve() : daemon.on('exit', resolve)));
  }
  const handle = {};
  const metadata = { agvisorTest: `e2b-${randomBytes(6).toString('hex')}` };

  // E2B's REST API by hand (no SDK), for the hostile cases the SDK would not send.
  async function api(method, path, { body, headers = {} } = {}) {
    const res = await fetch(`${env.E2B_API_URL}${path}`, {
      method,
      headers: { 'X-API-Key': env.E2B_API_KEY, 'content-type': 'application/json', ...headers },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let json;
    try { json = text ? JSON.parse(text) : undefined; } catch { json = undefined; }
    return { status: res.status, json, text, headers: res.headers };
  }

  async function stop() {
    try {
      const q = new URLSearchParams({ agvisorTest: metadata.agvisorTest }).toString();
      const listed = await api('GET', `/v2/sandboxes?metadata=${encodeURIComponent(q)}&state=running,paused`);
      for (const s of listed.json ?? []) await api('DELETE', `/sandboxes/${s.sandboxID}`);
    } finally {
      await halt();
      rmSync(dir, { recursive: true, force: true });
    }
  }

  // Stops agvisord and starts it again on the same token and state directory (a new port).
  async function restart() {
    await halt();
    await launch();
  }

  await launch();
  return Object.assign(handle, { env, metadata, api, stop, restart, log: () => log });
}
