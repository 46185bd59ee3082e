//! The reminder clock fires only reminders of entities this node serves: rows it holds for an
//! entity served elsewhere (a stale copy left by a lost discard) are never fired from here
//! (`Router::serves_here`), and more of them than one scan looks at
//! (`REMINDER_SCAN_ROWS_MAX`), all due before this node's own reminder, cannot starve it: each
//! tick goes on where the last one stopped.

use serde_json::json;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tessera_contract::{BoxFuture, EntityAddress, MessageError, MessageMeta, Reply, Router};
use tessera_entity::{Entities, EntityConfig, REMINDER_SCAN_ROWS_MAX, TypeTable};
use tessera_runtime::InstanceLimits;
use tessera_state::{Reminder, WriteSet};
use tessera_tests::{REMINDER, address, ask_json, bind_type, entity_parts, to_msgpack};

/// This node's router: it serves every entity but the `stale-*` ones, and records every
/// entity the reminder clock asked it to deliver to.
#[derive(Default)]
struct ServesAllButStale {
    entities: OnceLock<Entities>,
    fired: Mutex<Vec<EntityAddress>>,
}

impl Router for ServesAllButStale {
    fn ask(
        &self,
        to: EntityAddress,
        payload: Vec<u8>,
        meta: MessageMeta,
        timeout: Duration,
    ) -> BoxFuture<'static, Reply> {
        self.fired
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(to.clone());
        let entities = self.entities.get().cloned();
        Box::pin(async move {
            let entities = entities.ok_or_else(|| MessageError::unavailable("not started"))?;
            entities.ask_with(to, 0, payload, meta, timeout).await
        })
    }

    fn serves_here(&self, entity: &EntityAddress) -> bool {
        !entity.id.starts_with("stale")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reminders_of_entities_served_elsewhere_are_never_fired_and_starve_nothing() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let types = Arc::new(TypeTable::default());
    bind_type(
        &types,
        "reminder",
        REMINDER,
        1,
        InstanceLimits::default(),
        None,
    );
    let router = Arc::new(ServesAllButStale::default());
    let entities = Entities::new(
        entity_parts(dir.path(), &types, EntityConfig::default()),
        router.clone(),
    );
    if router.entities.set(entities.clone()).is_err() {
        panic!("the router is set once");
    }

    // Stale rows, all overdue (due before this node's own reminder), more than one scan.
    let stale_count = REMINDER_SCAN_ROWS_MAX + 200;
    let firing = to_msgpack(&json!({"Fire": {"note": "stale", "due_ms": 1}}));
    for index in 0..stale_count {
        let mut writes = WriteSet::new(address("reminder", &format!("stale-{index}")));
        writes.messaging_mut().reminders.push(Reminder {
            timer: 1,
            due_ms: 1 + index as u64,
            payload: firing.clone(),
        });
        entities.state().commit(writes).await.expect("committed");
    }

    entities.start_messaging();
    ask_json(
        &entities,
        "reminder",
        "mine",
        json!({"Remind": {"delay_ms": 50, "note": "mine"}}),
    )
    .await
    .expect("scheduled");
    let fired_mine = async {
        loop {
            let fired = ask_json(&entities, "reminder", "mine", json!("Fired"))
                .await
                .expect("answers");
            if fired["count"] == json!(1) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(30), fired_mine)
            .await
            .is_ok(),
        "this node's reminder fires behind {stale_count} stale ones"
    );
    let fired = router
        .fired
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    assert!(
        fired.iter().all(|entity| !entity.id.starts_with("stale")),
        "a reminder of an entity served elsewhere was fired from here: {} of {}",
        fired
            .iter()
            .filter(|entity| entity.id.starts_with("stale"))
            .count(),
        fired.len()
    );
    let (_, reminders_held) = entities.state().pending_messages().expect("counted");
    assert_eq!(
        reminders_held, stale_count as u64,
        "the stale rows stay for whoever serves them"
    );
}
