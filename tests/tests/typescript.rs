//! The TypeScript SDK's example, `plugins/counter-ts`, built by `tessera build` (npm and
//! componentize-js) and run on a real node beside the Rust counter: the same messages get the
//! same reply bytes and the same errors, its state survives passivation and a node restart,
//! and the two read each other's state (a Rust counter upgraded to the TypeScript one carries
//! on counting). Skipped, saying so, where npm is not installed.

use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_contract::{EntityAddress, ErrorKind};
use tessera_host::node::{Node, NodeError};
use tessera_metadata::TypeOptions;
use tessera_tests::to_msgpack;

const ADMIN_TOKEN: &str = "typescript-test-admin-token";

async fn open(dir: &Path) -> Arc<Node> {
    let config = tessera_tests::node_config(dir, ADMIN_TOKEN, 200);
    // After an in-process restart the previous node's background tasks let go of the
    // database a moment after `shutdown` returns.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Node::open(config.clone()).await {
            Ok(node) => return node,
            Err(error)
                if error.to_string().contains("already open") && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(error) => panic!("the node does not open: {error}"),
        }
    }
}

/// A reply as the client gets it: the raw MessagePack bytes, or the error's kind.
async fn ask(node: &Node, entity_type: &str, id: &str, message: serde_json::Value) -> Reply {
    let to = EntityAddress::new("acme", entity_type, id);
    match node
        .ask(&to, to_msgpack(&message), Duration::from_secs(30))
        .await
    {
        Ok(bytes) => Ok(bytes),
        Err(NodeError::Message(error)) => Err(error.kind),
        Err(other) => panic!("{entity_type}/{id} answered {message} with {other}"),
    }
}

type Reply = Result<Vec<u8>, ErrorKind>;

fn counter_ts() -> Option<std::path::PathBuf> {
    tessera_tests::typescript::counter_ts(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        "the TypeScript counter's tests",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_counter_answers_as_the_rust_counter_does() {
    let Some(counter_ts) = counter_ts() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path()).await;
    node.create_tenant("acme", None).await.unwrap();
    for (entity_type, plugin) in [
        ("counter", tessera_tests::COUNTER.as_ref()),
        ("counter-ts", counter_ts.as_path()),
    ] {
        let bytes = std::fs::read(plugin).unwrap();
        node.deploy("acme", entity_type, bytes, TypeOptions::default())
            .await
            .unwrap();
    }
    let steps = [
        json!({"Add": 5}),
        json!({"Add": -2}),
        json!("Get"),
        json!({"Add": 300}),
        json!({"Add": -70000}),
        json!("Reset"),
        json!("Get"),
        json!({"Add": i64::MAX}),
        // Overflows: rejected, and the value stays.
        json!({"Add": 1}),
        json!("Get"),
        json!({"Add": i64::MIN}),
        json!({"Add": i64::MIN}),
        // Bad messages: an unknown variant, a wrong value, a map that is no variant.
        json!("Explode"),
        json!({"Add": "five"}),
        json!({"Add": 1.5}),
        json!({"Add": 1, "Get": null}),
        json!([1, 2]),
        json!("Get"),
    ];
    let mut answers = Vec::new();
    for step in &steps {
        let rust = ask(&node, "counter", "c1", step.clone()).await;
        let typescript = ask(&node, "counter-ts", "c1", step.clone()).await;
        assert_eq!(typescript, rust, "the counters answer {step} differently");
        answers.push(rust);
    }
    // The sequence exercised every kind of answer: values, a rejection and bad messages.
    assert_eq!(answers[2], Ok(vec![0x03]), "Get after Add 5, Add -2");
    assert_eq!(answers[8], Err(ErrorKind::Rejected));
    assert_eq!(answers[12], Err(ErrorKind::BadMessage));
    // Both keep the value in the same bytes under the same key.
    let rust_state = node
        .entity_state(&EntityAddress::new("acme", "counter", "c1"))
        .await
        .unwrap();
    let ts_state = node
        .entity_state(&EntityAddress::new("acme", "counter-ts", "c1"))
        .await
        .unwrap();
    assert_eq!(ts_state, rust_state);
    assert_eq!(rust_state.len(), 1, "one state value: {rust_state:?}");
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_counter_keeps_its_value_across_passivation_and_a_node_restart() {
    let Some(counter_ts) = counter_ts() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path()).await;
    node.create_tenant("acme", None).await.unwrap();
    node.deploy(
        "acme",
        "counter-ts",
        std::fs::read(&counter_ts).unwrap(),
        TypeOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        ask(&node, "counter-ts", "p", json!({"Add": 40})).await,
        Ok(vec![40])
    );
    let address = EntityAddress::new("acme", "counter-ts", "p");
    node.passivate(&address).await.unwrap();
    assert_eq!(
        ask(&node, "counter-ts", "p", json!({"Add": 1})).await,
        Ok(vec![41])
    );
    node.shutdown().await;
    drop(node);

    let node = open(dir.path()).await;
    assert_eq!(
        ask(&node, "counter-ts", "p", json!("Get")).await,
        Ok(vec![41])
    );
    assert_eq!(
        ask(&node, "counter-ts", "p", json!({"Add": 1})).await,
        Ok(vec![42])
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_counter_upgraded_to_the_typescript_one_carries_on_counting() {
    let Some(counter_ts) = counter_ts() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path()).await;
    node.create_tenant("acme", None).await.unwrap();
    let rust = std::fs::read(tessera_tests::COUNTER).unwrap();
    node.deploy("acme", "counter", rust, TypeOptions::default())
        .await
        .unwrap();
    // A value past 2^53, which a JavaScript number could not hold.
    let big = (1i64 << 60) + 7;
    assert!(
        ask(&node, "counter", "u", json!({"Add": big}))
            .await
            .is_ok()
    );
    let typescript = std::fs::read(&counter_ts).unwrap();
    node.deploy("acme", "counter", typescript, TypeOptions::default())
        .await
        .unwrap();
    let reply = ask(&node, "counter", "u", json!({"Add": 1})).await.unwrap();
    assert_eq!(
        tessera_tests::from_msgpack(&reply).unwrap(),
        json!(big + 1),
        "the TypeScript version read the Rust version's state"
    );
    node.shutdown().await;
}

#[test]
fn the_sdk_and_counter_node_tests_pass() {
    // Building installs the tools (esbuild) the tests are bundled with.
    if counter_ts().is_none() {
        return;
    }
    let dir = tessera_tests::typescript::counter_ts_dir();
    let sdk_tests = dir.join("../../guest-sdk-ts/test");
    let mut files: Vec<_> = std::fs::read_dir(&sdk_tests)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".test.ts"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "the SDK's tests: {files:?}");
    let sdk = std::process::Command::new("node")
        .arg(dir.join("../../guest-sdk-ts/bin/tessera-ts.mjs"))
        .arg("test")
        .args(&files)
        .current_dir(&dir)
        .output()
        .unwrap();
    let counter = std::process::Command::new("npm")
        .arg("test")
        .current_dir(&dir)
        .output()
        .unwrap();
    for (what, output) in [("the SDK's", sdk), ("counter-ts's", counter)] {
        let printed = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{what} Node.js tests failed:\n{printed}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(printed.contains("# fail 0"), "{what} tests: {printed}");
    }
}
