//! Effectively-once messaging at the entity layer: duplicates are dropped by sender sequence,
//! expired asks are not run, outboxes and reminders are bounded, and cancels are durable.

use serde_json::json;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};
use tessera_contract::{ErrorKind, MessageMeta, Origin};
use tessera_entity::EntityConfig;
use tessera_runtime::InstanceLimits;
use tessera_state::EntityState;
use tessera_tests::{TestNode, address, from_msgpack, to_msgpack};

fn deploy(node: &TestNode, entity_type: &str, plugin: &str) {
    node.deploy(entity_type, plugin, 1, InstanceLimits::default());
}

async fn value(node: &TestNode, id: &str) -> serde_json::Value {
    node.ask("counter", id, json!("Get")).await.unwrap()
}

/// Delivers `{"Add": 1}` to counter `c1` as entry `seq` of `sender`'s outbox.
async fn deliver(node: &TestNode, seq: u64) -> serde_json::Value {
    let meta = MessageMeta::from_origin(Origin::Entity {
        sender: address("relay", "r1"),
        seq,
    });
    let reply = node
        .entities
        .ask_with(
            address("counter", "c1"),
            0,
            to_msgpack(&json!({"Add": 1})),
            meta,
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    if reply.is_empty() {
        json!(null)
    } else {
        from_msgpack(&reply).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_drops_what_it_already_committed() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::new(dir.path());
    deploy(&node, "counter", tessera_tests::COUNTER);
    assert_eq!(deliver(&node, 0).await, json!(1));
    // The same entry again (a lost acknowledgement): acknowledged, not run.
    assert_eq!(deliver(&node, 0).await, json!(null));
    assert_eq!(deliver(&node, 1).await, json!(2));
    assert_eq!(deliver(&node, 1).await, json!(null));
    assert_eq!(deliver(&node, 0).await, json!(null));
    assert_eq!(value(&node, "c1").await, json!(2));
    let stats = node.entities.stats();
    assert_eq!(stats.duplicates_dropped.load(Relaxed), 3);
    // The receipt is durable: a passivated and reactivated receiver still drops it.
    node.entities.passivate(&address("counter", "c1")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.entities.is_live(&address("counter", "c1")) {
        assert!(Instant::now() < deadline, "c1 never passivated");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(deliver(&node, 1).await, json!(null));
    assert_eq!(value(&node, "c1").await, json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_whose_deadline_passed_is_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::new(dir.path());
    deploy(&node, "counter", tessera_tests::COUNTER);
    let error = node
        .entities
        .ask_with(
            address("counter", "c1"),
            0,
            to_msgpack(&json!({"Add": 5})),
            MessageMeta::default(),
            Duration::ZERO,
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    assert_eq!(
        value(&node, "c1").await,
        json!(0),
        "the expired Add never ran"
    );
    assert_eq!(node.entities.stats().expired_asks.load(Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_outbox_refuses_the_message_and_drains_once_delivery_runs() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::paused(dir.path(), EntityConfig::default());
    deploy(&node, "counter", tessera_tests::COUNTER);
    let limits = InstanceLimits {
        outbox_entries_max: 2,
        ..InstanceLimits::default()
    };
    node.deploy("relay", tessera_tests::RELAY, 1, limits);
    let tell = json!({"TellAdd": {"entity_type": "counter", "id": "c1", "amount": 3}});
    assert_eq!(
        node.ask("relay", "r1", tell.clone()).await.unwrap(),
        json!(1)
    );
    assert_eq!(
        node.ask("relay", "r1", tell.clone()).await.unwrap(),
        json!(2)
    );
    let error = node.ask("relay", "r1", tell.clone()).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::QuotaExceeded, "{error}");
    assert!(error.message.contains("outbox"), "{error}");
    // Refused whole: the relay's own count did not move.
    assert_eq!(
        node.ask("relay", "r1", json!("Sent")).await.unwrap(),
        json!(2)
    );
    assert_eq!(node.state.pending_messages().unwrap().0, 2);
    assert_eq!(
        value(&node, "c1").await,
        json!(0),
        "nothing is sent while paused"
    );

    node.entities.start_messaging();
    let deadline = Instant::now() + Duration::from_secs(10);
    while value(&node, "c1").await != json!(6) {
        assert!(Instant::now() < deadline, "the outbox never drained");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    while node.state.pending_messages().unwrap().0 != 0 {
        assert!(
            Instant::now() < deadline,
            "the acknowledgements never landed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(node.ask("relay", "r1", tell).await.unwrap(), json!(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reminders_are_bounded_and_cancels_are_durable() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::paused(dir.path(), EntityConfig::default());
    let limits = InstanceLimits {
        reminders_max: 2,
        ..InstanceLimits::default()
    };
    node.deploy("reminder", tessera_tests::REMINDER, 1, limits);
    let remind = |note: &str| json!({"Remind": {"delay_ms": 60_000, "note": note}});
    let first = node.ask("reminder", "r1", remind("a")).await.unwrap();
    node.ask("reminder", "r1", remind("b")).await.unwrap();
    let error = node.ask("reminder", "r1", remind("c")).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::QuotaExceeded, "{error}");
    assert_eq!(node.state.pending_messages().unwrap().1, 2);
    // A cancel frees a place, in the same message that takes it again.
    let timer = first["timer"].as_u64().unwrap();
    node.ask("reminder", "r1", json!({"Cancel": timer}))
        .await
        .unwrap();
    assert_eq!(
        node.state.pending_messages().unwrap().1,
        1,
        "cancelled durably"
    );
    let third = node.ask("reminder", "r1", remind("c")).await.unwrap();
    assert_eq!(node.state.pending_messages().unwrap().1, 2);
    // Timer ids are never reused, even across activations.
    node.entities.passivate(&address("reminder", "r1")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.entities.is_live(&address("reminder", "r1")) {
        assert!(Instant::now() < deadline, "r1 never passivated");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let third = third["timer"].as_u64().unwrap();
    node.ask("reminder", "r1", json!({"Cancel": third}))
        .await
        .unwrap();
    let fourth = node.ask("reminder", "r1", remind("d")).await.unwrap();
    assert!(
        fourth["timer"].as_u64().unwrap() > third,
        "a new activation reused a timer id: {fourth}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_reminder_activates_a_passivated_entity_and_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::new(dir.path());
    deploy(&node, "reminder", tessera_tests::REMINDER);
    let scheduled = node
        .ask(
            "reminder",
            "r1",
            json!({"Remind": {"delay_ms": 300, "note": "tea"}}),
        )
        .await
        .unwrap();
    assert!(scheduled["timer"].as_u64().unwrap() > 0);
    node.entities.passivate(&address("reminder", "r1")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    // The clock counts a firing once the entity's reply reaches it, which is after the commit
    // that deleted the reminder: wait for both.
    let fired_count = || node.entities.stats().reminders_fired.load(Relaxed);
    while node.state.pending_messages().unwrap().1 != 0 || fired_count() == 0 {
        assert!(Instant::now() < deadline, "the reminder never fired");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let fired = node.ask("reminder", "r1", json!("Fired")).await.unwrap();
    assert_eq!(fired["count"], json!(1), "{fired}");
    assert_eq!(fired_count(), 1);
}

/// A guest's fan-out is bounded per payload, per message and by target id length: a message
/// over a bound fails whole and queues nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_fan_out_of_large_tells_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::paused(dir.path(), EntityConfig::default());
    deploy(&node, "relay", tessera_tests::RELAY);
    let flood = |count: u32, bytes: u32| json!({"Flood": {"entity_type": "nobody", "count": count, "bytes": bytes}});
    // One payload over the 1 MiB per-call bound.
    let error = node
        .ask("relay", "r1", flood(1, 2 << 20))
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Failed, "{error}");
    assert!(error.message.contains("over the limit"), "{error}");
    // Eight payloads of 600 KiB: the seventh passes the 4 MiB a message may queue.
    let error = node
        .ask("relay", "r1", flood(8, 600 << 10))
        .await
        .unwrap_err();
    assert!(error.message.contains("may queue at most"), "{error}");
    assert_eq!(
        node.state.pending_messages().unwrap().0,
        0,
        "nothing queued"
    );
    assert_eq!(
        node.ask("relay", "r1", json!("Sent")).await.unwrap(),
        json!(0)
    );
    // Within the bounds the fan-out is committed.
    assert_eq!(
        node.ask("relay", "r1", flood(4, 1_000)).await.unwrap(),
        json!(4)
    );
    assert_eq!(node.state.pending_messages().unwrap().0, 4);
    // A target id over 256 bytes is refused.
    let long = json!({"TellAdd": {"entity_type": "counter", "id": "x".repeat(300), "amount": 1}});
    let error = node.ask("relay", "r1", long).await.unwrap_err();
    assert!(error.message.contains("at most 256 bytes"), "{error}");
}

/// Tells from one sender to one receiver arrive in the order they were sent, within a message
/// and across messages, even with the receiver passivated in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tells_keep_their_order_per_sender_and_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::new(dir.path());
    deploy(&node, "relay", tessera_tests::RELAY);
    deploy(&node, "reminder", tessera_tests::REMINDER);
    let mut expected = Vec::new();
    for batch in 0..5 {
        let notes: Vec<String> = (0..10).map(|index| format!("{batch}-{index}")).collect();
        expected.extend(notes.clone());
        let tell = json!({"TellNotes": {"entity_type": "reminder", "id": "log", "notes": notes}});
        node.ask("relay", "r1", tell).await.unwrap();
        if batch == 2 {
            node.entities
                .passivate(&address("reminder", "log"))
                .unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let fired = node.ask("reminder", "log", json!("Fired")).await.unwrap();
        if fired["count"] == json!(50) {
            assert_eq!(fired["notes"], json!(expected), "out of order");
            break;
        }
        assert!(Instant::now() < deadline, "only {} arrived", fired["count"]);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Deploys `relay` at a message rate of 10 per second with a burst of 1: 100 ms per token,
/// far longer than one delivery or ask, so each message past the burst waits.
fn deploy_slow_relay(node: &TestNode) {
    let limits = InstanceLimits {
        messages_per_second: 10,
        messages_burst: 1,
        ..InstanceLimits::default()
    };
    node.deploy("relay", tessera_tests::RELAY, 1, limits);
}

/// An entity's tells leave at its tenant's message rate: a fan-out waits in the durable outbox
/// (counted) and is delivered in full, not dropped and not let through at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_is_delivered_at_the_tenant_message_rate() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::new(dir.path());
    deploy_slow_relay(&node);
    deploy(&node, "reminder", tessera_tests::REMINDER);
    let notes: Vec<String> = (0..10).map(|index| index.to_string()).collect();
    let tell = json!({"TellNotes": {"entity_type": "reminder", "id": "log", "notes": notes}});
    node.ask("relay", "r1", tell).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.ask("reminder", "log", json!("Fired")).await.unwrap()["count"] != json!(10) {
        assert!(Instant::now() < deadline, "the fan-out was not delivered");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let throttled = node.entities.stats().throttled_tells.load(Relaxed);
    assert!(
        throttled >= 8,
        "only {throttled} of 9 tells past the burst waited"
    );
}

/// A guest's asks go at its tenant's message rate too: each waits for a token (counted), and
/// the chain still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_asks_are_sent_at_the_tenant_message_rate() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::new(dir.path());
    deploy_slow_relay(&node);
    // r1 asks r2, which asks r3, ... : five asks from the tenant's guests.
    let bounce = json!({"Bounce": {"path": ["r2", "r3", "r4", "r5", "r6"]}});
    node.ask("relay", "r1", bounce).await.unwrap();
    let throttled = node.entities.stats().throttled_asks.load(Relaxed);
    assert!(
        throttled >= 4,
        "only {throttled} of the 4 asks past the burst waited"
    );
}
