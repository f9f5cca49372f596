// Runs a wasm32-wasip1 program under Node's built-in WASI (`node:wasi`): cargo's runner
// for that target (CARGO_TARGET_WASM32_WASIP1_RUNNER="node --no-warnings
// scripts/wasi-run.mjs"), so `cargo test --target wasm32-wasip1` runs the test binaries.
// The program gets the arguments cargo passes, the environment, and the file system from
// `/`; its exit code is the process's.
import { readFile } from "node:fs/promises";
import { argv, env } from "node:process";
import { WASI } from "node:wasi";

const [program, ...args] = argv.slice(2);
const wasi = new WASI({
    version: "preview1",
    args: [program, ...args],
    env,
    preopens: { "/": "/" },
    returnOnExit: true,
});
const imports = wasi.getImportObject();
// Node 20 crashed (SIGSEGV inside V8) in its direct binding of fd_write, at a test
// binary's last line of output; called through a plain closure it does not.
const wasiImports = imports.wasi_snapshot_preview1;
const fdWrite = wasiImports.fd_write;
wasiImports.fd_write = (...a) => fdWrite(...a);
const module = await WebAssembly.compile(await readFile(program));
const instance = await WebAssembly.instantiate(module, imports);
// Not `process.exit`: leaving node to end on its own is the ordinary path.
process.exitCode = wasi.start(instance);
