#!/usr/bin/env node
// tessera-ts build <entry.ts> --out <component.wasm> [--wit <entity.wit>]
// tessera-ts test <file.test.ts>...
//
// Builds a TypeScript (or JavaScript) entity into a `tessera:entity@0.2.0` component: esbuild
// bundles the entry, the SDK and any other imports into one ES module (leaving the contract's
// `tessera:entity/*` imports to the component), then componentize-js embeds it in SpiderMonkey
// against the WIT. Both tools are resolved from the entity's own package (the directory this
// runs in), where `npm ci` installed them.
//
// `test` bundles each test file the same way for Node.js, with the contract's imports replaced
// by stubs that throw (tests run entities on `@tessera/sdk/testing`'s in-memory host), and
// runs them with `node --test`.
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const usage =
  "usage: tessera-ts build <entry.ts> --out <component.wasm> [--wit <entity.wit>]\n" +
  "       tessera-ts test <file.test.ts>...";
// The contract this SDK targets, from the repository checkout the SDK lives in.
const sdkDir = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const defaultWit = path.join(sdkDir, "..", "wit", "entity.wit");

function fail(message) {
  console.error(`tessera-ts: ${message}`);
  process.exit(1);
}

function parse(argv) {
  const [command, entry, ...rest] = argv;
  if (command !== "build" || !entry) fail(usage);
  const options = { entry, out: undefined, wit: defaultWit };
  for (let index = 0; index < rest.length; index += 2) {
    const [flag, value] = [rest[index], rest[index + 1]];
    if (value === undefined) fail(usage);
    if (flag === "--out") options.out = value;
    else if (flag === "--wit") options.wit = value;
    else fail(`unknown option ${flag}\n${usage}`);
  }
  if (!options.out) fail(usage);
  return options;
}

/** Imports `name` from the node_modules of the directory this runs in (or one above it). */
async function load(name) {
  for (let dir = process.cwd(); ; dir = path.dirname(dir)) {
    const packageDir = path.join(dir, "node_modules", name);
    const manifest = await readFile(path.join(packageDir, "package.json"), "utf8").catch(() => null);
    if (manifest !== null) {
      const { exports, module, main } = JSON.parse(manifest);
      const entry = exports?.import ?? exports?.["."]?.import ?? exports?.["."]?.default ?? module ?? main ?? "index.js";
      return import(pathToFileURL(path.join(packageDir, typeof entry === "string" ? entry : entry.default)).href);
    }
    if (path.dirname(dir) === dir) {
      fail(`${name} is not installed for ${process.cwd()}: run \`npm ci\` (or \`npm install\`) there`);
    }
  }
}

if (process.argv[2] === "test") {
  process.exit(await test(process.argv.slice(3)));
}
const options = parse(process.argv.slice(2));
const esbuild = await load("esbuild");
const { componentize } = await load("@bytecodealliance/componentize-js");

const work = await mkdtemp(path.join(tmpdir(), "tessera-ts-"));
try {
  const bundle = path.join(work, "entity.js");
  await esbuild.build({
    entryPoints: [options.entry],
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    external: ["tessera:entity/*"],
    outfile: bundle,
    logLevel: "warning",
  });
  const { component } = await componentize({
    sourcePath: bundle,
    // The text, not the path: the splicer runs in a WASI sandbox that sees only the entity's
    // directory, and the WIT lives in the SDK's checkout.
    witWorld: await readFile(options.wit, "utf8").catch((error) => fail(`cannot read the WIT: ${error.message}`)),
    worldName: "entity",
    // The host gives no network: fetch and incoming HTTP stay out of the component.
    disableFeatures: ["http", "fetch-event"],
  });
  await mkdir(path.dirname(path.resolve(options.out)), { recursive: true });
  await writeFile(options.out, component);
  console.log(`${options.out}: ${(component.length / (1 << 20)).toFixed(1)} MiB component`);
} catch (error) {
  fail(error instanceof Error ? error.message : String(error));
} finally {
  await rm(work, { recursive: true, force: true });
}

/** Bundles each test file for Node.js and runs them all with `node --test`; the exit code. */
async function test(files) {
  if (files.length === 0) fail(usage);
  const esbuild = await load("esbuild");
  const { spawnSync } = await import("node:child_process");
  const work = await mkdtemp(path.join(tmpdir(), "tessera-ts-test-"));
  try {
    const stub = {
      name: "tessera-contract-stub",
      setup(build) {
        build.onResolve({ filter: /^tessera:entity\// }, (args) => ({ path: args.path, namespace: "stub" }));
        build.onLoad({ filter: /.*/, namespace: "stub" }, () => ({
          contents: [
            "selfAddress", "get", "put", "tell", "ask", "schedule", "cancel", "passivate", "log", "nowMs",
          ].map((name) => `export function ${name}() { throw new Error("the host's ${name} is only inside a component: test with @tessera/sdk/testing"); }`).join("\n") +
            "\nfunction del() { throw new Error(\"the host's delete is only inside a component\"); }\nexport { del as delete };\n",
          loader: "js",
        }));
      },
    };
    const bundles = [];
    for (const [index, file] of files.entries()) {
      const outfile = path.join(work, `${index}-${path.basename(file).replace(/\.[cm]?[jt]s$/, "")}.mjs`);
      await esbuild.build({
        entryPoints: [file],
        bundle: true,
        format: "esm",
        platform: "node",
        target: "node18",
        outfile,
        plugins: [stub],
        logLevel: "warning",
      });
      bundles.push(outfile);
    }
    const run = spawnSync(process.execPath, ["--test", ...bundles], { stdio: "inherit" });
    return run.status ?? 1;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
