// Importing the package where there is no DOM (server-side rendering in Node) must work and do
// nothing: no window, no customElements, no noVNC loaded.
import { test } from "node:test";
import assert from "node:assert/strict";

test("imports in plain Node without a DOM", async () => {
  assert.equal(typeof globalThis.window, "undefined");
  assert.equal(typeof globalThis.HTMLElement, "undefined");
  const mod = await import("agvisor-desktop");
  assert.equal(mod.TAG, "agvisor-desktop");
  assert.equal(typeof mod.AgvisorDesktop, "function");
  assert.deepEqual(mod.AgvisorDesktop.observedAttributes, ["gateway", "token", "resize"]);
  // noVNC touches `window` when it loads: it must not have been imported.
  assert.equal(typeof globalThis.window, "undefined");
});

test("the package's types and entry point are where package.json says", async () => {
  const { readFile, access } = await import("node:fs/promises");
  const pkg = JSON.parse(await readFile(new URL("../package.json", import.meta.url), "utf8"));
  await access(new URL(`../${pkg.types}`, import.meta.url));
  await access(new URL(`../${pkg.exports["."].default}`, import.meta.url));
  const dts = await readFile(new URL(`../${pkg.types}`, import.meta.url), "utf8");
  assert.match(dts, /"agvisor-desktop": AgvisorDesktop/);
  assert.match(dts, /get token\(\): string/);
});
