// Builds the console's bundle, web/console/bundle/console.js and console.css, from
// web/console/src (the console, the <agvisor-desktop> element of web/src, noVNC, xterm.js) with
// esbuild. agvisord embeds these files at build time (src/agvisor/server/console_assets.S), so
// they are committed: the C++ build needs no npm. `--check` builds in memory and fails when the
// committed files are not what the sources make (web/run-tests runs it), and when a source
// writes markup from strings (innerHTML and kin): the console renders text only.
//
//   node console/build.mjs           rebuild the bundle (commit it with the sources)
//   node console/build.mjs --check   verify it
import * as esbuild from "esbuild";
import { readFile, readdir, writeFile, mkdir } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const check = process.argv.includes("--check");

const forbidden = /\b(innerHTML|outerHTML|insertAdjacentHTML|document\.write|createContextualFragment)\b/;
const sources = [
  ...(await readdir(path.join(here, "src"))).map((f) => path.join(here, "src", f)),
  path.join(here, "..", "src", "index.ts"),
];
let failed = false;
for (const file of sources) {
  const text = await readFile(file, "utf8");
  text.split("\n").forEach((line, i) => {
    if (forbidden.test(line)) {
      console.error(`${path.relative(here, file)}:${i + 1}: writes markup from a string: use textContent / h()`);
      failed = true;
    }
  });
}

const common = {
  bundle: true,
  minify: true,
  legalComments: "eof",
  charset: "utf8",
  target: "es2022",
  logLevel: "warning",
  absWorkingDir: here,
  write: false,
};
const outputs = [
  ...(await esbuild.build({ ...common, entryPoints: ["src/main.ts"], outfile: "bundle/console.js", format: "esm", platform: "browser" })).outputFiles,
  ...(await esbuild.build({ ...common, entryPoints: ["src/console.css"], outfile: "bundle/console.css" })).outputFiles,
];
await mkdir(path.join(here, "bundle"), { recursive: true });
for (const out of outputs) {
  const name = path.relative(here, out.path);
  if (!check) {
    await writeFile(out.path, out.contents);
    console.log(`wrote ${name} (${out.contents.length} bytes)`);
    continue;
  }
  let committed;
  try {
    committed = await readFile(out.path);
  } catch {
    committed = Buffer.alloc(0);
  }
  if (!committed.equals(Buffer.from(out.contents))) {
    console.error(`web/console/${name} is not what web/console/src makes: run \`npm run build:console\` in web/ and commit it`);
    failed = true;
  }
}
if (failed) process.exit(1);
if (check) console.log("console bundle: up to date with its sources");
