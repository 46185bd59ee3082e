//! Reusable handles on entities (`Node::entity_ref`): a handle keeps every guarantee of a
//! message sent by address — each sender's order, nothing lost — while the entities behind it
//! are passivated and started again, and sees its type deleted and redeployed and its tenant's
//! quota change.

use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_contract::{EntityAddress, ErrorKind};
use tessera_host::node::{EntityRef, Node, NodeError};
use tessera_metadata::{Quotas, TypeOptions};
use tessera_tests::{from_msgpack, tell_ref_until_taken, tells_until_over_rate, to_msgpack};

const ADMIN_TOKEN: &str = "entity-ref-test-admin-token-0123";

/// A node with tenant `acme` (under `quotas`) and the plugin at `plugin` deployed as
/// `entity_type`.
async fn node_with(
    dir: &std::path::Path,
    quotas: Option<Quotas>,
    entity_type: &str,
    plugin: &str,
) -> Arc<Node> {
    let node = Node::open(tessera_tests::node_config(dir, ADMIN_TOKEN, 300))
        .await
        .unwrap();
    node.create_tenant("acme", quotas).await.unwrap();
    let bytes = std::fs::read(plugin).unwrap();
    node.deploy("acme", entity_type, bytes, TypeOptions::default())
        .await
        .unwrap();
    node
}

async fn counter_node(dir: &std::path::Path, quotas: Option<Quotas>) -> Arc<Node> {
    node_with(dir, quotas, "counter", tessera_tests::COUNTER).await
}

fn counter(id: &str) -> EntityAddress {
    EntityAddress::new("acme", "counter", id)
}

async fn get(target: &mut EntityRef) -> serde_json::Value {
    let reply = target
        .ask(to_msgpack(&json!("Get")), Duration::from_secs(10))
        .await
        .unwrap();
    from_msgpack(&reply).unwrap()
}

/// A sender's messages through one handle run in the order it sent them, whether each runs on
/// the sender's task (the entity idle), waits in the mailbox (another sender holds the
/// entity), or starts a new activation (the entity was passivated in between, so the handle's
/// cell is gone): every `Get` after an `Add` sees that `Add`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_keeps_its_senders_order_across_the_fast_path_the_mailbox_and_passivations() {
    let dir = tempfile::tempdir().unwrap();
    // The other sender asks as fast as it can.
    let roomy = tessera_tests::unbound_rate();
    let node = counter_node(dir.path(), Some(roomy)).await;
    let mut target = node.entity_ref(counter("shared")).unwrap();
    assert_eq!(get(&mut target).await, json!(0));
    let done = Arc::new(AtomicBool::new(false));
    let other = {
        let (node, done) = (node.clone(), done.clone());
        tokio::spawn(async move {
            let mut other = node.entity_ref(counter("shared")).unwrap();
            while !done.load(Ordering::Relaxed) {
                get(&mut other).await;
            }
        })
    };
    const ROUNDS: i64 = 1_000;
    let add = to_msgpack(&json!({"Add": 1}));
    for round in 1..=ROUNDS {
        tell_ref_until_taken(&mut target, &add).await;
        if round % 50 == 0 {
            node.passivate(&counter("shared")).await.unwrap();
        }
        assert_eq!(
            get(&mut target).await,
            json!(round),
            "a Get overtook the sender's own Add"
        );
    }
    done.store(true, Ordering::Relaxed);
    other.await.unwrap();
    let activations = node.entities().stats().activations.load(Ordering::Relaxed);
    assert!(
        activations >= (ROUNDS / 50) as u64,
        "the entity was not passivated and started again ({activations} activations)"
    );
    node.shutdown().await;
}

/// Many entities, two senders each with their own handles, and a third task passivating
/// entities at random all the while: every tell is counted exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_lose_no_tell_while_their_entities_are_passivated_at_random() {
    const ENTITIES: usize = 60;
    const TELLS: i64 = 40;
    let dir = tempfile::tempdir().unwrap();
    let node = counter_node(dir.path(), None).await;
    let done = Arc::new(AtomicBool::new(false));
    let passivator = {
        let (node, done) = (node.clone(), done.clone());
        tokio::spawn(async move {
            let (mut passivations, mut seed) = (0, 0x9e37_79b9_7f4a_7c15_u64);
            while !done.load(Ordering::Relaxed) {
                // xorshift: a different entity each time, no dependency for it.
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let id = seed as usize % ENTITIES;
                node.passivate(&counter(&format!("c{id}"))).await.unwrap();
                passivations += 1;
                tokio::task::yield_now().await;
            }
            passivations
        })
    };
    let senders: Vec<_> = (0..2)
        .map(|_| {
            let node = node.clone();
            tokio::spawn(async move {
                let mut targets: Vec<EntityRef> = (0..ENTITIES)
                    .map(|id| node.entity_ref(counter(&format!("c{id}"))).unwrap())
                    .collect();
                let add = to_msgpack(&json!({"Add": 1}));
                for _ in 0..TELLS {
                    for target in targets.iter_mut() {
                        tell_ref_until_taken(target, &add).await;
                    }
                }
            })
        })
        .collect();
    for sender in senders {
        sender.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let passivations = passivator.await.unwrap();
    assert!(passivations > 0, "nothing was passivated");
    for id in 0..ENTITIES {
        let mut target = node.entity_ref(counter(&format!("c{id}"))).unwrap();
        assert_eq!(get(&mut target).await, json!(2 * TELLS), "counter c{id}");
    }
    node.shutdown().await;
}

/// A handle follows what it resolved once: its tenant's new quota, its type's deletion (its
/// tells fail instead of vanishing) and redeploy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_sees_its_tenants_quota_change_and_its_type_deleted_and_redeployed() {
    let dir = tempfile::tempdir().unwrap();
    let tight = Quotas {
        messages_per_second: 1,
        messages_burst: 3,
        ..Quotas::default()
    };
    let node = counter_node(dir.path(), Some(tight)).await;
    let mut target = node.entity_ref(counter("q")).unwrap();
    let add = to_msgpack(&json!({"Add": 1}));
    let taken = tells_until_over_rate(3, async || target.tell(add.clone()).await).await;
    node.update_quotas("acme", tessera_tests::unbound_rate())
        .await
        .unwrap();
    for _ in 0..10 {
        target.tell(add.clone()).await.unwrap();
    }
    assert_eq!(get(&mut target).await, json!(taken + 10));

    node.delete_type("acme", "counter").await.unwrap();
    let deleted = target.tell(add.clone()).await.unwrap_err();
    assert!(
        matches!(&deleted, NodeError::Message(error) if error.kind == ErrorKind::EntityTypeNotRegistered),
        "a tell to a deleted type: {deleted}"
    );
    let bytes = std::fs::read(tessera_tests::COUNTER).unwrap();
    node.deploy("acme", "counter", bytes, TypeOptions::default())
        .await
        .unwrap();
    target.tell(add.clone()).await.unwrap();
    let after = get(&mut target).await;
    assert!(after.is_i64(), "the redeployed type answers: {after}");
    node.shutdown().await;
}

/// Messages that run on the sender's task count as activity for idle passivation: an entity
/// told every 20 ms through a handle outlives many idle timeouts of 100 ms, and is passivated
/// once the tells stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_run_through_a_handle_keep_their_entity_from_idle_passivation() {
    let dir = tempfile::tempdir().unwrap();
    let node = counter_node(dir.path(), None).await;
    let bytes = std::fs::read(tessera_tests::COUNTER).unwrap();
    let options = TypeOptions {
        passivate_idle_ms: Some(100),
        ..TypeOptions::default()
    };
    node.deploy("acme", "idler", bytes, options).await.unwrap();
    let address = EntityAddress::new("acme", "idler", "busy");
    let mut target = node.entity_ref(address.clone()).unwrap();
    let add = to_msgpack(&json!({"Add": 1}));
    let activations = || node.entities().stats().activations.load(Ordering::Relaxed);
    assert_eq!(get(&mut target).await, json!(0), "activated");
    let first = activations();
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(800) {
        tell_ref_until_taken(&mut target, &add).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(node.entities().is_live(&address), "passivated while busy");
    assert_eq!(
        activations(),
        first,
        "passivated and started again while busy"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while node.entities().is_live(&address) {
        assert!(
            std::time::Instant::now() < deadline,
            "never passivated once idle"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    node.shutdown().await;
}

/// An ask through a handle keeps its timeout when its message does not finish at once (here
/// a guest blocked in a sleep, run on the asker's task and then on a task of its own): the
/// asker gets `timeout` when it runs out, and the handle's next ask waits its turn behind the
/// sleeper and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_through_a_handle_times_out_and_the_next_one_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let node = node_with(dir.path(), None, "spinner", tessera_tests::SPIN_FOREVER).await;
    let mut target = node
        .entity_ref(EntityAddress::new("acme", "spinner", "s"))
        .unwrap();
    let ping = to_msgpack(&json!("Ping"));
    let pong = target
        .ask(ping.clone(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(from_msgpack(&pong).unwrap(), json!("Pong"));

    // The entity is idle and live here: this ask starts on the caller's task.
    let started = std::time::Instant::now();
    let slow = target
        .ask(
            to_msgpack(&json!({"Sleep": 400})),
            Duration::from_millis(50),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&slow, NodeError::Message(error) if error.kind == ErrorKind::Timeout),
        "{slow}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "the asker waited for the sleeper instead of its own timeout"
    );
    let pong = target.ask(ping, Duration::from_secs(10)).await.unwrap();
    assert_eq!(from_msgpack(&pong).unwrap(), json!("Pong"));
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "the next ask overtook the sleeping message"
    );
    node.shutdown().await;
}
