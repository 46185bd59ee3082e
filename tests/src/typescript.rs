//! The TypeScript example entity (`plugins/counter-ts`), built through `tessera build`'s own
//! code path (npm installs its tools, then componentize-js), once per process. Not part of
//! `build.rs`: the Rust plugins never depend on npm, and a machine without Node.js skips what
//! needs this, saying so.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The directory of the TypeScript counter, `plugins/counter-ts`.
pub fn counter_ts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("plugins")
        .join("counter-ts")
}

/// The TypeScript counter's component, built into `out_dir` by
/// [`tessera_host::cli::build_plugin`] (and compiled into the tests' cache of compiled plugins)
/// the first time it is asked for in this process; `None`
/// (after printing `SKIPPED: <what>`) when npm is not installed. A failed build panics with
/// npm's output.
pub fn counter_ts(out_dir: &Path, what: &str) -> Option<PathBuf> {
    static BUILT: OnceLock<Mutex<Option<PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(None));
    let mut built = built
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(path) = built.as_ref() {
        return Some(path.clone());
    }
    let npm_present = Command::new("npm")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !npm_present {
        println!("SKIPPED: {what} (npm is not installed, so plugins/counter-ts cannot be built)");
        return None;
    }
    let path = tessera_host::cli::build_plugin(&counter_ts_dir(), Some(out_dir))
        .unwrap_or_else(|error| panic!("plugins/counter-ts does not build: {error}"));
    // Compile it once into the tests' on-disk cache of compiled plugins: the nodes that
    // deploy it then load it from there instead of each compiling 12 MiB at the same time.
    let bytes = std::fs::read(&path).expect("the component was just written");
    crate::shared_runtime()
        .load(&bytes)
        .unwrap_or_else(|error| panic!("plugins/counter-ts does not load: {error}"));
    *built = Some(path.clone());
    Some(path)
}
