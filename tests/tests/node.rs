//! A whole node in one process: entities reached through the sharding region, guest asks
//! routed by the region, passivation and remember-entities with real plugins.

use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_contract::EntityAddress;
use tessera_host::node::Node;
use tessera_metadata::{Quotas, TypeOptions};
use tessera_tests::{from_msgpack as msgpack_to_json, to_msgpack as json_to_msgpack};

const ADMIN_TOKEN: &str = "node-test-admin-token-0123";

async fn open(dir: &std::path::Path) -> Arc<Node> {
    let config = tessera_tests::node_config(dir, ADMIN_TOKEN, 200);
    // After an in-process restart the previous node's background tasks let go of the
    // database a moment after `shutdown` returns; a new process would not wait at all.
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

async fn deploy(node: &Node, entity_type: &str, plugin: &str, options: TypeOptions) {
    let bytes = std::fs::read(plugin).unwrap();
    node.deploy("acme", entity_type, bytes, options)
        .await
        .unwrap();
}

async fn ask(
    node: &Node,
    entity_type: &str,
    id: &str,
    message: serde_json::Value,
) -> serde_json::Value {
    let reply = node
        .ask(
            &EntityAddress::new("acme", entity_type, id),
            json_to_msgpack(&message),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    msgpack_to_json(&reply).unwrap()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_asks_and_tells_are_routed_through_the_region() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path()).await;
    node.create_tenant("acme", None).await.unwrap();
    deploy(
        &node,
        "wallet",
        tessera_tests::BANK_ACCOUNT,
        TypeOptions::default(),
    )
    .await;
    deploy(&node, "relay", tessera_tests::RELAY, TypeOptions::default()).await;
    // A guest ask: r1 asks r2 and replies with r2's reply.
    let bounced = ask(&node, "relay", "r1", json!({"Bounce": {"path": ["r2"]}})).await;
    assert_eq!(bounced, json!(0));
    // A guest tell: the transfer's credit reaches bob from the outbox.
    ask(&node, "wallet", "alice", json!({"Deposit": 50})).await;
    let balance = ask(
        &node,
        "wallet",
        "alice",
        json!({"Transfer": {"to": "bob", "amount": 20}}),
    )
    .await;
    assert_eq!(balance, json!(30));
    let deadline = Instant::now() + Duration::from_secs(10);
    while ask(&node, "wallet", "bob", json!("Balance")).await != json!(20) {
        assert!(Instant::now() < deadline, "bob never got the credit");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_around_a_passivation_reach_the_next_activation_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path()).await;
    node.create_tenant("acme", None).await.unwrap();
    deploy(
        &node,
        "counter",
        tessera_tests::COUNTER,
        TypeOptions::default(),
    )
    .await;
    let counter = EntityAddress::new("acme", "counter", "p");
    let add = json_to_msgpack(&json!({"Add": 1}));
    for round in 0..50 {
        node.tell(&counter, add.clone()).await.unwrap();
        if round % 5 == 0 {
            node.passivate(&counter).await.unwrap();
        }
    }
    assert_eq!(ask(&node, "counter", "p", json!("Get")).await, json!(50));
    // Each passivation deactivated the instance; the messages behind it started a new one.
    let activations = node
        .entities()
        .stats()
        .activations
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        activations >= 2,
        "the entity was never passivated and re-activated"
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_remembered_entity_is_passivated_and_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path()).await;
    node.create_tenant("acme", None).await.unwrap();
    let options = TypeOptions {
        remember: true,
        passivate_idle_ms: Some(50),
        ..TypeOptions::default()
    };
    deploy(&node, "counter", tessera_tests::COUNTER, options).await;
    ask(&node, "counter", "idle", json!({"Add": 2})).await;
    let entity = EntityAddress::new("acme", "counter", "idle");
    node.region().flush_remembered().await.unwrap();
    let remembered = |node: &Node| node.status("acme").unwrap()[0].remembered_entities;
    assert_eq!(
        remembered(&node),
        1,
        "a started entity of a remembered type is recorded"
    );
    eventually("the idle entity is passivated", || {
        !node.entities().is_live(&entity)
    })
    .await;
    node.region().flush_remembered().await.unwrap();
    assert_eq!(remembered(&node), 0, "passivation forgets the id");
    assert_eq!(ask(&node, "counter", "idle", json!("Get")).await, json!(2));
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_entities_come_back_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let node = open(dir.path()).await;
        node.create_tenant("acme", None).await.unwrap();
        deploy(
            &node,
            "counter",
            tessera_tests::COUNTER,
            TypeOptions {
                remember: true,
                ..TypeOptions::default()
            },
        )
        .await;
        for id in ["r1", "r2", "r3"] {
            ask(&node, "counter", id, json!({"Add": 5})).await;
        }
        node.shutdown().await;
    }
    let node = open(dir.path()).await;
    for id in ["r1", "r2", "r3"] {
        let entity = EntityAddress::new("acme", "counter", id);
        eventually(
            "a remembered entity is live again without a message",
            || node.entities().is_live(&entity),
        )
        .await;
    }
    assert_eq!(ask(&node, "counter", "r2", json!("Get")).await, json!(5));
    node.shutdown().await;
}

/// A sender's messages run in the order it sent them whether each runs on the sender's own
/// task (the local fast path, when the entity is idle) or waits in the mailbox (when another
/// sender's message holds the entity): every `Get` asked after an `Add` sees that `Add`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_senders_messages_keep_their_order_across_the_fast_path_and_the_mailbox() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path()).await;
    // The other sender asks as fast as it can: a message rate that never binds, so the test
    // is about order, not the quota.
    let quotas = tessera_metadata::Quotas {
        messages_per_second: 100_000_000,
        messages_burst: 100_000_000,
        ..tessera_metadata::Quotas::default()
    };
    node.create_tenant("acme", Some(quotas)).await.unwrap();
    deploy(
        &node,
        "counter",
        tessera_tests::COUNTER,
        TypeOptions::default(),
    )
    .await;
    let counter = EntityAddress::new("acme", "counter", "shared");
    assert_eq!(
        ask(&node, "counter", "shared", json!("Get")).await,
        json!(0)
    );
    const ROUNDS: i64 = 1_500;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Another sender keeps the entity busy at random moments, so the first sender's messages
    // find it now idle (they run on the sender's task), now held (they queue).
    let other = {
        let (node, counter, done) = (node.clone(), counter.clone(), done.clone());
        tokio::spawn(async move {
            let get = json_to_msgpack(&json!("Get"));
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                node.ask(&counter, get.clone(), Duration::from_secs(10))
                    .await
                    .unwrap();
            }
        })
    };
    let add = json_to_msgpack(&json!({"Add": 1}));
    let get = json_to_msgpack(&json!("Get"));
    for round in 1..=ROUNDS {
        tessera_tests::tell_until_taken(&node, &counter, &add).await;
        let seen = node
            .ask(&counter, get.clone(), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(
            msgpack_to_json(&seen).unwrap(),
            json!(round),
            "a Get overtook the sender's own Add"
        );
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    other.await.unwrap();
    node.shutdown().await;
}

/// A tell by address takes its token at its tenant's quota as the node knows it now: refused
/// past the burst, and let through again once the quota is raised (the bucket, which keeps the
/// quota it was made with, is made again).
#[tokio::test]
async fn tells_by_address_follow_their_tenants_quota_as_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path()).await;
    let tight = Quotas {
        messages_per_second: 1,
        messages_burst: 3,
        ..Quotas::default()
    };
    node.create_tenant("acme", Some(tight)).await.unwrap();
    deploy(
        &node,
        "counter",
        tessera_tests::COUNTER,
        TypeOptions::default(),
    )
    .await;
    let to = EntityAddress::new("acme", "counter", "q");
    let add = json_to_msgpack(&json!({"Add": 1}));
    let taken =
        tessera_tests::tells_until_over_rate(3, async || node.tell(&to, add.clone()).await).await;
    node.update_quotas("acme", tessera_tests::unbound_rate())
        .await
        .unwrap();
    for _ in 0..10 {
        node.tell(&to, add.clone()).await.unwrap();
    }
    assert_eq!(
        ask(&node, "counter", "q", json!("Get")).await,
        json!(taken + 10)
    );
    node.shutdown().await;
}

/// A node with tenant `acme` running `sleepy` (the spin-forever plugin), its entity `s`
/// activated, so the next message finds it idle and may run on its sender's task.
async fn active_sleepy_node(dir: &std::path::Path) -> Arc<Node> {
    let node = open(dir).await;
    node.create_tenant("acme", None).await.unwrap();
    deploy(
        &node,
        "sleepy",
        tessera_tests::SPIN_FOREVER,
        TypeOptions::default(),
    )
    .await;
    assert_eq!(
        ask(&node, "sleepy", "s", json!("Ping")).await,
        json!("Pong")
    );
    node
}

/// What a sender's run left waiting goes before whatever was posted after it: on one thread,
/// the cell's task cannot run between the tell that leaves a sleep waiting and the ask posted
/// right after it, so when the task wakes it finds the ask in its mailbox — and must still
/// finish the sleep first.
#[tokio::test(flavor = "current_thread")]
async fn a_message_left_waiting_by_its_sender_runs_before_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let node = active_sleepy_node(dir.path()).await;
    let sleepy = EntityAddress::new("acme", "sleepy", "s");
    let started = Instant::now();
    node.tell(&sleepy, json_to_msgpack(&json!({"Sleep": 300})))
        .await
        .unwrap();
    assert_eq!(
        ask(&node, "sleepy", "s", json!("Ping")).await,
        json!("Pong")
    );
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the ping overtook the sleep its sender's tell left waiting"
    );
    node.shutdown().await;
}

/// A message run on its sender's task does not hold the sender for longer than it runs at
/// once: a tell of a message that waits (here, a 5 s sleep in the guest) returns while the
/// message goes on by itself, and the entity's next message still runs after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tell_does_not_wait_for_a_long_message_to_finish() {
    let dir = tempfile::tempdir().unwrap();
    let node = active_sleepy_node(dir.path()).await;
    let sleepy = EntityAddress::new("acme", "sleepy", "s");
    let started = Instant::now();
    tokio::time::timeout(
        Duration::from_secs(2),
        node.tell(&sleepy, json_to_msgpack(&json!({"Sleep": 5_000}))),
    )
    .await
    .expect("the tell waited for the guest's sleep")
    .unwrap();
    // The ping queues behind the sleep: it is answered only once the sleep is over.
    assert_eq!(
        ask(&node, "sleepy", "s", json!("Ping")).await,
        json!("Pong")
    );
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "the ping overtook the sleep"
    );
    node.shutdown().await;
}
