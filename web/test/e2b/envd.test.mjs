// envd through the official `e2b` SDK (2.51.0) against the build's agvisord (docs/e2b.md):
// commands (run, background, connect, kill, stdin, pty), files (read, write, list, stat, move,
// remove, watch, signed URLs, 50 MB), every envdVersion-gated feature the SDK has, output
// streamed as produced, a paused sandbox woken by a command, many streams at once, and hostile
// requests (forged and huge envelopes, another sandbox's token). One daemon and two sandboxes
// for the whole file (harness.mjs).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';

import { Sandbox } from 'e2b';

import { startAgvisord } from './harness.mjs';

let d;  // the harness's agvisord (it sets the SDK's three variables)
let sbx;  // the suite's sandbox (template base)

before(async () => {
  const t0 = Date.now();
  d = await startAgvisord();
  sbx = await Sandbox.create({ timeoutMs: 300_000, metadata: d.metadata });
  console.log(`# agvisord and the first sandbox: ${Date.now() - t0} ms`);
});

after(async () => {
  // The daemon's warnings, for a failure's diagnosis.
  const warnings = d?.log().split('\n').filter((l) => /"level":"(warn|error)"/.test(l)) ?? [];
  if (warnings.length) console.error(`# agvisord warnings:\n${warnings.slice(-20).join('\n')}`);
  const t0 = Date.now();
  await sbx?.kill().catch(() => {});
  await d?.stop();
  console.log(`# teardown: ${Date.now() - t0} ms`);
});

// A Connect server-stream request body: one envelope of `json` with `flags`.
function envelope(json, flags = 0, length) {
  const body = Buffer.from(json);
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(length ?? body.length, 1);
  return Buffer.concat([head, body]);
}

// The envelopes of a stream's answer as [{flags, json}].
function envelopes(buf) {
  const out = [];
  for (let at = 0; at + 5 <= buf.length;) {
    const n = buf.readUInt32BE(at + 1);
    out.push({ flags: buf[at], json: JSON.parse(buf.subarray(at + 5, at + 5 + n).toString()) });
    at += 5 + n;
  }
  return out;
}

// A raw envd request as the SDK's transport makes it, for the hostile cases.
function envdFetch(box, path, { body, type = 'application/connect+json', token, id } = {}) {
  return fetch(new URL(path, d.origin), {
    method: 'POST',
    headers: {
      'Content-Type': type,
      'Connect-Protocol-Version': '1',
      'E2b-Sandbox-Id': id ?? box.sandboxId,
      'E2b-Sandbox-Port': '49983',
      'X-Access-Token': token ?? box.envdAccessToken,
    },
    body,
  });
}

describe('commands', () => {
  test('run: stdout, stderr, exit code, envs, cwd, user', async () => {
    const r = await sbx.commands.run('echo out; echo err >&2; echo "$FOO"; pwd; id -un',
      { envs: { FOO: 'bar' }, cwd: '/tmp' });
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'out\nbar\n/tmp\nuser\n');
    assert.equal(r.stderr, 'err\n');
    const root = await sbx.commands.run('id -un', { user: 'root' });
    assert.equal(root.stdout, 'root\n');
    await assert.rejects(sbx.commands.run('exit 7'), (e) => e.exitCode === 7);
  });

  test('background, list by tag, connect after disconnect, kill', async () => {
    const h = await sbx.commands.run('echo started; sleep 600', { background: true });
    const listed = await sbx.commands.list();
    assert.ok(listed.some((p) => p.pid === h.pid && p.args.includes('echo started; sleep 600')),
      JSON.stringify(listed));
    await h.disconnect();
    const again = await sbx.commands.connect(h.pid);
    assert.equal(again.pid, h.pid);
    assert.equal(await sbx.commands.kill(h.pid), true);
    await assert.rejects(again.wait(), (e) => e.exitCode !== 0);
    assert.equal(await sbx.commands.kill(h.pid), false);
  });

  test('stdin: sendStdin then closeStdin (envd >= 0.5.2)', async () => {
    const h = await sbx.commands.run('cat', { background: true, stdin: true });
    await h.sendStdin('hello\n');
    await h.closeStdin();
    const r = await h.wait();
    assert.equal(r.stdout, 'hello\n');
  });

  test('pty: create, input, resize, exit', async () => {
    let out = '';
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += Buffer.from(d).toString(); } });
    await sbx.pty.resize(pty.pid, { cols: 91, rows: 7 });
    await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; exit\n'));
    await pty.wait().catch(() => {});
    assert.match(out, /7 91/);
  });

  test('timeoutMs ends the connection (TimeoutError), not the command', async () => {
    await assert.rejects(sbx.commands.run('sleep 30 # timeout-probe', { timeoutMs: 1000 }),
      { name: 'TimeoutError' });
    const listed = await sbx.commands.list();
    const probe = listed.find((p) => p.args.some((a) => a.includes('timeout-probe')));
    assert.ok(probe, JSON.stringify(listed));
    assert.equal(await sbx.commands.kill(probe.pid), true);
  });

  test('output is streamed as produced', async () => {
    const seen = [];
    const t0 = Date.now();
    await sbx.commands.run('echo a; sleep 1; echo b', { onStdout: (d) => seen.push([d, Date.now() - t0]) });
    assert.deepEqual(seen.map(([d]) => d).join(''), 'a\nb\n');
    const a = seen.find(([d]) => d.includes('a'))[1];
    const b = seen.find(([d]) => d.includes('b'))[1];
    assert.ok(b - a >= 800, `a at ${a} ms, b at ${b} ms: not streamed`);
  });
});

describe('files', () => {
  test('write, read, list with depth, stat, exists, rename, remove, makeDir', async () => {
    const info = await sbx.files.write('dir/a.txt', 'hello');
    assert.equal(info.path, '/home/user/dir/a.txt');
    assert.equal(await sbx.files.read('dir/a.txt'), 'hello');
    assert.deepEqual(await sbx.files.read('/home/user/dir/a.txt', { format: 'bytes' }),
      new TextEncoder().encode('hello'));
    const many = await sbx.files.write([{ path: '/tmp/m/1', data: 'x' }, { path: '/tmp/m/2', data: new Uint8Array([0, 255]) }]);
    assert.equal(many.length, 2);
    assert.deepEqual(await sbx.files.read('/tmp/m/2', { format: 'bytes' }), new Uint8Array([0, 255]));
    assert.equal(await sbx.files.makeDir('dir/sub'), true);
    assert.equal(await sbx.files.makeDir('dir/sub'), false);
    await sbx.files.write('dir/sub/deep.txt', 'd');
    const one = await sbx.files.list('dir');
    assert.deepEqual(one.map((e) => e.name).sort(), ['a.txt', 'sub']);
    const two = await sbx.files.list('dir', { depth: 2 });
    assert.ok(two.some((e) => e.path === '/home/user/dir/sub/deep.txt'));
    const st = await sbx.files.getInfo('dir/a.txt');
    assert.equal(st.type, 'file');
    assert.equal(st.size, 5);
    assert.equal(st.permissions, '-rw-r--r--');
    assert.ok(st.modifiedTime instanceof Date);
    // Written as the user: the user's own commands may change it.
    assert.equal((await sbx.commands.run('echo more >> dir/a.txt && stat -c %U dir/a.txt')).stdout, 'user\n');
    const moved = await sbx.files.rename('dir/a.txt', 'dir/b.txt');
    assert.equal(moved.path, '/home/user/dir/b.txt');
    assert.equal(await sbx.files.exists('dir/a.txt'), false);
    await sbx.files.remove('dir');
    assert.equal(await sbx.files.exists('dir'), false);
    await assert.rejects(sbx.files.read('nope'), { name: 'FileNotFoundError' });
    await assert.rejects(sbx.files.getInfo('nope'), { name: 'FileNotFoundError' });
  });

  test('streams and octet-stream uploads (envd >= 0.5.7); metadata is refused clearly', async () => {
    const stream = new ReadableStream({ start(c) { c.enqueue(new TextEncoder().encode('streamed')); c.close(); } });
    await sbx.files.write('/tmp/s.txt', stream);
    assert.equal(await sbx.files.read('/tmp/s.txt'), 'streamed');
    await sbx.files.write('/tmp/o.txt', 'octet', { useOctetStream: true });
    const rs = await sbx.files.read('/tmp/o.txt', { format: 'stream' });
    let got = '';
    for await (const chunk of rs) got += Buffer.from(chunk).toString();
    assert.equal(got, 'octet');
    await assert.rejects(sbx.files.write('/tmp/meta.txt', 'x', { metadata: { k: 'v' } }), /metadata/);
  });

  test('a 50 MB file round trip', async () => {
    const data = new Uint8Array(50 << 20);
    for (let i = 0; i < data.length; i += 4096) data[i] = (i / 4096) & 0xff;
    const t0 = Date.now();
    await sbx.files.write('/tmp/big.bin', data);
    const back = await sbx.files.read('/tmp/big.bin', { format: 'bytes' });
    console.log(`# 50 MB write + read: ${Date.now() - t0} ms`);
    assert.equal(back.length, data.length);
    assert.ok(Buffer.from(back).equals(Buffer.from(data)));
  });

  test('watchDir: events, recursive (>= 0.1.4), includeEntry (>= 0.6.3), allowNetworkMounts (>= 0.6.4)', async () => {
    await sbx.files.makeDir('/tmp/w/inner');
    const events = [];
    const w = await sbx.files.watchDir('/tmp/w', (e) => events.push(e),
      { recursive: true, includeEntry: true, allowNetworkMounts: true });
    await sbx.files.write('/tmp/w/f.txt', 'x');
    await sbx.files.write('/tmp/w/inner/g.txt', 'y');
    await sbx.files.remove('/tmp/w/f.txt');
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && !events.some((e) => e.type === 'remove')) {
      await new Promise((r) => setTimeout(r, 50));
    }
    await w.stop();
    const created = events.find((e) => e.type === 'create' && e.name === 'f.txt');
    assert.ok(created, JSON.stringify(events));
    assert.equal(created.entry?.path, '/tmp/w/f.txt');
    assert.ok(events.some((e) => e.name === 'inner/g.txt'), JSON.stringify(events));
    assert.ok(events.some((e) => e.type === 'remove' && e.name === 'f.txt'));
  });

  test('signed upload and download URLs', async () => {
    const up = await sbx.uploadUrl('/tmp/signed.txt');
    const form = new FormData();
    form.append('file', new Blob(['signed!']), '/tmp/signed.txt');
    const put = await fetch(up, { method: 'POST', body: form, headers: { 'E2b-Sandbox-Id': sbx.sandboxId } });
    assert.equal(put.status, 200, await put.clone().text());
    const down = await sbx.downloadUrl('/tmp/signed.txt');
    const get = await fetch(down, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId } });
    assert.equal(await get.text(), 'signed!');
    const forged = new URL(down);
    forged.searchParams.set('signature', 'v1_AAAA');
    const bad = await fetch(forged, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId } });
    assert.equal(bad.status, 401);
  });
});

describe('many streams and hostile requests', () => {
  test('65 commands stream at once', async () => {
    const runs = Array.from({ length: 65 }, (_, i) => sbx.commands.run(`sleep 1; echo ${i}`));
    const results = await Promise.all(runs);
    results.forEach((r, i) => assert.equal(r.stdout, `${i}\n`));
  });

  test('forged, short and huge envelopes end cleanly; the daemon serves on', async () => {
    const start = '/process.Process/Start';
    const cases = [
      Buffer.alloc(0),
      Buffer.from([0, 0, 0]),
      envelope('{}', 0, 0xffffffff),
      envelope('{"process":{"cmd":"/bin/true"}}', 1),
      envelope('{"process":{"cmd":"/bin/true"}}', 0, 3),
      Buffer.concat([envelope('{"process":{"cmd":"/bin/true"}}'), envelope('{}')]),
      envelope('{"process":{"cmd":[]}}'),
      envelope('not json'),
    ];
    for (const body of cases) {
      const res = await envdFetch(sbx, start, { body });
      assert.equal(res.status, 200);
      const ev = envelopes(Buffer.from(await res.arrayBuffer()));
      assert.equal(ev.length, 1, JSON.stringify(ev));
      assert.equal(ev[0].flags, 2);
      assert.ok(ev[0].json.error?.code, JSON.stringify(ev[0].json));
    }
    const unary = await envdFetch(sbx, '/process.Process/List', { body: '{', type: 'application/json' });
    assert.equal(unary.status, 400);
    assert.equal((await unary.json()).code, 'invalid_argument');
    const none = await envdFetch(sbx, '/process.Process/Nope', { body: '{}', type: 'application/json' });
    assert.equal((await none.json()).code, 'unimplemented');
    assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n');
  });

  // Directory watches: a stream each and no process each (250 processes at once would test the
  // sandbox's pids limit, the sandbox's business, not the door's).
  test('250 streams at once are all served, and end when their clients go', async () => {
    await sbx.files.makeDir('/tmp/w250');
    const body = envelope(JSON.stringify({ path: '/tmp/w250' }));
    // node:http, one connection each, destroyed at the end (fetch's pool reopens connections).
    const streams = Array.from({ length: 250 }, () => {
      const s = { seen: '', waiters: [] };
      s.req = http.request(new URL('/filesystem.Filesystem/WatchDir', d.origin), {
        method: 'POST',
        agent: false,
        headers: {
          'Content-Type': 'application/connect+json',
          'E2b-Sandbox-Id': sbx.sandboxId,
          'X-Access-Token': sbx.envdAccessToken,
          'Keepalive-Ping-Interval': '1',
        },
      }, (res) => {
        s.status = res.statusCode;
        res.on('data', (b) => { s.seen += b.toString('latin1'); s.waiters.forEach((w) => w()); });
        res.on('end', () => { s.ended = true; s.waiters.forEach((w) => w()); });
      });
      s.req.on('error', (e) => { s.error = e; s.waiters.forEach((w) => w()); });
      s.req.end(body);
      return s;
    });
    const until = (s, text) => new Promise((resolve, reject) => {
      const check = () => {
        if (s.seen.includes(text)) resolve();
        else if (s.ended || s.error) reject(new Error(`stream ended before ${text}: ${s.seen} ${s.error ?? ''}`));
      };
      s.waiters.push(check);
      check();
    });
    await Promise.all(streams.map((s) => until(s, '{"start":{}}')));
    assert.ok(streams.every((s) => s.status === 200));
    await sbx.files.write('/tmp/w250/x', 'x');
    await Promise.all(streams.map((s) => until(s, '"name":"x"')));
    for (const s of streams) s.req.destroy();
    assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n');
  });

  test("a sandbox's token does not open another sandbox", async () => {
    const other = await Sandbox.create({ timeoutMs: 120_000, metadata: d.metadata });
    try {
      const res = await envdFetch(sbx, '/process.Process/List',
        { body: '{}', type: 'application/json', id: other.sandboxId });
      assert.equal(res.status, 401);
      // The other sandbox's own token works for it, and only for it.
      assert.equal((await other.commands.run('echo mine')).stdout, 'mine\n');
      // Paused, a command wakes it.
      await other.pause();
      assert.equal((await other.commands.run('echo awake')).stdout, 'awake\n');
    } finally {
      await other.kill().catch(() => {});
    }
  });
});
