//! Instances whose memory grew large are dropped off the I/O workers (issue 33, finding 11):
//! resetting tens of MiB of linear memory holds a thread in the kernel for milliseconds, so a
//! memory-hog's instance goes to the runtime's retiring thread, and its pool slot comes back
//! once that thread dropped it; a small instance is dropped where it is.

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tessera_contract::{EntityAddress, ErrorKind};
use tessera_entity::{Entities, TypeTable};
use tessera_runtime::{InstanceLimits, Runtime, RuntimeConfig};
use tessera_tests::to_msgpack;

const TENANT: &str = "t";

/// An entity layer on a runtime of its own, with `hog` (memory capped at 16 MiB, past the
/// retiring bound) and `counter`.
fn entities(dir: &std::path::Path) -> (Arc<Runtime>, Entities) {
    let runtime = Arc::new(
        Runtime::new(RuntimeConfig {
            compiled_cache_dir: Some(tessera_tests::compiled_cache_dir()),
            ..RuntimeConfig::default()
        })
        .expect("the engine starts"),
    );
    let types = Arc::new(TypeTable::default());
    let limits = InstanceLimits {
        memory_bytes_max: 16 << 20,
        ..InstanceLimits::default()
    };
    for (entity_type, path) in [
        ("hog", tessera_tests::MEMORY_HOG),
        ("counter", tessera_tests::COUNTER),
    ] {
        tessera_tests::bind_on_runtime(&types, &runtime, (TENANT, entity_type), path, limits);
    }
    let entities = tessera_tests::standalone_entities(dir, &runtime, types);
    (runtime, entities)
}

/// Waits until `done` holds (at most 10 s), saying `what` if it never does.
async fn until(what: &str, done: impl Fn() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "{what} within 10 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grown_instance_is_dropped_off_the_workers_and_gives_its_slot_back() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let (runtime, entities) = entities(dir.path());
    let ask = |entity_type: &str, message: serde_json::Value| {
        entities.ask(
            EntityAddress::new(TENANT, entity_type, "e1"),
            0,
            to_msgpack(&message),
            Duration::from_secs(20),
        )
    };

    // A small instance, passivated: dropped in place.
    ask("counter", json!({"Add": 1})).await.expect("added");
    assert_eq!(runtime.live_instances(), 1);
    entities
        .passivate(&EntityAddress::new(TENANT, "counter", "e1"))
        .expect("passivation requested");
    until("the counter's instance is dropped", || {
        runtime.live_instances() == 0
    })
    .await;
    assert_eq!(runtime.retired_instances(), 0, "a small instance retired");

    // A memory-hog grows to its cap and traps: its instance is discarded, and dropped on the
    // retiring thread.
    let error = ask("hog", json!("Grow")).await.expect_err("the cap traps");
    assert_eq!(error.kind, ErrorKind::MemoryLimit, "{error}");
    until("the hog's instance is retired", || {
        runtime.retired_instances() == 1
    })
    .await;
    assert_eq!(runtime.live_instances(), 0, "its slot is given back");

    // The entity runs again on a fresh instance.
    let pong = ask("hog", json!("Ping")).await.expect("the hog answers");
    assert_eq!(tessera_tests::from_msgpack(&pong), Ok(json!("Pong")));
    entities.stop_all().await;
}
