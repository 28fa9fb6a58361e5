// E2B's REST API on agvisord (docs/e2b.md) through the official `e2b` SDK, unchanged, on real
// gVisor sandboxes: create, getInfo, list (metadata, paging), setTimeout, the timeout itself,
// pause and connect, getMetrics, kill; the errors in E2B's shapes the SDK turns into its error
// classes; and hostile requests (another sandbox's token, forged ids, huge bodies, 250
// connections at once).
//
//   AGVISORD_BINARY=build/ci/apps/agvisord/agvisord node --test test/e2b/api.test.mjs
//
// Run through web/run-e2b-tests (ctest: e2b_sdk_test). Needs dockerd + runsc and the
// agvisor/e2b-base image (agvisor image build e2b-base).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import {
  Sandbox, AuthenticationError, NotFoundError, SandboxNotFoundError, SandboxError, Template,
  Volume, ALL_TRAFFIC,
} from 'e2b';
import { startAgvisord } from './harness.mjs';

let d;
before(async () => { d = await startAgvisord(); });
after(async () => { await d?.stop(); });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('create two at once, getInfo, list by metadata with paging, setTimeout, kill', async () => {
  const [a, b] = await Promise.all([
    Sandbox.create({ metadata: { ...d.metadata, which: 'a' }, timeoutMs: 120_000 }),
    Sandbox.create({ metadata: { ...d.metadata, which: 'b' }, envs: { FOO: 'bar' } }),
  ]);
  assert.match(a.sandboxId, /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/, 'ids are DNS labels');
  assert.notEqual(a.sandboxId, b.sandboxId);

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
  const pager = Sandbox.list({ query: { metadata: d.metadata }, limit: 1 });
  const seen = [];
  while (pager.hasNext) seen.push(...(await pager.nextItems()).map((s) => s.sandboxId));
  assert.deepEqual(seen.sort(), [a.sandboxId, b.sandboxId].sort());

  await a.setTimeout(600_000);
  const later = await a.getInfo();
  assert.ok(later.endAt - Date.now() > 590_000, 'setTimeout moved the end');

  assert.equal(await Sandbox.kill(a.sandboxId), true);
  assert.equal(await Sandbox.kill(a.sandboxId), false, 'a second kill finds nothing');
  await assert.rejects(Sandbox.getInfo(a.sandboxId), SandboxNotFoundError);
  await b.kill();
  assert.equal(await b.isRunning(), true, "envd's health says nothing of a sandbox");
});

test('the timeout ends a sandbox; onTimeout pause keeps it, connect wakes it', async () => {
  const [ends, pauses] = await Promise.all([
    Sandbox.create({ metadata: d.metadata, timeoutMs: 1_000 }),
    Sandbox.create({
      metadata: d.metadata, timeoutMs: 1_000, lifecycle: { onTimeout: 'pause', autoResume: true },
    }),
  ]);
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

  const woken = await Sandbox.connect(pauses.sandboxId, { timeoutMs: 60_000 });
  assert.equal((await woken.getInfo()).state, 'running');
  // pause() and connect() by hand; a second pause says it was paused already.
  assert.equal(await woken.pause(), true);
  assert.equal(await Sandbox.pause(woken.sandboxId), false);
  assert.equal((await Sandbox.getInfo(woken.sandboxId)).state, 'paused');
  await Sandbox.connect(woken.sandboxId);
  assert.equal((await Sandbox.getInfo(woken.sandboxId)).state, 'running');

  const metrics = await woken.getMetrics();
  assert.equal(metrics.length, 1);
  assert.ok(metrics[0].memTotal > 0 && metrics[0].cpuCount > 0, JSON.stringify(metrics));
  await woken.kill();
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
