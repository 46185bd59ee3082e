//! The outbox sweep sends only the outboxes of entities this node serves: rows of a sender
//! served elsewhere (a stale copy left by a lost discard) are not sent from here
//! (`Router::serves_here`). Two entity layers on two stores; the sender's router says whether
//! its node serves the sender.

use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_contract::{BoxFuture, EntityAddress, MessageMeta, Reply, Router};
use tessera_entity::{Entities, EntityConfig, TypeTable};
use tessera_runtime::InstanceLimits;
use tessera_tests::{COUNTER, RELAY, ask_json, bind_type, entity_parts};

/// The sender node's way to the receiver node; it serves the sender while `serving` is set.
struct ToReceiver {
    receiver: Entities,
    serving: AtomicBool,
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

    fn serves_here(&self, _entity: &EntityAddress) -> bool {
        self.serving.load(Ordering::SeqCst)
    }
}

async fn counter(receiver: &Entities) -> serde_json::Value {
    ask_json(receiver, "counter", "c1", json!("Get"))
        .await
        .expect("the counter answers")
}

async fn counter_reaches(receiver: &Entities, value: u64) {
    let poll = async {
        while counter(receiver).await != json!(value) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(30), poll)
            .await
            .is_ok(),
        "counter c1 should reach {value}"
    );
}

/// Entity settings with an outbox sweep every 50 ms.
fn fast_sweeps() -> EntityConfig {
    let mut config = EntityConfig::default();
    config.delivery.sweep_interval_ms = 50;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_is_sent_only_by_the_node_that_serves_its_sender() {
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
        fast_sweeps(),
    ));

    let sender_dir = tempfile::tempdir().expect("temporary directory");
    let sender_types = Arc::new(TypeTable::default());
    bind_type(
        &sender_types,
        "relay",
        RELAY,
        1,
        InstanceLimits::default(),
        None,
    );
    let router = Arc::new(ToReceiver {
        receiver: receiver.clone(),
        serving: AtomicBool::new(true),
    });
    let sender = Entities::new(
        entity_parts(sender_dir.path(), &sender_types, fast_sweeps()),
        router.clone(),
    );
    sender.start_messaging();
    let tell = json!({"TellAdd": {"entity_type": "counter", "id": "c1", "amount": 1}});

    ask_json(&sender, "relay", "r1", tell.clone())
        .await
        .expect("told");
    counter_reaches(&receiver, 1).await;

    // The sender is served elsewhere now: its next tell stays in this node's outbox through
    // many sweeps (50 ms each).
    router.serving.store(false, Ordering::SeqCst);
    ask_json(&sender, "relay", "r1", tell)
        .await
        .expect("committed");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        counter(&receiver).await,
        json!(1),
        "not sent from a node that does not serve r1"
    );
    // Served here again, the sweep sends it.
    router.serving.store(true, Ordering::SeqCst);
    counter_reaches(&receiver, 2).await;
}
