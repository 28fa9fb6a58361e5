// `agvisor_bench --suite e2b`'s measurements (bench/e2b_suite.h starts agvisord --e2b and runs
// this): commands.run('true') through the official `e2b` SDK, spaced 200 ms and back to back,
// beside agvisor's own exec (POST /v1/sandboxes/ID/exec on the same agvisord, same sandbox) of
// `true` and of what the SDK runs (`/bin/bash -l -c true`), in one run; and create-to-first-
// command through the SDK. Prints one JSON object.
//
// Environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (the SDK's), AGVISORD_URL and
// AGVISORD_TOKEN (agvisord's own API), E2B_SDK (the directory of web/'s package.json),
// E2B_BENCH_RUNS (samples per row, default 50), E2B_BENCH_TEMPLATE (the template, default base:
// another image's name compares a changed e2b-base built under another tag).
import { createRequire } from 'node:module';

const require = createRequire(`${process.env.E2B_SDK}/package.json`);
const { Sandbox } = require('e2b');
const runs = Number(process.env.E2B_BENCH_RUNS ?? 50);
const template = process.env.E2B_BENCH_TEMPLATE || 'base';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const stats = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return { n: s.length, p50: q(0.5), p95: q(0.95) };
};
async function sample(fn, spacedMs) {
  const out = [];
  for (let i = 0; i < runs; i++) {
    if (spacedMs) await sleep(spacedMs);
    const t0 = performance.now();
    await fn();
    out.push(performance.now() - t0);
  }
  return stats(out);
}

const creates = [];
for (let i = 0; i < 5; i++) {
  const t0 = performance.now();
  const s = await Sandbox.create(template, { timeoutMs: 120_000 });
  await s.commands.run('true');
  creates.push(performance.now() - t0);
  await s.kill();
}

const sbx = await Sandbox.create(template, { timeoutMs: 600_000 });
const own = (argv) => async () => {
  const r = await fetch(`${process.env.AGVISORD_URL}/v1/sandboxes/${sbx.sandboxId}/exec`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${process.env.AGVISORD_TOKEN}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ argv, user: 'user' }),
  });
  const j = await r.json();
  if (j.exit_code !== 0) throw new Error(`agvisor exec: ${JSON.stringify(j)}`);
};
const sdk = () => sbx.commands.run('true');
await sdk();
await own(['true'])();
const result = {
  create_to_first_command_ms: stats(creates),
  sdk_run_true_spaced_ms: await sample(sdk, 200),
  agvisor_exec_true_spaced_ms: await sample(own(['true']), 200),
  agvisor_exec_bash_login_true_spaced_ms: await sample(own(['/bin/bash', '-l', '-c', 'true']), 200),
  sdk_run_true_back_to_back_ms: await sample(sdk, 0),
  agvisor_exec_true_back_to_back_ms: await sample(own(['true']), 0),
};
await sbx.kill();
console.log(JSON.stringify(result));
