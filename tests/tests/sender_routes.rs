//! The routes a node keeps for its senders by address (`Node::tell`): a thread that tells an
//! entity again soon tells it through a resolved route, as a handle would. These tests check
//! that this changes nothing a sender by address sees — each sender's order, nothing lost or
//! run twice, the tenant's quota, a deleted and redeployed type — and that a thread keeps no
//! more routes than its bound.

use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_contract::{EntityAddress, ErrorKind};
use tessera_host::node::{Node, NodeConfig, NodeError};
use tessera_metadata::{Quotas, TypeOptions};
use tessera_tests::{from_msgpack, tell_until_taken, tells_until_over_rate, to_msgpack};

const ADMIN_TOKEN: &str = "sender-routes-test-admin-token-01";

/// A node keeping at most `routes_per_thread` routes per thread, with tenant `acme` (under
/// `quotas`) and `counter` deployed to it.
async fn counter_node(
    dir: &std::path::Path,
    routes_per_thread: usize,
    quotas: Option<Quotas>,
) -> Arc<Node> {
    let config = NodeConfig {
        sender_routes_per_thread: routes_per_thread,
        ..tessera_tests::node_config(dir, ADMIN_TOKEN, 300)
    };
    let node = Node::open(config).await.unwrap();
    node.create_tenant("acme", quotas).await.unwrap();
    let bytes = std::fs::read(tessera_tests::COUNTER).unwrap();
    node.deploy("acme", "counter", bytes, TypeOptions::default())
        .await
        .unwrap();
    node
}

fn counter(id: &str) -> EntityAddress {
    EntityAddress::new("acme", "counter", id)
}

async fn get(node: &Node, id: &str) -> serde_json::Value {
    let reply = node
        .ask(
            &counter(id),
            to_msgpack(&json!("Get")),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    from_msgpack(&reply).unwrap()
}

/// A thread keeps a route only for an entity it tells again soon after a first tell. (The
/// misses are remembered in a Bloom filter of 16,384 bits at the default bound: with 6 entries
/// in it, a false positive that would keep a route early has a chance of about one in two
/// million per tell.)
#[tokio::test(flavor = "current_thread")]
async fn a_thread_keeps_a_route_only_for_an_entity_it_tells_again() {
    let dir = tempfile::tempdir().unwrap();
    let node = counter_node(
        dir.path(),
        tessera_host::node::SENDER_ROUTES_PER_THREAD,
        None,
    )
    .await;
    let add = to_msgpack(&json!({"Add": 1}));
    for index in 0..6 {
        tell_until_taken(&node, &counter(&format!("c{index}")), &add).await;
    }
    assert_eq!(node.sender_routes_here(), 0, "one tell each keeps no route");
    for index in 0..4 {
        tell_until_taken(&node, &counter(&format!("c{index}")), &add).await;
    }
    assert_eq!(node.sender_routes_here(), 4, "a second tell keeps a route");
    for index in 0..6 {
        let expected = if index < 4 { 2 } else { 1 };
        assert_eq!(get(&node, &format!("c{index}")).await, json!(expected));
    }
    node.shutdown().await;
}

/// A thread never keeps more routes than its bound, though it tells more entities than that
/// again and again (12, within the `2 * BOUND` misses it remembers, so it keeps routes for
/// them); every tell, through a kept route or not, runs exactly once.
#[tokio::test(flavor = "current_thread")]
async fn a_thread_keeps_no_more_routes_than_its_bound() {
    const BOUND: usize = 8;
    const ENTITIES: usize = 12;
    const ROUNDS: i64 = 6;
    let dir = tempfile::tempdir().unwrap();
    let node = counter_node(dir.path(), BOUND, None).await;
    let add = to_msgpack(&json!({"Add": 1}));
    let ids: Vec<String> = (0..ENTITIES).map(|index| format!("c{index}")).collect();
    for _ in 0..ROUNDS {
        for id in &ids {
            tell_until_taken(&node, &counter(id), &add).await;
            assert!(node.sender_routes_here() <= BOUND, "over the bound");
        }
    }
    assert!(node.sender_routes_here() > 0, "routes were kept");
    for id in &ids {
        assert_eq!(get(&node, id).await, json!(ROUNDS), "counter {id}");
    }
    node.shutdown().await;
}

/// A node configured to keep no routes keeps none, and still delivers.
#[tokio::test(flavor = "current_thread")]
async fn a_node_keeping_no_routes_sends_every_tell_by_address() {
    let dir = tempfile::tempdir().unwrap();
    let node = counter_node(dir.path(), 0, None).await;
    let add = to_msgpack(&json!({"Add": 1}));
    for _ in 0..10 {
        tell_until_taken(&node, &counter("only"), &add).await;
    }
    assert_eq!(node.sender_routes_here(), 0);
    assert_eq!(get(&node, "only").await, json!(10));
    node.shutdown().await;
}

/// A sender's tells by address run in the order it sent them, whether each runs on the
/// sender's task through a kept route (the entity idle), waits in the mailbox (another sender
/// holds the entity) or starts a new activation (the entity was passivated in between, so the
/// route's cell is gone): every `Get` after an `Add` sees that `Add`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tells_by_address_keep_their_order_through_kept_routes_the_mailbox_and_passivations() {
    let dir = tempfile::tempdir().unwrap();
    // The other sender asks as fast as it can.
    let roomy = tessera_tests::unbound_rate();
    let node = counter_node(dir.path(), 16, Some(roomy)).await;
    assert_eq!(get(&node, "shared").await, json!(0));
    let done = Arc::new(AtomicBool::new(false));
    let other = {
        let (node, done) = (node.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                get(&node, "shared").await;
            }
        })
    };
    const ROUNDS: i64 = 1_000;
    let add = to_msgpack(&json!({"Add": 1}));
    for round in 1..=ROUNDS {
        tell_until_taken(&node, &counter("shared"), &add).await;
        if round % 50 == 0 {
            node.passivate(&counter("shared")).await.unwrap();
        }
        assert_eq!(
            get(&node, "shared").await,
            json!(round),
            "round {round}: a Get did not see the Add before it"
        );
    }
    done.store(true, Ordering::Relaxed);
    other.await.unwrap();
    node.shutdown().await;
}

/// A kept route follows what it resolved: its tenant's new quota (its tells are refused, then
/// taken), its type's deletion (its tells fail instead of vanishing) and redeploy.
#[tokio::test(flavor = "current_thread")]
async fn a_kept_route_sees_its_tenants_quota_change_and_its_type_deleted_and_redeployed() {
    let dir = tempfile::tempdir().unwrap();
    let tight = Quotas {
        messages_per_second: 1,
        messages_burst: 3,
        ..Quotas::default()
    };
    let node = counter_node(dir.path(), 16, Some(tight)).await;
    let add = to_msgpack(&json!({"Add": 1}));
    let taken =
        tells_until_over_rate(3, async || node.tell(&counter("q"), add.clone()).await).await;
    assert_eq!(node.sender_routes_here(), 1, "the route was kept");
    node.update_quotas("acme", tessera_tests::unbound_rate())
        .await
        .unwrap();
    for _ in 0..10 {
        node.tell(&counter("q"), add.clone()).await.unwrap();
    }
    assert_eq!(get(&node, "q").await, json!(taken + 10));

    node.delete_type("acme", "counter").await.unwrap();
    let deleted = node.tell(&counter("q"), add.clone()).await.unwrap_err();
    assert!(
        matches!(&deleted, NodeError::Message(error) if error.kind == ErrorKind::EntityTypeNotRegistered),
        "a tell to a deleted type: {deleted}"
    );
    assert_eq!(node.sender_routes_here(), 0, "the route left with its type");
    let bytes = std::fs::read(tessera_tests::COUNTER).unwrap();
    node.deploy("acme", "counter", bytes, TypeOptions::default())
        .await
        .unwrap();
    for _ in 0..3 {
        node.tell(&counter("q"), add.clone()).await.unwrap();
    }
    let after = get(&node, "q").await;
    assert!(after.is_i64(), "the redeployed type answers: {after}");
    node.shutdown().await;
}
