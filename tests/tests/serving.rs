//! A node that may no longer serve an entity — its lease ran out or its shard left while the
//! message waited or ran — keeps nothing the message wrote and sends no reply from it: the
//! entity layer asks the router (`Router::may_serve`: lease and shard) before a message's
//! writes commit and before its reply leaves, and (`Router::holds_lease`) before a reply read
//! from state leaves. Here the router's answer is switched by hand; in a node it is the
//! region's lease and shard table.

use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_contract::{
    BoxFuture, EntityAddress, ErrorKind, MessageError, MessageMeta, Reply, Router, ShardId,
};
use tessera_entity::{Entities, EntityConfig, EntityParts, TypeTable};
use tessera_runtime::InstanceLimits;
use tessera_state::{GroupCommitConfig, LocalState, StateStore};
use tessera_tests::{COUNTER, address, from_msgpack, shared_runtime, to_msgpack};

/// A router that reaches nobody and says whether this node may serve, as the test sets it.
struct Switched {
    serving: AtomicBool,
}

impl Router for Switched {
    fn ask(
        &self,
        _to: EntityAddress,
        _payload: Vec<u8>,
        _meta: MessageMeta,
        _timeout: Duration,
    ) -> BoxFuture<'static, Reply> {
        Box::pin(async { Err(MessageError::unavailable("no routes in this test")) })
    }

    fn may_serve(&self, to: &EntityAddress, _shard: ShardId) -> Result<(), MessageError> {
        self.holds_lease()
            .map_err(|error| MessageError::shard_unavailable(format!("{to}: {}", error.message)))
    }

    fn holds_lease(&self) -> Result<(), MessageError> {
        if self.serving.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(MessageError::shard_unavailable("not served here"))
        }
    }
}

async fn ask(
    entities: &Entities,
    message: serde_json::Value,
) -> Result<serde_json::Value, MessageError> {
    let reply = entities
        .ask(
            address("counter", "c-1"),
            0,
            to_msgpack(&message),
            Duration::from_secs(20),
        )
        .await?;
    from_msgpack(&reply).map_err(|error| MessageError::new(ErrorKind::Failed, error))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_may_no_longer_serve_keeps_no_write_and_sends_no_reply() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = StateStore::open(&dir.path().join("tessera.redb")).expect("the store opens");
    let state = Arc::new(LocalState::new(store, GroupCommitConfig::default()));
    let types = Arc::new(TypeTable::default());
    let router = Arc::new(Switched {
        serving: AtomicBool::new(true),
    });
    let entities = Entities::new(
        EntityParts {
            runtime: shared_runtime(),
            state,
            types: types.clone(),
            remember: None,
            config: EntityConfig::default(),
        },
        router.clone(),
    );
    tessera_tests::bind_type(
        &types,
        "counter",
        COUNTER,
        1,
        InstanceLimits::default(),
        None,
    );

    assert_eq!(ask(&entities, json!({"Add": 5})).await.unwrap(), json!(5));
    router.serving.store(false, Ordering::SeqCst);
    // A write: refused before it commits.
    let write = ask(&entities, json!({"Add": 1})).await;
    assert_eq!(write.map_err(|e| e.kind), Err(ErrorKind::ShardUnavailable));
    // A read: no answer from state this node may not serve.
    let read = ask(&entities, json!("Get")).await;
    assert_eq!(read.map_err(|e| e.kind), Err(ErrorKind::ShardUnavailable));
    // Serving again, the entity has exactly what committed while it could.
    router.serving.store(true, Ordering::SeqCst);
    assert_eq!(ask(&entities, json!("Get")).await.unwrap(), json!(5));
    assert_eq!(ask(&entities, json!({"Add": 1})).await.unwrap(), json!(6));
}
