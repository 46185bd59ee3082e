//! `tessera build` for a TypeScript or JavaScript entity: a directory with a `package.json`
//! whose `build` script writes `dist/<package name>.wasm` (the TypeScript SDK's `tessera-ts
//! build`, on componentize-js). npm installs the package's tools first if `node_modules` is
//! missing; the component is then copied where a Rust plugin's would go.

use super::BuildError;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The most of a failed build's output an error carries: the end of it, where the cause is.
const BUILD_OUTPUT_BYTES_MAX: usize = 8 * 1024;

/// Builds the npm package in `dir` (holding `package.json`) and copies its component to
/// `<out_dir>/<package name>.wasm`, by default `plugins/` in the target directory a Rust
/// plugin beside it would use.
pub(super) fn build(dir: &Path, out_dir: Option<&Path>) -> Result<PathBuf, BuildError> {
    let name = package_name(dir)?;
    npm_version()?;
    if !dir.join("node_modules").is_dir() {
        // `npm ci` when the package pins its tools in a lockfile, as every example does.
        let install = if dir.join("package-lock.json").exists() {
            "ci"
        } else {
            "install"
        };
        let output = npm(dir, &[install, "--no-audit", "--no-fund"])?;
        if !output.status.success() {
            return Err(BuildError::Npm(failure(
                &format!(
                    "npm {install} in {} failed ({})",
                    dir.display(),
                    output.status
                ),
                &output,
            )));
        }
    }
    let output = npm(dir, &["run", "build"])?;
    if !output.status.success() {
        return Err(BuildError::Npm(failure(
            &format!(
                "npm run build in {} failed ({})",
                dir.display(),
                output.status
            ),
            &output,
        )));
    }
    let artifact = dir.join("dist").join(format!("{name}.wasm"));
    if !artifact.exists() {
        return Err(BuildError::Npm(format!(
            "npm run build in {} succeeded but wrote no {}: the build script must write \
             dist/<package name>.wasm",
            dir.display(),
            artifact.display()
        )));
    }
    let out_dir = match out_dir {
        Some(out_dir) => out_dir.to_path_buf(),
        None => default_target_dir(dir)?.join("plugins"),
    };
    std::fs::create_dir_all(&out_dir)?;
    let destination = out_dir.join(format!("{name}.wasm"));
    std::fs::copy(&artifact, &destination)?;
    Ok(destination)
}

/// The package's name, which names its component.
fn package_name(dir: &Path) -> Result<String, BuildError> {
    let manifest = dir.join("package.json");
    let text = std::fs::read_to_string(&manifest)?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|error| BuildError::Npm(format!("{} is not JSON: {error}", manifest.display())))?;
    if json["scripts"]["build"].as_str().is_none() {
        return Err(BuildError::Npm(format!(
            "{} has no `build` script (the TypeScript SDK's is `tessera-ts build src/<entry>.ts \
             --out dist/<package name>.wasm`)",
            manifest.display()
        )));
    }
    match json["name"].as_str() {
        Some(name) if !name.is_empty() && !name.contains(['/', '\\']) => Ok(name.to_string()),
        _ => Err(BuildError::Npm(format!(
            "{} needs a plain `name` (no scope): it names the component",
            manifest.display()
        ))),
    }
}

fn npm_version() -> Result<(), BuildError> {
    match Command::new(npm_program()).arg("--version").output() {
        Ok(output) if output.status.success() => Ok(()),
        _ => Err(BuildError::NpmMissing),
    }
}

fn npm(dir: &Path, args: &[&str]) -> Result<Output, BuildError> {
    Command::new(npm_program())
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|_| BuildError::NpmMissing)
}

fn npm_program() -> std::ffi::OsString {
    std::env::var_os("NPM").unwrap_or_else(|| "npm".into())
}

/// A failure's headline and the end of what the command printed.
fn failure(headline: &str, output: &Output) -> String {
    let mut printed = String::from_utf8_lossy(&output.stdout).into_owned();
    printed.push_str(&String::from_utf8_lossy(&output.stderr));
    let printed = printed.trim();
    let start = printed.len().saturating_sub(BUILD_OUTPUT_BYTES_MAX);
    let start = (start..=printed.len())
        .find(|&index| printed.is_char_boundary(index))
        .unwrap_or(printed.len());
    format!("{headline}:\n{}", &printed[start..])
}

/// Where a Rust plugin beside the package would be built: `CARGO_TARGET_DIR`, else the
/// `target/` of the nearest enclosing cargo workspace, else the package's own `target/`.
fn default_target_dir(dir: &Path) -> Result<PathBuf, BuildError> {
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return Ok(PathBuf::from(target));
    }
    let dir = dir.canonicalize()?;
    let workspace = dir.ancestors().find(|ancestor| {
        std::fs::read_to_string(ancestor.join("Cargo.toml"))
            .is_ok_and(|manifest| manifest.contains("[workspace]"))
    });
    Ok(workspace.unwrap_or(&dir).join("target"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn package(json: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("package.json"), json).unwrap();
        dir
    }

    #[test]
    fn the_package_name_names_the_component() {
        let dir = package(r#"{"name":"counter-ts","scripts":{"build":"tessera-ts build"}}"#);
        assert_eq!(package_name(dir.path()).unwrap(), "counter-ts");
    }

    #[test]
    fn a_package_without_a_build_script_or_with_a_scoped_name_is_refused_clearly() {
        let dir = package(r#"{"name":"counter-ts"}"#);
        let error = package_name(dir.path()).unwrap_err().to_string();
        assert!(error.contains("has no `build` script"), "{error}");
        let dir = package(r#"{"name":"@acme/counter","scripts":{"build":"x"}}"#);
        let error = package_name(dir.path()).unwrap_err().to_string();
        assert!(error.contains("plain `name`"), "{error}");
        let dir = package("not json");
        let error = package_name(dir.path()).unwrap_err().to_string();
        assert!(error.contains("is not JSON"), "{error}");
    }

    #[test]
    fn a_failure_keeps_the_end_of_the_output() {
        let output = Command::new("sh")
            .args([
                "-c",
                "printf 'x%.0s' $(seq 1 20000); echo; echo the cause >&2; exit 3",
            ])
            .output()
            .unwrap();
        let message = failure("npm run build failed", &output);
        assert!(message.starts_with("npm run build failed:\n"));
        assert!(
            message.ends_with("the cause"),
            "{}",
            &message[message.len() - 40..]
        );
        assert!(message.len() <= BUILD_OUTPUT_BYTES_MAX + 64);
    }
}
