//! A sender whose state was lost and starts again is never taken for its former life: a
//! receiver drops a sender's tells up to the highest sequence it committed, so the new life
//! numbers its tells from its shard's lineage (`Router::sequence_base`), above everything the
//! former life sent. Two nodes' entity layers on two stores: the relay (the sender) on one, the
//! counter (the receiver) on the other; the relay's node is lost and replaced by an empty one
//! at a later shard generation.

use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tessera_contract::{BoxFuture, EntityAddress, MessageMeta, Reply, Router, ShardId};
use tessera_entity::{Entities, EntityConfig, TypeTable};
use tessera_runtime::InstanceLimits;
use tessera_tests::{COUNTER, RELAY, ask_json, bind_type, entity_parts};

/// The sender node's way to the receiver node, serving its shards at `generation`.
struct ToReceiver {
    receiver: Entities,
    generation: u64,
}

impl Router for ToReceiver {
    fn ask(
        &self,
        to: EntityAddress,
        payload: Vec<u8>,
        meta: MessageMeta,
        timeout: Duration,
    ) -> BoxFuture<'static, Reply> {
        let receiver = self.receiver.clone();
        Box::pin(async move { receiver.ask_with(to, 0, payload, meta, timeout).await })
    }

    fn sequence_base(&self, _sender: &EntityAddress, _shard: ShardId) -> u64 {
        tessera_contract::sequence_base(self.generation)
    }
}

/// A sender node: its own store and a relay bound.
fn sender_node(dir: &std::path::Path, receiver: &Entities, generation: u64) -> Entities {
    let types = Arc::new(TypeTable::default());
    bind_type(&types, "relay", RELAY, 1, InstanceLimits::default(), None);
    let router = Arc::new(ToReceiver {
        receiver: receiver.clone(),
        generation,
    });
    let sender = Entities::new(entity_parts(dir, &types, EntityConfig::default()), router);
    sender.start_messaging();
    sender
}

async fn counter_reaches(receiver: &Entities, value: u64) {
    let poll = async {
        while ask_json(receiver, "counter", "c1", json!("Get")).await.ok() != Some(json!(value)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let reached = tokio::time::timeout(Duration::from_secs(30), poll).await;
    assert!(
        reached.is_ok(),
        "counter c1 should reach {value}, has {:?}",
        ask_json(receiver, "counter", "c1", json!("Get")).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_whose_state_was_lost_is_not_taken_for_its_former_life() {
    let receiver_dir = tempfile::tempdir().expect("temporary directory");
    let receiver_types = Arc::new(TypeTable::default());
    bind_type(
        &receiver_types,
        "counter",
        COUNTER,
        1,
        InstanceLimits::default(),
        None,
    );
    let receiver = Entities::standalone(entity_parts(
        receiver_dir.path(),
        &receiver_types,
        EntityConfig::default(),
    ));
    let tell = json!({"TellAdd": {"entity_type": "counter", "id": "c1", "amount": 1}});

    // The first life of relay r1 (its shard at generation 1) tells three times.
    let first_dir = tempfile::tempdir().expect("temporary directory");
    let first = sender_node(first_dir.path(), &receiver, 1);
    for _ in 0..3 {
        ask_json(&first, "relay", "r1", tell.clone())
            .await
            .expect("told");
    }
    counter_reaches(&receiver, 3).await;
    first.stop_all().await;
    drop(first);
    drop(first_dir); // its disk is gone

    // Its shard restarts empty at generation 2: r1's tells count from nothing again.
    let second_dir = tempfile::tempdir().expect("temporary directory");
    let second = sender_node(second_dir.path(), &receiver, 2);
    assert_eq!(
        ask_json(&second, "relay", "r1", json!("Sent"))
            .await
            .expect("asked"),
        json!(0),
        "the new life has no state"
    );
    ask_json(&second, "relay", "r1", tell.clone())
        .await
        .expect("told");
    ask_json(&second, "relay", "r1", tell).await.expect("told");
    counter_reaches(&receiver, 5).await;
}
