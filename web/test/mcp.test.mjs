// Interoperability of agvisor's MCP server with the official TypeScript SDK
// (@modelcontextprotocol/sdk): its Client over stdio (`agvisor mcp`) and over streamable HTTP
// (agvisord's /mcp, bearer token), on real gVisor sandboxes. One sandbox per transport.
//
//   AGVISOR_CLI_BINARY=build/ci/apps/agvisor/agvisor AGVISORD_BINARY=build/ci/apps/agvisord/agvisord \
//     node --test test/mcp.test.mjs
//
// Run through web/run-mcp-tests (ctest: mcp_interop_test), under flock /tmp/agvisor-egress.lock
// since it starts an agvisord. AGVISOR_MCP_DESKTOP=1 adds a screenshot of a desktop sandbox.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Ajv from 'ajv';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const cli = process.env.AGVISOR_CLI_BINARY;
const agvisord = process.env.AGVISORD_BINARY;
if (!cli || !agvisord) {
  throw new Error('set AGVISOR_CLI_BINARY and AGVISORD_BINARY (web/run-mcp-tests does)');
}

function text(result) {
  return result.content.map((c) => c.text ?? '').join('');
}

// Every inputSchema must be a valid JSON Schema, and must accept and refuse what the server does.
function checkSchemas(tools) {
  const ajv = new Ajv({ strict: true, allErrors: true });
  const names = tools.map((t) => t.name);
  for (const want of ['create_sandbox', 'list_sandboxes', 'stop_sandbox', 'delete_sandbox', 'exec',
    'read_file', 'write_file', 'list_files', 'start_process', 'list_processes', 'kill_process',
    'desktop_screenshot', 'desktop_click', 'desktop_move', 'desktop_type', 'desktop_key',
    'desktop_scroll']) {
    assert.ok(names.includes(want), `tools/list lacks ${want}`);
  }
  const validators = {};
  for (const t of tools) {
    assert.ok(t.description && t.description.length > 20, `${t.name} has a description`);
    assert.equal(t.inputSchema.type, 'object', `${t.name}'s schema is an object schema`);
    assert.ok(ajv.validateSchema(t.inputSchema), `${t.name}: ${ajv.errorsText(ajv.errors)}`);
    validators[t.name] = ajv.compile(t.inputSchema);
  }
  assert.ok(validators.exec({ sandbox: 'x', command: 'ls', timeout: 5, env: { A: 'b' } }));
  assert.ok(!validators.exec({ sandbox: 'x', command: 'ls', timeout: '5' }));
  assert.ok(!validators.exec({ command: 'ls' }));
  assert.ok(!validators.create_sandbox({ cpus: 1, bogus: true }));
}

// create, exec with progress, write_file + read_file, a bad argument; returns the sandbox id.
async function session(client) {
  const { tools } = await client.listTools();
  checkSchemas(tools);

  const created = await client.callTool({
    name: 'create_sandbox',
    arguments: { network: 'none', cpus: 1, memory: '512m', lifetime: 600 },
  });
  assert.ok(!created.isError, text(created));
  const sandbox = created.structuredContent.sandbox;
  assert.match(sandbox, /^agvisor-/);
  assert.equal(created.structuredContent.lifetime, 600);

  const progress = [];
  const ran = await client.callTool(
    {
      name: 'exec',
      arguments: {
        sandbox,
        // Output in pieces with pauses between them, so it is streamed as it comes.
        command: 'for i in 1 2 3; do echo line$i; sleep 0.3; done; echo oops >&2; cat; exit 3',
        stdin: 'from stdin\n',
        timeout: 60,
      },
    },
    undefined,
    { onprogress: (p) => progress.push(p) },
  );
  assert.ok(!ran.isError, text(ran));
  assert.equal(ran.structuredContent.exit_code, 3);
  assert.equal(ran.structuredContent.stdout, 'line1\nline2\nline3\nfrom stdin\n');
  assert.equal(ran.structuredContent.stderr, 'oops\n');
  assert.equal(ran.structuredContent.truncated, false);
  assert.ok(progress.length >= 2, `progress notifications: ${JSON.stringify(progress)}`);
  assert.ok(progress.some((p) => (p.message ?? '').includes('line1')));
  for (let i = 1; i < progress.length; i++) assert.ok(progress[i].progress > progress[i - 1].progress);

  const wrote = await client.callTool({
    name: 'write_file',
    arguments: { sandbox, path: '/tmp/mcp/dir/hello.txt', content: 'héllo ✓\n' },
  });
  assert.ok(!wrote.isError, text(wrote));
  const read = await client.callTool({
    name: 'read_file', arguments: { sandbox, path: '/tmp/mcp/dir/hello.txt' },
  });
  assert.ok(!read.isError, text(read));
  assert.equal(read.structuredContent.content, 'héllo ✓\n');
  assert.equal(read.structuredContent.encoding, 'utf-8');

  const bad = await client.callTool({ name: 'exec', arguments: { sandbox, command: 'true', timeout: 'soon' } });
  assert.equal(bad.isError, true);
  assert.equal(text(bad), "agvisor: exec: argument 'timeout' must be a number (got a string)");
  const missing = await client.callTool({ name: 'read_file', arguments: { sandbox, path: '/no/such' } });
  assert.equal(missing.isError, true);
  assert.match(text(missing), /^agvisor: .*\/no\/such/);
  // Issue 33: list_files's description named fields its result lacked. Each field it names
  // ("the fields a; b (...); ...") is in each entry, and no other.
  const described = tools.find((t) => t.name === 'list_files').description;
  const fields = described.slice(described.indexOf('the fields ') + 11, described.lastIndexOf('.'))
    .split(';').map((f) => f.trim().split(' ')[0]);
  const files = await client.callTool({ name: 'list_files', arguments: { sandbox, path: '/tmp/mcp/dir' } });
  assert.ok(!files.isError, text(files));
  assert.equal(files.structuredContent.entries.length, 1);
  for (const e of files.structuredContent.entries) {
    assert.deepEqual(Object.keys(e).sort(), fields.filter((f) => f !== 'link_target').sort(), described);
  }

  // Issue 33: a cancelled exec ran on to its timeout. The SDK sends notifications/cancelled when
  // the caller aborts; the command is killed then.
  const abort = new AbortController();
  const pending = client.callTool({ name: 'exec', arguments: { sandbox, command: 'sleep 77', timeout: 120 } },
    undefined, { signal: abort.signal });
  await new Promise((resolve) => setTimeout(resolve, 1500));
  abort.abort('the test gave up');
  await assert.rejects(pending);
  let left = '';
  for (let i = 0; i < 50; i++) {
    const ps = await client.callTool({ name: 'exec', arguments: { sandbox, command: 'pgrep -x sleep || echo none' } });
    left = ps.structuredContent.stdout;
    if (left === 'none\n') break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.equal(left, 'none\n', 'the cancelled exec still runs');

  // Issue 33: Docker's "No such container" came through; the core's one sentence now.
  const ghost = await client.callTool({ name: 'exec', arguments: { sandbox: 'no-such-mcp-box', command: 'true' } });
  assert.equal(ghost.isError, true);
  assert.equal(text(ghost), 'agvisor: no sandbox named no-such-mcp-box (`agvisor ls` lists them)');
  return sandbox;
}

function listed(container) {
  const out = execFileSync(cli, ['--json', 'ls'], { encoding: 'utf8' });
  return JSON.parse(out).some((s) => s.container === container);
}

test('stdio: agvisor mcp with the SDK client; its sandbox goes when the client goes', async () => {
  let sandbox;
  const transport = new StdioClientTransport({ command: cli, args: ['mcp'], stderr: 'inherit' });
  const client = new Client({ name: 'agvisor-interop-test', version: '1.0.0' });
  try {
    await client.connect(transport);
    assert.equal(client.getServerVersion().name, 'agvisor');
    sandbox = await session(client);
    assert.ok(listed(sandbox));
  } finally {
    // Closing ends stdin: the server removes what the session created, then exits.
    await client.close();
  }
  assert.ok(sandbox && !listed(sandbox), 'the sandbox of a finished stdio session is removed');
});

test('streamable HTTP: agvisord /mcp with the SDK client, bearer token', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'agvisor-mcp-'));
  const tokenFile = join(dir, 'token');
  const daemon = spawn(agvisord, ['--socket', join(dir, 'd.sock'), '--listen', '127.0.0.1:0',
    '--token-file', tokenFile, '--no-egress'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    daemon.stderr.on('data', (b) => {
      log += b;
      const m = log.match(/"tcp_port":"?(\d+)/);
      if (m) resolve(Number(m[1]));
    });
    daemon.on('exit', (code) => reject(new Error(`agvisord exited (${code}): ${log}`)));
  });
  const url = new URL(`http://127.0.0.1:${port}/mcp`);
  try {
    const token = readFileSync(tokenFile, 'utf8').trim();
    // Without the token: refused.
    const noToken = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(noToken.status, 401);

    const transport = new StreamableHTTPClientTransport(url, {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
    const client = new Client({ name: 'agvisor-interop-test', version: '1.0.0' });
    await client.connect(transport);
    const sandbox = await session(client);
    const deleted = await client.callTool({ name: 'delete_sandbox', arguments: { sandbox } });
    assert.ok(!deleted.isError, text(deleted));
    assert.ok(!listed(sandbox), 'delete_sandbox removed it');
    const after = await client.callTool({ name: 'exec', arguments: { sandbox, command: 'true' } });
    assert.equal(after.isError, true);
    await transport.terminateSession();
    await client.close();
  } finally {
    daemon.kill('SIGTERM');
    await new Promise((resolve) => (daemon.exitCode !== null ? resolve() : daemon.on('exit', resolve)));
    rmSync(dir, { recursive: true, force: true });
  }
});

test('stdio: a desktop sandbox screenshot as image content', { skip: process.env.AGVISOR_MCP_DESKTOP !== '1' }, async () => {
  let sandbox;
  const transport = new StdioClientTransport({ command: cli, args: ['mcp'], stderr: 'inherit' });
  const client = new Client({ name: 'agvisor-interop-test', version: '1.0.0' });
  try {
    await client.connect(transport);
    const created = await client.callTool({
      name: 'create_sandbox', arguments: { gui: true, network: 'none', lifetime: 600 },
    }, undefined, { timeout: 120000 });
    assert.ok(!created.isError, text(created));
    sandbox = created.structuredContent.sandbox;
    const moved = await client.callTool({ name: 'desktop_move', arguments: { sandbox, x: 10, y: 10 } });
    assert.ok(!moved.isError, text(moved));
    const shot = await client.callTool({ name: 'desktop_screenshot', arguments: { sandbox } });
    assert.ok(!shot.isError, text(shot));
    assert.equal(shot.content[0].type, 'image');
    assert.equal(shot.content[0].mimeType, 'image/png');
    const png = Buffer.from(shot.content[0].data, 'base64');
    assert.equal(png.subarray(1, 4).toString(), 'PNG');
    assert.ok(png.length > 1000);
  } finally {
    await client.close();
  }
  assert.ok(sandbox && !listed(sandbox));
});
