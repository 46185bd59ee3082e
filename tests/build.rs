//! Builds every plugin under `../plugins` to a `wasm32-wasip2` component (a nested cargo with a
//! target dir of its own) and writes their paths as constants for the tests, plus a
//! `foreach_plugin!` macro that the test suite uses to prove every plugin has a test.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir
        .parent()
        .expect("the tests crate lives in the workspace root")
        .to_path_buf();
    let plugins_dir = root.join("plugins");
    // The Rust plugins only (a new one is a new member in plugins/Cargo.toml): not the npm
    // packages beside them, whose node_modules and dist/ change on every build of theirs.
    for name in plugin_names(&plugins_dir) {
        println!(
            "cargo:rerun-if-changed={}",
            plugins_dir.join(name).display()
        );
    }
    for watched in [
        "plugins/Cargo.toml",
        "plugins/Cargo.lock",
        "guest-sdk/src",
        "guest-sdk/Cargo.toml",
        "guest-sdk/macros",
        "wit",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // OUT_DIR is <target>/<profile>/build/<package>-<hash>/out: keep the plugin builds in
    // <target>/wasm-plugins so every profile shares them.
    let target_dir = out_dir
        .ancestors()
        .nth(4)
        .expect("OUT_DIR is nested inside the target dir")
        .join("wasm-plugins");
    ensure_target_installed();
    build_plugins(&plugins_dir, &target_dir);
    let names = plugin_names(&plugins_dir);
    let artifacts = target_dir.join(TARGET).join("release");
    let mut code = String::new();
    let mut idents = Vec::new();
    for name in &names {
        let file = artifacts.join(format!("{}.wasm", name.replace('-', "_")));
        assert!(
            file.exists(),
            "plugin {name} was built but {} is missing",
            file.display()
        );
        let ident = name.replace('-', "_");
        writeln!(
            code,
            "/// Path of the `{name}` plugin component.\npub const {}: &str = {:?};",
            ident.to_uppercase(),
            file.display().to_string()
        )
        .expect("writing to a String cannot fail");
        idents.push(ident);
    }
    writeln!(code, "/// Every plugin: `(crate name, component path)`.\npub const ALL_PLUGINS: &[(&str, &str)] = &[").expect("infallible");
    for (name, ident) in names.iter().zip(&idents) {
        writeln!(code, "    ({name:?}, {}),", ident.to_uppercase()).expect("infallible");
    }
    writeln!(code, "];").expect("infallible");
    writeln!(
        code,
        "/// Calls `$mac!(plugin_name)` for every plugin, so a test suite can demand a test per plugin.\n#[macro_export]\nmacro_rules! foreach_plugin {{\n    ($mac:ident) => {{"
    )
    .expect("infallible");
    for ident in &idents {
        writeln!(code, "        $mac!({ident});").expect("infallible");
    }
    writeln!(code, "    }};\n}}").expect("infallible");
    std::fs::write(out_dir.join("plugins.rs"), code).expect("OUT_DIR is writable");
}

fn plugin_names(plugins_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(plugins_dir)
        .expect("the plugins directory exists")
        .filter_map(Result::ok)
        .filter(|entry| entry.path().join("Cargo.toml").exists())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn ensure_target_installed() {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|output| {
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .any(|line| line.trim() == TARGET)
        })
        .unwrap_or(false);
    if installed {
        return;
    }
    let added = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status()
        .map(|status| status.success())
        .unwrap_or(false);
    if !added {
        panic!(
            "the {TARGET} target is missing and could not be installed: run `rustup target add {TARGET}`"
        );
    }
}

fn build_plugins(plugins_dir: &Path, target_dir: &Path) {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .arg("build")
        .arg("--release")
        .arg("--quiet")
        .arg("--target")
        .arg(TARGET)
        .arg("--manifest-path")
        .arg(plugins_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .expect("cargo can be started to build the plugins");
    assert!(
        status.success(),
        "building the plugins for {TARGET} failed (see the output above)"
    );
}
