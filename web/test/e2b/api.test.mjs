// E2B's REST API on agvisord (docs/e2b.md) through the official `e2b` SDK, unchanged, on real
// gVisor sandboxes: create, getInfo, list (metadata, state, order, startedAfter, paging),
// setTimeout, the timeout itself, pause and connect, autoResume false, getMetrics and its range,
// kill, E2B's sandboxes' passwordless sudo (agvisor's own: none); the errors in E2B's shapes the SDK turns into its error classes
// (unknown routes and methods too); and hostile requests (another sandbox's token, forged ids,
// huge bodies, 250 connections at once).
//
//   AGVISORD_BINARY=build/ci/apps/agvisord/agvisord node --test test/e2b/api.test.mjs
//
// Run through web/run-e2b-tests (ctest: e2b_sdk_test). Needs dockerd + runsc and the
// agvisor/e2b-base image (agvisor image build e2b-base).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { execFileSync } from 'node:child_process';
import {
  Sandbox, AuthenticationError, NotFoundError, SandboxNotFoundError, SandboxError, Template,
  Volume, ALL_TRAFFIC,
} from 'e2b';
import { startAgvisord } from './harness.mjs';

let d;
before(async () => { d = await startAgvisord(); });
after(async () => { await d?.stop(); });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A server in the sandbox on `port` (python3's standard library only): GET answers "hello PORT",
// a WebSocket upgrade is accepted and its first text message echoed back. Put in and started
// through agvisord's own API (the E2B door's envd is another suite's).
const kServer = String.raw`
import base64, hashlib, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get('Upgrade', '').lower() != 'websocket':
            body = ('hello %s %s' % (sys.argv[1], self.path)).encode()
            self.send_response(200); self.send_header('Content-Length', str(len(body)))
            self.end_headers(); self.wfile.write(body); return
        key = self.headers['Sec-WebSocket-Key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
        self.send_response(101); self.send_header('Upgrade', 'websocket')
        self.send_header('Connection', 'Upgrade')
        self.send_header('Sec-WebSocket-Accept', base64.b64encode(hashlib.sha1(key.encode()).digest()).decode())
        self.end_headers(); self.wfile.flush()
        b0, b1 = self.rfile.read(2); n = b1 & 127; mask = self.rfile.read(4)
        data = bytes(c ^ mask[i % 4] for i, c in enumerate(self.rfile.read(n)))
        self.wfile.write(bytes([0x81, len(data)]) + data); self.wfile.flush()
HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
`;

// A command run through agvisord's own API (its output), to look inside a sandbox.
async function execV1(sandboxId, command) {
  const r = await fetch(`${d.origin}/v1/sandboxes/${sandboxId}/exec`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${d.token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ command }),
  });
  assert.equal(r.status, 200);
  return (await r.json()).stdout;
}

async function startServer(sandboxId, port) {
  const v1 = (method, path, body, type = 'application/json') => fetch(`${d.origin}/v1/sandboxes/${sandboxId}${path}`, {
    method, headers: { Authorization: `Bearer ${d.token}`, 'content-type': type }, body,
  });
  const put = await v1('PUT', '/files?path=/tmp/srv.py', kServer, 'application/octet-stream');
  assert.equal(put.status, 204, await put.text());
  const started = await v1('POST', '/processes', JSON.stringify({ argv: ['python3', '/tmp/srv.py', String(port)] }));
  assert.equal(started.status, 201, await started.text());
}

// What a wildcard DNS record *.DOMAIN (or an /etc/hosts line) gives: every name is agvisord.
const wildcard = (hostname, options, cb) => (options?.all
  ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4));

// GET http://HOST/PATH where HOST is exactly what getHost returned.
function get(host, path = '/') {
  return new Promise((resolve, reject) => {
    http.get(`http://${host}${path}`, { lookup: wildcard, agent: false }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    }).on('error', reject);
  });
}

// A WebSocket to ws://HOST/ (exactly what getHost returned): sends `text`, returns the echo.
function wsEcho(host, text) {
  return new Promise((resolve, reject) => {
    const req = http.request(`http://${host}/ws`, {
      lookup: wildcard, agent: false,
      headers: {
        Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13',
        'Sec-WebSocket-Key': Buffer.from('0123456789abcdef').toString('base64'),
      },
    });
    req.on('upgrade', (res, socket, head) => {
      const mask = Buffer.from([1, 2, 3, 4]);
      const payload = Buffer.from(text).map((c, i) => c ^ mask[i % 4]);
      socket.write(Buffer.concat([Buffer.from([0x81, 0x80 | payload.length]), mask, payload]));
      let got = head;
      socket.on('data', (c) => {
        got = Buffer.concat([got, c]);
        if (got.length >= 2 && got.length >= 2 + got[1]) {
          resolve({ status: res.statusCode, text: got.subarray(2, 2 + got[1]).toString() });
          socket.destroy();
        }
      });
    });
    req.on('response', (res) => reject(new Error(`no upgrade: ${res.statusCode}`)));
    req.on('error', reject);
    req.end();
  });
}

test('create two at once, getInfo, list by metadata with paging, setTimeout, kill', async () => {
  const [a, b] = await Promise.all([
    Sandbox.create({ metadata: { ...d.metadata, which: 'a', 'odd key': 'x&y=z%' }, timeoutMs: 120_000 }),
    Sandbox.create({ metadata: { ...d.metadata, which: 'b' }, envs: { FOO: 'bar' } }),
  ]);
  assert.match(a.sandboxId, /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/, 'ids are DNS labels');
  assert.notEqual(a.sandboxId, b.sandboxId);

  // E2B's default network is open: a bridge network, an interface beside loopback.
  assert.match(await execV1(a.sandboxId, 'cat /proc/net/dev'), /eth0/);

  const info = await a.getInfo();
  assert.equal(info.sandboxId, a.sandboxId);
  assert.equal(info.templateId, 'base');
  assert.equal(info.state, 'running');
  assert.equal(info.metadata.which, 'a');
  assert.equal(info.envdVersion, '0.6.4');
  assert.equal(info.cpuCount, 2);
  assert.equal(info.memoryMB, 512);
  const lifetime = info.endAt - info.startedAt;
  assert.ok(lifetime >= 119_000 && lifetime <= 121_000, `timeout 120 s, got ${lifetime} ms`);

  // The metadata filter, and paging one at a time.
  const only = await Sandbox.list({ query: { metadata: { ...d.metadata, which: 'b' } } }).nextItems();
  assert.deepEqual(only.map((s) => s.sandboxId), [b.sandboxId]);
  const odd = await Sandbox.list({ query: { metadata: { ...d.metadata, 'odd key': 'x&y=z%' } } }).nextItems();
  assert.deepEqual(odd.map((s) => s.sandboxId), [a.sandboxId], 'keys and values as the SDK encodes them');
  assert.deepEqual(await Sandbox.list({ query: { metadata: d.metadata, template: 'other' } }).nextItems(), []);
  const pager = Sandbox.list({ query: { metadata: d.metadata }, limit: 1 });
  const seen = [];
  while (pager.hasNext) seen.push(...(await pager.nextItems()).map((s) => s.sandboxId));
  assert.deepEqual(seen.sort(), [a.sandboxId, b.sandboxId].sort());
  // order: by start time (ties by id), newest first unless asc, across pages; startedAfter.
  const listed = await Sandbox.list({ query: { metadata: d.metadata } }).nextItems();
  const byStart = listed.map((s) => [s.startedAt.getTime(), s.sandboxId])
    .sort((x, y) => x[0] - y[0] || (x[1] < y[1] ? -1 : 1)).map((x) => x[1]);
  for (const [order, want] of [['asc', byStart], ['desc', [...byStart].reverse()]]) {
    const paged = Sandbox.list({ query: { metadata: d.metadata }, order, limit: 1 });
    const ids = [];
    while (paged.hasNext) ids.push(...(await paged.nextItems()).map((s) => s.sandboxId));
    assert.deepEqual(ids, want, `order ${order}`);
  }
  const first = new Date(Math.min(...listed.map((s) => s.startedAt.getTime())));
  assert.equal((await Sandbox.list({ query: { metadata: d.metadata, startedAfter: first } }).nextItems()).length, 2);
  assert.deepEqual(await Sandbox.list({
    query: { metadata: d.metadata, startedAfter: new Date(Date.now() + 60_000) },
  }).nextItems(), []);
  for (const bad of ['state=killed', 'order=newest', 'limit=0', 'startedAfter=yesterday', 'nextToken=forged']) {
    const r = await d.api('GET', `/v2/sandboxes?${bad}`);
    assert.equal(r.status, 400, `${bad}: ${r.text}`);
    assert.match(r.json.message, new RegExp(bad.split('=')[0]));
  }

  await a.setTimeout(600_000);
  const later = await a.getInfo();
  assert.ok(later.endAt - Date.now() > 590_000, 'setTimeout moved the end');

  assert.equal(await Sandbox.kill(a.sandboxId), true);
  assert.equal(await Sandbox.kill(a.sandboxId), false, 'a second kill finds nothing');
  await assert.rejects(Sandbox.getInfo(a.sandboxId), SandboxNotFoundError);
  assert.equal(await b.isRunning(), true);
  await b.kill();
  assert.equal(await b.isRunning(), false, 'envd health of a killed sandbox: 502, as E2B');
});

test('the timeout ends a sandbox; onTimeout pause keeps it, traffic and connect wake it', async () => {
  const [ends, pauses] = await Promise.all([
    Sandbox.create({ metadata: d.metadata, timeoutMs: 1_000, allowInternetAccess: false }),
    Sandbox.create({
      metadata: d.metadata, timeoutMs: 60_000, allowInternetAccess: false,
      lifecycle: { onTimeout: 'pause', autoResume: true },
    }),
  ]);
  await startServer(pauses.sandboxId, 8001);
  const host = pauses.getHost(8001);
  for (let i = 0; i < 100 && (await get(host)).status !== 200; i++) await sleep(100);
  await pauses.setTimeout(1_000);
  let state, ended = false;
  for (let i = 0; i < 40 && !(state === 'paused' && ended); i++) {
    await sleep(250);
    state = (await Sandbox.getInfo(pauses.sandboxId)).state;
    ended = !(await Sandbox.list({ query: { metadata: d.metadata } }).nextItems())
      .some((s) => s.sandboxId === ends.sandboxId);
  }
  assert.equal(state, 'paused');
  assert.ok(ended, 'the sandbox without onTimeout pause was killed at its timeout');
  await assert.rejects(Sandbox.getInfo(ends.sandboxId), SandboxNotFoundError);
  const info = await pauses.getInfo();
  assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true });
  const paused = await Sandbox.list({ query: { metadata: d.metadata, state: ['paused'] } }).nextItems();
  assert.deepEqual(paused.map((s) => s.sandboxId), [pauses.sandboxId]);
  assert.deepEqual(await Sandbox.list({ query: { metadata: d.metadata, state: ['running'] } }).nextItems(), []);

  // autoResume: traffic to the paused sandbox wakes it.
  assert.deepEqual(await get(host, '/woken'), { status: 200, body: 'hello 8001 /woken' });
  assert.equal((await pauses.getInfo()).state, 'running');

  // pause() and connect() by hand; a second pause says it was paused already.
  assert.equal(await pauses.pause(), true);
  assert.equal(await Sandbox.pause(pauses.sandboxId), false);
  assert.equal((await Sandbox.getInfo(pauses.sandboxId)).state, 'paused');
  const woken = await Sandbox.connect(pauses.sandboxId, { timeoutMs: 60_000 });
  assert.equal((await woken.getInfo()).state, 'running');

  const metrics = await woken.getMetrics();
  assert.equal(metrics.length, 1, 'the first call: one sample, taken now');
  assert.ok(metrics[0].memTotal > 0 && metrics[0].cpuCount > 0, JSON.stringify(metrics));
  // Asked once, the sandbox is sampled every 5 s (no call in between): the next call has those
  // samples between the first and its own; start/end select from them.
  await sleep(9_000);
  const history = await Sandbox.getMetrics(woken.sandboxId, { start: metrics[0].timestamp });
  const t = (m) => m.timestamp.getTime();
  const between = history.filter((m) => t(m) > t(metrics[0]) && t(m) < t(history.at(-1)));
  assert.ok(between.length >= 1, `sampled while asked: ${JSON.stringify(history)}`);
  assert.equal(t(history[0]), t(metrics[0]));
  const later = new Date(metrics[0].timestamp.getTime() + 1000);
  const ranged = await Sandbox.getMetrics(woken.sandboxId, { start: later, end: history[1].timestamp });
  assert.deepEqual(ranged.map((m) => m.timestamp.getTime()), [history[1].timestamp.getTime()]);
  const bad = await d.api('GET', `/sandboxes/${woken.sandboxId}/metrics?start=soon`);
  assert.equal(bad.status, 400);
  // A paused sandbox is killed as it is.
  assert.equal(await woken.pause(), true);
  assert.equal(await Sandbox.kill(woken.sandboxId), true);
  await assert.rejects(Sandbox.getInfo(woken.sandboxId), SandboxNotFoundError);
});

test("errors come in E2B's shapes, as the SDK's error classes", async () => {
  // The API key.
  await assert.rejects(Sandbox.list({ apiKey: 'e2b_0000' }).nextItems(), AuthenticationError);
  const noKey = await d.api('GET', '/v2/sandboxes', { headers: { 'X-API-Key': '' } });
  assert.equal(noKey.status, 401);
  assert.match(noKey.json.message, /E2B_API_KEY/);
  assert.equal(noKey.json.code, 401);
  // A template with no image of its name.
  await assert.rejects(Sandbox.create('no-such-template-xyz', { metadata: d.metadata }), (e) => {
    assert.ok(e instanceof NotFoundError || (e instanceof SandboxError && /404/.test(e.message)), `${e}`);
    assert.match(e.message, /agvisor image build|docker pull/);
    return true;
  });
  // Unknown and malformed ids.
  await assert.rejects(Sandbox.getInfo('nosuchsandbox0'), SandboxNotFoundError);
  for (const bad of ['Bad_Id', 'a.b', '-x', 'x'.repeat(64)]) {
    const r = await d.api('GET', `/sandboxes/${bad}`);
    assert.equal(r.status, 400, `${bad}: ${r.text}`);
    assert.match(r.json.message, /not a valid id/);
  }
  // What agvisor does not do answers 501 with a reason.
  await assert.rejects(Volume.create('vol-x'), (e) => /501/.test(e.message) && /volumes/.test(e.message));
  await assert.rejects(Template.exists('x'), (e) => /501/.test(e.message) && /agvisor image build/.test(e.message));
  await assert.rejects(
    Sandbox.create({ metadata: d.metadata, network: { denyOut: ['10.0.0.0/8'] } }),
    (e) => /501/.test(e.message) && /allow list/.test(e.message));
  await assert.rejects(
    Sandbox.create({ metadata: d.metadata, network: { denyOut: [ALL_TRAFFIC], allowOut: ['1.1.1.1'] } }),
    (e) => /501/.test(e.message) && /every port/.test(e.message));
  const transform = await d.api('POST', '/v2/sandboxes', {
    body: { templateID: 'base', metadata: d.metadata, network: { rules: { 'api.example.com': [{ transform: {} }] } } },
  });
  assert.equal(transform.status, 501);
  assert.match(transform.json.message, /rules/);
  const bad = await d.api('POST', '/v2/sandboxes', { body: { templateID: 'base', timeout: -5 } });
  assert.equal(bad.status, 400);
  assert.match(bad.json.message, /timeout/);
  // Paths and methods E2B's API does not have: its error shape, not agvisord's.
  for (const [method, path, status, says] of [
    ['GET', '/nosuch', 404, /no route GET \/e2b\/nosuch/],
    ['PATCH', '/v2/sandboxes/abc/nosuch', 404, /no route PATCH/],
    ['DELETE', '/sandboxes', 405, /allowed: (GET, POST|POST, GET)\)/],
    ['PUT', '/sandboxes/abc/pause', 405, /allowed: POST/],
  ]) {
    const r = await d.api(method, path);
    assert.equal(r.status, status, `${method} ${path}: ${r.text}`);
    assert.deepEqual(Object.keys(r.json).sort(), ['code', 'message'], r.text);
    assert.equal(r.json.code, status);
    assert.match(r.json.message, says);
  }
});

// E2B's templates promise passwordless sudo: E2B's sandboxes are made with the spec's
// allow_setuid (no no-new-privileges, and the agent's sudo broker, since runsc ignores setuid
// bits: gVisor issue 212), agvisor's own keep no-new-privileges and have no broker.
test("E2B's sandboxes have passwordless sudo, agvisor's own keep no-new-privileges", async () => {
  const v1 = { Authorization: `Bearer ${d.token}`, 'content-type': 'application/json' };
  const [sbx, own] = await Promise.all([
    Sandbox.create({ metadata: d.metadata, allowInternetAccess: false }),
    fetch(`${d.origin}/v1/sandboxes`, {
      method: 'POST', headers: v1,
      body: JSON.stringify({
        image: 'agvisor/e2b-base', network: 'none',
        labels: { 'agvisor-e2b-test': d.metadata.agvisorTest },
      }),
    }).then((x) => x.json()),
  ]);
  const ownId = own.container_name.replace(/^agvisor-/, '');
  const securityOpt = (id) => JSON.parse(execFileSync('docker',
    ['inspect', '--format', '{{json .HostConfig.SecurityOpt}}', `agvisor-${id}`]).toString());
  try {
    assert.deepEqual(securityOpt(sbx.sandboxId) ?? [], []);
    assert.deepEqual(securityOpt(ownId), ['no-new-privileges']);
    // sudo as the SDK runs it (as `user`, through a login bash): root, root's HOME, the
    // command's exit status, stdin and signals passed through.
    const run = (cmd) => sbx.commands.run(cmd).catch((e) => e.result ?? e);
    assert.equal((await run('id -u')).stdout, '1000\n');
    const root = await run('sudo -n id -u');
    assert.equal(root.stdout, '0\n', JSON.stringify(root));
    assert.equal((await run("sudo -n -u root sh -c 'echo $HOME'")).stdout, '/root\n');
    assert.equal((await run("sudo sh -c 'exit 7'")).exitCode, 7);
    assert.equal((await run('echo piped | sudo -n cat')).stdout, 'piped\n');
    // A signal to sudo reaches the command, and sudo exits as the command did (128+15).
    const term = await run('sudo sleep 30 & p=$!; sleep 0.3; kill -TERM $p; wait $p; echo $?');
    assert.equal(term.stdout, '143\n', JSON.stringify(term));
    // agvisor's own: no broker, and the image's sudo still meets no-new-privileges.
    const own = await fetch(`${d.origin}/v1/sandboxes/${ownId}/exec`, {
      method: 'POST', headers: v1,
      body: JSON.stringify({ user: 'user', command: 'test -e /run/agvisor-sudo/sudo.sock; echo socket $?; sudo -n id -u' }),
    }).then((x) => x.json());
    assert.match(own.stdout, /^socket 1\n$/, JSON.stringify(own));
    assert.notEqual(own.exit_code, 0, JSON.stringify(own));
    assert.match(own.stderr, /no new privileges/, JSON.stringify(own));
  } finally {
    await fetch(`${d.origin}/v1/sandboxes/${ownId}`, { method: 'DELETE', headers: v1 });
    await sbx.kill();
  }
});

test('autoResume false: a paused sandbox stays paused until connect', async () => {
  const sbx = await Sandbox.create({
    metadata: d.metadata, allowInternetAccess: false, timeoutMs: 120_000,
    lifecycle: { onTimeout: 'pause', autoResume: false },
  });
  assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: false });
  assert.equal(await sbx.isRunning(), true);
  assert.equal(await sbx.pause(), true);
  // envd: 502, as E2B answers for a sandbox it does not resume; getHost traffic: 409.
  assert.equal(await sbx.isRunning(), false);
  await assert.rejects(sbx.commands.run('echo woken'));
  await assert.rejects(sbx.files.read('/etc/hostname'));
  const r = await get(sbx.getHost(8000));
  assert.equal(r.status, 409, r.body);
  assert.match(JSON.parse(r.body).message, /autoResume false/);
  assert.equal((await sbx.getInfo()).state, 'paused', 'no call woke it');
  // connect does.
  const again = await Sandbox.connect(sbx.sandboxId);
  assert.equal((await again.getInfo()).state, 'running');
  assert.equal(await again.isRunning(), true);
  assert.equal((await again.commands.run('echo up')).stdout, 'up\n');
  await again.kill();
});

test('snapshots and fork: createSnapshot, a sandbox from it, listSnapshots, deleteSnapshot, fork', async () => {
  const src = await Sandbox.create({ metadata: d.metadata });
  const tag = `e2b-snap-${d.metadata.agvisorTest}`;
  const snapshots = [];
  let copy, forks = [];
  try {
    // A file written and an image file deleted (the mark is written only once it was there).
    await execV1(src.sandboxId, 'test -e /etc/issue.net && rm /etc/issue.net && echo src > /opt/mark');
    const snap = await src.createSnapshot({ name: tag });
    snapshots.push(snap.snapshotId);
    assert.equal(snap.snapshotId, `snapshot:${tag}`);
    assert.deepEqual(snap.names, [tag]);

    // The snapshot's id is a template: the new sandbox has the change and the deletion.
    copy = await Sandbox.create(snap.snapshotId, { metadata: d.metadata });
    assert.equal((await copy.getInfo()).templateId, snap.snapshotId);
    assert.equal((await copy.commands.run('cat /opt/mark; test -e /etc/issue.net || echo gone')).stdout,
      'src\ngone\n');

    // Listed: all, this sandbox's, by name; another sandbox has none.
    const ids = (list) => list.map((s) => s.snapshotId);
    assert.ok(ids(await Sandbox.listSnapshots().nextItems()).includes(snap.snapshotId));
    assert.deepEqual(ids(await src.listSnapshots().nextItems()), [snap.snapshotId]);
    assert.deepEqual(ids(await Sandbox.listSnapshots({ name: tag }).nextItems()), [snap.snapshotId]);
    assert.deepEqual(ids(await copy.listSnapshots().nextItems()), []);

    // deleteSnapshot: refused while a sandbox runs from it (naming it), then removed; again: false.
    await assert.rejects(Sandbox.deleteSnapshot(snap.snapshotId),
      (e) => /409/.test(e.message) && new RegExp(copy.sandboxId).test(e.message));
    await copy.kill();
    copy = undefined;
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true);
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false);
    assert.deepEqual(ids(await src.listSnapshots().nextItems()), []);
    // Only snapshots: another image is refused (and stays: later creates use it). A name with a
    // '/' matches no route (a 404: the SDK answers false, or throws when the 404 is not in E2B's
    // shape); any other reaches the core, which refuses it.
    for (const other of ['debian:bookworm', `sha256:${'0'.repeat(64)}`, 'snapshot:a:b']) {
      const r = await d.api('DELETE', `/templates/${encodeURIComponent(other)}`);
      assert.equal(r.status, 400, `${other}: ${r.text}`);
      assert.match(r.json.message, /outside agvisor's snapshot repository/);
    }
    const slash = await Sandbox.deleteSnapshot('agvisor/e2b-base:latest').catch((e) => e);
    assert.ok(slash === false || /404/.test(slash.message), `${slash}`);
    assert.equal((await d.api('DELETE', `/templates/${encodeURIComponent('../x')}`)).status, 404);
    await (await Sandbox.create({ metadata: d.metadata })).kill();  // the base template stays

    // fork of 2: each has the source's files, a running sandbox of its own (envd works), and a
    // write in one is seen neither in the other nor in the source.
    forks = await src.fork({ count: 2 });
    assert.equal(forks.length, 2);
    for (const f of forks) assert.ok(f instanceof Sandbox, `${f}`);
    snapshots.push((await forks[0].getInfo()).templateId);
    assert.match(snapshots[1], /^snapshot:e2b-fork-/);
    await execV1(forks[0].sandboxId, 'echo changed > /opt/mark');
    assert.equal((await forks[1].commands.run('cat /opt/mark')).stdout, 'src\n');
    assert.equal(await execV1(src.sandboxId, 'cat /opt/mark'), 'src\n');
    assert.equal((await forks[0].commands.run('cat /opt/mark')).stdout, 'changed\n');
  } finally {
    for (const f of forks) if (f instanceof Sandbox) await f.kill();
    if (copy) await copy.kill();
    await src.kill();
    for (const id of snapshots) await Sandbox.deleteSnapshot(id).catch(() => {});
  }
});

test('records and envd tokens survive an agvisord restart', async () => {
  const sbx = await Sandbox.create({
    metadata: { ...d.metadata, kept: 'yes' }, envs: { A: '1' }, timeoutMs: 300_000,
  });
  const before = await sbx.getInfo();
  await d.restart();
  const after = await Sandbox.getInfo(sbx.sandboxId);
  assert.equal(after.metadata.kept, 'yes');
  assert.equal(after.templateId, 'base');
  assert.equal(after.endAt.getTime(), before.endAt.getTime());
  const again = await Sandbox.connect(sbx.sandboxId);
  assert.equal(again.envdAccessToken, sbx.envdAccessToken, 'the derived token is the same');
  await again.kill();
});

test('getHost(port): HTTP and a WebSocket through exactly the host it returns', async () => {
  const sbx = await Sandbox.create({ metadata: d.metadata, allowInternetAccess: false });
  const host = sbx.getHost(8000);
  assert.equal(host, `8000-${sbx.sandboxId}.localhost:${d.port}`);
  assert.equal((await get(host)).status, 502, 'nothing listens yet: 502');
  // allowInternetAccess false: network none, loopback only.
  assert.doesNotMatch(await execV1(sbx.sandboxId, 'cat /proc/net/dev'), /eth0/);
  await startServer(sbx.sandboxId, 8000);
  let r;
  for (let i = 0; i < 100; i++) {
    r = await get(host, '/x?y=1');
    if (r.status === 200) break;
    await sleep(100);
  }
  assert.deepEqual(r, { status: 200, body: 'hello 8000 /x?y=1' });
  assert.deepEqual(await wsEcho(host, 'ping over e2b'), { status: 101, text: 'ping over e2b' });

  // A sandbox agvisor made by its own API (no E2B record) is not served on such a host name,
  // though its name is a DNS label: its ports stay behind agvisord's token.
  const own = await fetch(`${d.origin}/v1/sandboxes`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${d.token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ network: 'none', labels: { 'agvisor-e2b-test': d.metadata.agvisorTest } }),
  }).then((x) => x.json());
  const ownId = own.container_name.replace(/^agvisor-/, '');
  try {
    await startServer(ownId, 8000);
    const other = await get(`8000-${ownId}.localhost:${d.port}`);
    assert.notEqual(other.status, 200);
    assert.doesNotMatch(other.body, /hello/);
  } finally {
    await fetch(`${d.origin}/v1/sandboxes/${ownId}`, {
      method: 'DELETE', headers: { Authorization: `Bearer ${d.token}` },
    });
  }
  await sbx.kill();
});

test('hostile: another sandbox\'s token, forged ids, huge bodies, 250 connections', async () => {
  const [a, b] = await Promise.all([
    Sandbox.create({ metadata: d.metadata }),
    Sandbox.create({ metadata: d.metadata }),
  ]);
  // Each sandbox's envd token opens that sandbox only.
  const envd = (id, token, extra = {}) => fetch(`${d.origin}/filesystem.Filesystem/Stat`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json', 'E2b-Sandbox-Id': id, 'X-Access-Token': token, ...extra,
    },
    body: JSON.stringify({ path: '/' }),
  });
  assert.notEqual(a.envdAccessToken, b.envdAccessToken);
  const crossed = await envd(b.sandboxId, a.envdAccessToken);
  assert.equal(crossed.status, 401, await crossed.text());
  const noToken = await envd(a.sandboxId, '');
  assert.equal(noToken.status, 401);
  const own = await envd(a.sandboxId, a.envdAccessToken);
  assert.notEqual(own.status, 401, 'its own token passes the door');
  for (const forged of ['../x', 'A', 'a b', 'a.b', '']) {
    const r = await envd(forged, a.envdAccessToken);
    assert.equal(r.status, 400, `${forged}: ${r.status}`);
  }
  // A well-formed id of no sandbox: what E2B's proxy answers for a sandbox it cannot reach.
  const nobody = await envd('nosuchsandbox0', a.envdAccessToken);
  assert.equal(nobody.status, 502);
  // The API key does not open envd.
  const keyOnEnvd = await envd(a.sandboxId, d.env.E2B_API_KEY);
  assert.equal(keyOnEnvd.status, 401);

  // A body past the REST API's 1 MiB is refused, and agvisord serves on.
  const huge = await d.api('POST', '/v2/sandboxes', {
    body: JSON.stringify({ templateID: 'base', metadata: { x: 'y'.repeat(3 << 20) } }),
  });
  assert.equal(huge.status, 413);
  assert.equal(huge.json.code, 413);

  // 250 connections at once, each with a request in flight (the SDK opens one per stream).
  const agent = new http.Agent({ keepAlive: true, maxSockets: 300 });
  const results = await Promise.all(Array.from({ length: 250 }, () => new Promise((resolve, reject) => {
    http.get(`${d.env.E2B_API_URL}/sandboxes/${a.sandboxId}`,
      { agent, headers: { 'X-API-Key': d.env.E2B_API_KEY } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      }).on('error', reject);
  })));
  agent.destroy();
  const statuses = {};
  for (const s of results) statuses[s] = (statuses[s] ?? 0) + 1;
  assert.deepEqual(statuses, { 200: 250 });

  await Promise.all([a.kill(), b.kill()]);
});
