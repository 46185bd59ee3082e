//! An entity crate outside this repository's workspaces, depending on `tessera-sdk` alone (by
//! path, the line the SDK's docs give), with the README's entity — serde derives from the
//! prelude included — checks for `wasm32-wasip2`: no `serde` dependency of its own is needed.

use std::path::Path;
use std::process::Command;

const ENTITY: &str = r#"
use tessera_sdk::prelude::*;

#[derive(Default)]
struct Counter { value: i64 }

#[derive(Deserialize)]
enum Msg { Add(i64), Get }

#[derive(Serialize)]
struct Reply { value: i64 }

impl Entity for Counter {
    type Msg = Msg;
    type Reply = Reply;
    fn activate(ctx: &mut Ctx, _: Activation) -> Self { Counter { value: ctx.get("value").unwrap_or(0) } }
    fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<Reply, Error> {
        if let Msg::Add(n) = msg { self.value += n; ctx.put("value", &self.value); }
        Ok(Reply { value: self.value })
    }
}
export_entity!(Counter);
"#;

#[test]
fn an_entity_crate_outside_the_repository_needs_only_the_sdk() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root");
    let dir = tempfile::tempdir().expect("a directory");
    let manifest = format!(
        "[package]\nname = \"outside\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         [lib]\ncrate-type = [\"cdylib\"]\n\n[dependencies]\ntessera-sdk = {{ path = {:?} }}\n\n\
         [workspace]\n",
        root.join("guest-sdk").display().to_string()
    );
    std::fs::write(dir.path().join("Cargo.toml"), &manifest).expect("Cargo.toml");
    std::fs::create_dir(dir.path().join("src")).expect("src");
    std::fs::write(dir.path().join("src/lib.rs"), ENTITY).expect("lib.rs");
    // The plugins' lock file: the same dependency versions, resolved without the network.
    std::fs::copy(
        root.join("plugins/Cargo.lock"),
        dir.path().join("Cargo.lock"),
    )
    .expect("Cargo.lock");
    // A target dir of its own that outlives the test, so later runs check only the crate.
    let target_dir = std::env::temp_dir().join("tessera-test-sdk-out-of-tree");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["check", "--offline", "--target", "wasm32-wasip2"])
        .current_dir(dir.path())
        .env("CARGO_TARGET_DIR", &target_dir)
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "{manifest}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
