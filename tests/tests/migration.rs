//! Schema migration, rollback and the sender of a message, seen from outside: real plugin
//! components (`cart` version 1, `cart-priced` and `cart-broken` as its version 2, and
//! `legacy-v1` built against the 0.1.0 contract) run through entity cells over redb.

use serde_json::{Value as Json, json};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tessera_contract::ErrorKind;
use tessera_entity::{DeliveryConfig, EntityConfig};
use tessera_runtime::InstanceLimits;
use tessera_state::EntityState;
use tessera_tests::{TestNode, address, to_msgpack};

/// A node with `cart` version 1 deployed, retrying unacknowledged reminders and tells at most
/// every 200 ms so that a test sees them soon after the entity can take them again.
fn cart_node() -> (tempfile::TempDir, TestNode) {
    let dir = tempfile::tempdir().unwrap();
    let config = EntityConfig {
        delivery: DeliveryConfig {
            retry_max_ms: 200,
            ..DeliveryConfig::default()
        },
        ..EntityConfig::default()
    };
    let node = TestNode::with_config(dir.path(), config);
    deploy(&node, tessera_tests::CART, 1);
    (dir, node)
}

fn deploy(node: &TestNode, plugin: &str, version: u32) {
    node.deploy("cart", plugin, version, InstanceLimits::default());
}

/// Polls `check` until it holds, failing after 20 s with `what`.
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, check: impl Fn() -> F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_in_activate_is_committed_before_the_first_message() {
    let (_dir, node) = cart_node();
    node.ask("cart", "m", json!({"Add": "apple"}))
        .await
        .unwrap();
    deploy(&node, tessera_tests::CART_PRICED, 2);
    let view = node.ask("cart", "m", json!("Get")).await.unwrap();
    assert_eq!(
        view,
        json!({"items": [{"name": "apple", "price_cents": 100}], "total_cents": 100})
    );
    let schema = node.state.get(&address("cart", "m"), "schema").unwrap();
    assert_eq!(
        schema,
        Some(to_msgpack(&json!(2))),
        "the migration committed"
    );
    assert_eq!(
        node.ask("cart", "m", json!("Activation")).await.unwrap(),
        json!("Upgraded { from_version: 1 }")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_migration_keeps_the_old_state_and_is_counted() {
    let (_dir, node) = cart_node();
    let cart = address("cart", "f");
    node.ask("cart", "f", json!({"Add": "unpriceable"}))
        .await
        .unwrap();
    let items = node.state.get(&cart, "items").unwrap();
    let failures = || {
        node.entities
            .stats()
            .activation_failures
            .load(Ordering::Relaxed)
    };
    assert_eq!(failures(), 0);
    deploy(&node, tessera_tests::CART_PRICED, 2);
    for attempt in 1..=2 {
        let error = node.ask("cart", "f", json!("Get")).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Failed, "{error}");
        assert!(
            error.message.contains("item \"unpriceable\" has no price")
                && error.message.contains("upgrade from version 1"),
            "{error}"
        );
        assert_eq!(failures(), attempt, "each refused activation is counted");
    }
    assert_eq!(node.state.get(&cart, "items").unwrap(), items);
    assert_eq!(node.state.get(&cart, "schema").unwrap(), None);
    deploy(&node, tessera_tests::CART, 1);
    let view = node.ask("cart", "f", json!("Get")).await.unwrap();
    assert_eq!(view["items"], json!([{"name": "unpriceable"}]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_is_reported_as_a_rollback() {
    let (_dir, node) = cart_node();
    node.ask("cart", "r", json!({"Add": "pear"})).await.unwrap();
    assert_eq!(
        node.ask("cart", "r", json!("Activation")).await.unwrap(),
        json!("first start")
    );
    deploy(&node, tessera_tests::CART_PRICED, 2);
    assert_eq!(
        node.ask("cart", "r", json!("Activation")).await.unwrap(),
        json!("Upgraded { from_version: 1 }")
    );
    deploy(&node, tessera_tests::CART, 1);
    assert_eq!(
        node.ask("cart", "r", json!("Activation")).await.unwrap(),
        json!("rolled back from 2")
    );
}

/// The incident: an upgrade whose version cannot read the stored items answered `trap` with a
/// backtrace, and a reminder that fired meanwhile was dead-lettered, leaving a checked-out
/// cart reserved for good after the rollback. A tell from an entity of another type waits the
/// same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_that_cannot_activate_answers_failed_and_keeps_reminders_for_the_rollback() {
    let (_dir, node) = cart_node();
    let carts = ["c0", "c1", "c2"];
    for id in carts {
        node.ask("cart", id, json!({"Add": "apple"})).await.unwrap();
        let view = node
            .ask("cart", id, json!({"Checkout": {"expire_ms": 1_500}}))
            .await
            .unwrap();
        assert_eq!(view["reserved"], json!(true));
    }
    deploy(&node, tessera_tests::CART_BROKEN, 2);
    let error = node.ask("cart", "c0", json!("Get")).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::Failed, "{error}");
    assert!(
        error
            .message
            .contains("state value \"items\" did not decode")
            && error.message.contains("price_cents"),
        "the answer names the key and the reason: {error}"
    );
    // A shop (the version-1 cart under another type, unaffected by the upgrade) tells c0.
    node.deploy("shop", tessera_tests::CART, 1, InstanceLimits::default());
    let c0 = json!({"entity_type": "cart", "id": "c0"});
    node.ask("shop", "s", json!({"TellRecord": c0}))
        .await
        .unwrap();
    let stats = node.entities.stats();
    let tried_and_kept =
        || async { stats.redeliveries.load(Ordering::Relaxed) > carts.len() as u64 };
    eventually(
        "the reminders were tried on the broken version",
        tried_and_kept,
    )
    .await;
    assert_eq!(stats.dead_letters.load(Ordering::Relaxed), 0);
    assert_eq!(stats.reminders_fired.load(Ordering::Relaxed), 0);
    deploy(&node, tessera_tests::CART, 1);
    for id in carts {
        let expired = || async {
            let view = node.ask("cart", id, json!("Get")).await.unwrap();
            view["reserved"] == json!(false) && view["expired"] == json!(1)
        };
        eventually(&format!("cart {id}'s reminder fired"), expired).await;
    }
    let told = || async {
        let last = node.ask("cart", "c0", json!("LastSender")).await.unwrap();
        last == json!("entity shop/s")
    };
    eventually("the shop's tell reached c0", told).await;
    assert_eq!(stats.dead_letters.load(Ordering::Relaxed), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_entity_sees_who_sent_each_message() {
    let (_dir, node) = cart_node();
    let text = |reply: Json| reply.as_str().map(str::to_string);
    let whoami = node.ask("cart", "a", json!("Whoami")).await.unwrap();
    assert_eq!(text(whoami).as_deref(), Some("client"));
    let b = json!({"entity_type": "cart", "id": "b"});
    let asked = node
        .ask("cart", "a", json!({"AskWhoami": b}))
        .await
        .unwrap();
    assert_eq!(text(asked).as_deref(), Some("entity cart/a"));
    node.ask("cart", "a", json!({"TellRecord": b}))
        .await
        .unwrap();
    let told = || async {
        let last = node.ask("cart", "b", json!("LastSender")).await.unwrap();
        text(last).as_deref() == Some("entity cart/a")
    };
    eventually("b recorded a's tell", told).await;
    node.ask("cart", "a", json!("RemindRecord")).await.unwrap();
    let reminded = || async {
        let last = node.ask("cart", "a", json!("LastSender")).await.unwrap();
        text(last).is_some_and(|last| last.starts_with("reminder "))
    };
    eventually("a recorded its own reminder", reminded).await;
    let error = node.ask("cart", "a", json!("Expire")).await.unwrap_err();
    assert_eq!(
        error.kind,
        ErrorKind::Rejected,
        "a client cannot expire a cart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_built_against_the_0_1_0_contract_still_runs() {
    let legacy = tessera_tests::plugin(tessera_tests::LEGACY_V1);
    assert_eq!(legacy.contract_version(), "0.1.0");
    let current = tessera_tests::plugin(tessera_tests::CART);
    assert_eq!(current.contract_version(), "0.2.0");
    let (_dir, node) = cart_node();
    node.deploy(
        "legacy",
        tessera_tests::LEGACY_V1,
        1,
        InstanceLimits::default(),
    );
    assert_eq!(
        node.ask("legacy", "l", json!("Count")).await.unwrap(),
        json!(1)
    );
    assert_eq!(
        node.ask("legacy", "l", json!("Count")).await.unwrap(),
        json!(2)
    );
    let count = node.state.get(&address("legacy", "l"), "count").unwrap();
    assert_eq!(count, Some(vec![0xce, 0, 0, 0, 2]), "a MessagePack uint 32");
}
