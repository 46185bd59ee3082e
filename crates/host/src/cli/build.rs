//! `tessera build`: a plugin crate to a `wasm32-wasip2` component, written under the crate's
//! own cargo target directory; or a TypeScript/JavaScript entity (a directory with a
//! `package.json`) to a component through npm (`npm`).

use super::output::outln;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod npm;

/// The compilation target of every plugin.
pub const PLUGIN_TARGET: &str = "wasm32-wasip2";

#[derive(Debug, clap::Args)]
pub(crate) struct BuildArgs {
    /// The plugin's directory: a crate (holding its Cargo.toml) or a TypeScript/JavaScript
    /// entity (holding its package.json, built by its `build` script).
    crate_dir: PathBuf,
    /// Where to write the component [default: `plugins/` in the crate's cargo target
    /// directory, wherever the command runs].
    #[arg(long)]
    out_dir: Option<PathBuf>,
}

/// Why a plugin did not build.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The directory has neither a Cargo.toml nor a package.json.
    #[error("{0} is not a plugin directory (no Cargo.toml, no package.json)")]
    NotACrate(PathBuf),
    /// The directory is an npm package and npm cannot be run.
    #[error(
        "npm is not installed (or not on PATH): install Node.js 18 or newer to build a \
         TypeScript/JavaScript entity"
    )]
    NpmMissing,
    /// npm failed (installing the package's tools or running its build script), with its
    /// output.
    #[error("{0}")]
    Npm(String),
    /// The wasm target is missing and rustup could not add it.
    #[error("the {PLUGIN_TARGET} target is missing: run `rustup target add {PLUGIN_TARGET}`")]
    TargetMissing,
    /// cargo failed.
    #[error("{0}")]
    Cargo(String),
    /// Copying the artifact failed.
    #[error("cannot write the component: {0}")]
    Io(#[from] std::io::Error),
}

pub(crate) fn run(args: BuildArgs) -> ExitCode {
    match build_plugin(&args.crate_dir, args.out_dir.as_deref()) {
        Ok(path) => {
            outln!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Builds the plugin crate in `crate_dir` in release mode for `wasm32-wasip2` and copies the
/// component to `<out_dir>/<crate name>.wasm` — by default `<target dir>/plugins/`, in the
/// cargo target directory of the crate (its workspace's, or `CARGO_TARGET_DIR`), not of the
/// directory the command runs in — returning that path.
///
/// A directory with a `package.json` (and no Cargo.toml) is a TypeScript/JavaScript entity:
/// npm installs its tools when `node_modules` is missing (`npm ci` with a lockfile), its
/// `build` script writes `dist/<package name>.wasm`, and that is copied to
/// `<out_dir>/<package name>.wasm`, by default in the target directory a Rust plugin beside it
/// would use.
///
/// ```no_run
/// let wasm = tessera_host::cli::build_plugin("plugins/counter".as_ref(), None).unwrap();
/// assert!(wasm.ends_with("plugins/target/plugins/counter.wasm"));
/// ```
pub fn build_plugin(crate_dir: &Path, out_dir: Option<&Path>) -> Result<PathBuf, BuildError> {
    let manifest = crate_dir.join("Cargo.toml");
    if !manifest.exists() {
        if crate_dir.join("package.json").exists() {
            return npm::build(crate_dir, out_dir);
        }
        return Err(BuildError::NotACrate(crate_dir.to_path_buf()));
    }
    ensure_target()?;
    let metadata = cargo_metadata(&manifest)?;
    let status = Command::new(cargo())
        .args([
            "build",
            "--release",
            "--target",
            PLUGIN_TARGET,
            "--manifest-path",
        ])
        .arg(&manifest)
        .status()
        .map_err(|error| BuildError::Cargo(format!("cannot run cargo: {error}")))?;
    if !status.success() {
        return Err(BuildError::Cargo(format!("cargo build failed ({status})")));
    }
    let artifact = metadata
        .target_directory
        .join(PLUGIN_TARGET)
        .join("release")
        .join(format!("{}.wasm", metadata.name.replace('-', "_")));
    let out_dir = match out_dir {
        Some(out_dir) => out_dir.to_path_buf(),
        None => metadata.target_directory.join("plugins"),
    };
    std::fs::create_dir_all(&out_dir)?;
    let destination = out_dir.join(format!("{}.wasm", metadata.name));
    std::fs::copy(&artifact, &destination)?;
    Ok(destination)
}

struct CrateMetadata {
    name: String,
    target_directory: PathBuf,
}

fn cargo_metadata(manifest: &Path) -> Result<CrateMetadata, BuildError> {
    let output = Command::new(cargo())
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(manifest)
        .output()
        .map_err(|error| BuildError::Cargo(format!("cannot run cargo metadata: {error}")))?;
    if !output.status.success() {
        return Err(BuildError::Cargo(
            String::from_utf8_lossy(&output.stderr).trim().to_string(),
        ));
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|error| BuildError::Cargo(format!("unreadable cargo metadata: {error}")))?;
    let manifest = manifest.canonicalize()?;
    let package = json["packages"]
        .as_array()
        .and_then(|packages| {
            packages.iter().find(|package| {
                package["manifest_path"]
                    .as_str()
                    .map(PathBuf::from)
                    .as_deref()
                    == Some(&manifest)
            })
        })
        .ok_or_else(|| BuildError::Cargo("the manifest has no [package]".into()))?;
    Ok(CrateMetadata {
        name: package["name"].as_str().unwrap_or_default().to_string(),
        target_directory: PathBuf::from(json["target_directory"].as_str().unwrap_or("target")),
    })
}

fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

fn ensure_target() -> Result<(), BuildError> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|output| {
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .any(|line| line.trim() == PLUGIN_TARGET)
        })
        .unwrap_or(false);
    if installed {
        return Ok(());
    }
    let added = Command::new("rustup")
        .args(["target", "add", PLUGIN_TARGET])
        .status()
        .map(|status| status.success())
        .unwrap_or(false);
    if added {
        Ok(())
    } else {
        Err(BuildError::TargetMissing)
    }
}
