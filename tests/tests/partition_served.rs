//! The entity layer over a partition group: a real counter served from a replica of a three-
//! voter group in one process, its writes committed through the group. Each live instance
//! commits against the stamp of the copy it was built from, so when a second node serves the
//! same entity (two activations, as a stalled primary would make), the instance that missed a
//! write cannot commit: its message fails, nothing of it is written, and its next message
//! starts from the current copy; a read from such an instance waits for a barrier that finds
//! the later write, and is refused too. Every acknowledged add is in the value every replica
//! holds, and none twice.

use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_consensus::group::{
    GROUP_INBOUND_MAX, Group, GroupConfig, GroupFrame, GroupId, GroupObserver, GroupOutbox,
    ObserverFuture,
};
use tessera_contract::{
    BoxFuture, EntityAddress, ErrorKind, MessageError, MessageMeta, Reply, Router, ShardId,
};
use tessera_entity::{Entities, EntityConfig, EntityParts, TypeTable};
use tessera_runtime::InstanceLimits;
use tessera_state::StateStore;
use tessera_state::partition::{
    PartitionApplied, PartitionMachine, PartitionReplica, PartitionState,
};
use tessera_tests::{COUNTER, address, from_msgpack, shared_runtime, to_msgpack};
use tokio::sync::mpsc;

const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
const DEADLINE: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Network {
    inboxes: Mutex<BTreeMap<String, mpsc::Sender<(String, GroupFrame)>>>,
}

struct Outbox {
    node: String,
    network: Arc<Network>,
}

impl GroupOutbox for Outbox {
    fn send(&self, to: &str, frame: GroupFrame) {
        let inboxes = self.network.inboxes.lock().expect("network");
        if let Some(inbox) = inboxes.get(to) {
            let _ = inbox.try_send((self.node.clone(), frame));
        }
    }
}

struct Unobserved;

impl GroupObserver<PartitionApplied> for Unobserved {
    fn applied<'a>(&'a self, _: &'a PartitionApplied) -> ObserverFuture<'a> {
        Box::pin(async {})
    }
}

/// A router that reaches nobody and lets this node serve everything: single activation is
/// left to the partition alone.
struct ServesAll;

impl Router for ServesAll {
    fn ask(
        &self,
        _to: EntityAddress,
        _payload: Vec<u8>,
        _meta: MessageMeta,
        _timeout: Duration,
    ) -> BoxFuture<'static, Reply> {
        Box::pin(async { Err(MessageError::unavailable("no routes in this test")) })
    }

    fn may_serve(&self, _to: &EntityAddress, _shard: ShardId) -> Result<(), MessageError> {
        Ok(())
    }

    fn holds_lease(&self) -> Result<(), MessageError> {
        Ok(())
    }
}

/// One voter of the group: its replica's tables and its handle.
fn voter(node: &str, network: &Arc<Network>, dir: &std::path::Path) -> (StateStore, Arc<Group>) {
    let (sender, inbound) = mpsc::channel(GROUP_INBOUND_MAX);
    let mut inboxes = network.inboxes.lock().expect("network");
    inboxes.insert(node.to_string(), sender);
    let config = GroupConfig {
        sessions: 4,
        ..GroupConfig::new(
            GroupId(1),
            VOTERS.map(String::from).to_vec(),
            node.to_string(),
        )
    };
    let machine = PartitionMachine::open(&dir.join(format!("{node}.redb")))
        .expect("the partition database opens");
    let store = machine.store().clone();
    let outbox = Arc::new(Outbox {
        node: node.to_string(),
        network: network.clone(),
    });
    let group = Group::start_voter(
        config,
        &dir.join(format!("{node}.journal")),
        PartitionReplica::new(machine),
        Arc::new(Unobserved),
        outbox,
        inbound,
    )
    .expect("a voter starts");
    (store, Arc::new(group))
}

/// An entity layer serving from `store` through `group`, the counter deployed.
fn serving(store: StateStore, group: Arc<Group>) -> Entities {
    let types = Arc::new(TypeTable::default());
    let entities = Entities::new(
        EntityParts {
            runtime: shared_runtime(),
            state: Arc::new(PartitionState::new(store, group)),
            types: types.clone(),
            remember: None,
            config: EntityConfig::default(),
        },
        Arc::new(ServesAll),
    );
    tessera_tests::bind_type(
        &types,
        "counter",
        COUNTER,
        1,
        InstanceLimits::default(),
        None,
    );
    entities
}

async fn ask(entities: &Entities, message: serde_json::Value) -> Result<i64, MessageError> {
    let reply = entities
        .ask(
            address("counter", "c-1"),
            0,
            to_msgpack(&message),
            Duration::from_secs(20),
        )
        .await?;
    let value = from_msgpack(&reply).map_err(|e| MessageError::new(ErrorKind::Failed, e))?;
    value
        .as_i64()
        .ok_or_else(|| MessageError::new(ErrorKind::Failed, format!("not a value: {value}")))
}

/// Asks until the group has elected its first primary (the first commit waits for it).
async fn first_ask(entities: &Entities, message: serde_json::Value) -> i64 {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match ask(entities, message.clone()).await {
            Ok(value) => return value,
            Err(error) => assert!(
                tokio::time::Instant::now() < deadline,
                "the group never committed: {error}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The counter's value in a replica's copy.
fn held(store: &StateStore) -> Option<i64> {
    let bytes = store
        .get(&address("counter", "c-1"), "value")
        .expect("get")?;
    from_msgpack(&bytes).expect("MessagePack").as_i64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_missed_another_nodes_write_cannot_commit_and_starts_afresh() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let network = Arc::new(Network::default());
    let voters: Vec<(StateStore, Arc<Group>)> = VOTERS
        .iter()
        .map(|node| voter(node, &network, dir.path()))
        .collect();
    let n1 = serving(voters[0].0.clone(), voters[0].1.clone());
    let n2 = serving(voters[1].0.clone(), voters[1].1.clone());

    assert_eq!(first_ask(&n1, json!({"Add": 5})).await, 5);
    assert_eq!(ask(&n1, json!({"Add": 2})).await, Ok(7));
    // The second node activates the counter from its own replica, which holds 7.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while held(&voters[1].0) != Some(7) {
        assert!(tokio::time::Instant::now() < deadline, "n2 never applied 7");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ask(&n2, json!({"Add": 1})).await, Ok(8));

    // n1's instance still holds 7: its add, computed from 7, is refused, not written over 8,
    // and answered as retryable.
    let stale = ask(&n1, json!({"Add": 10})).await;
    assert_eq!(
        stale.map_err(|error| error.kind),
        Err(ErrorKind::Unavailable),
        "an add computed from a copy that missed a write"
    );
    // Its next message starts from the current copy.
    assert_eq!(ask(&n1, json!({"Add": 1})).await, Ok(9));
    // n2's instance holds 8: a read from it cannot answer (its barrier finds a later write),
    // and the next read starts from the current copy.
    let stale_read = ask(&n2, json!("Get")).await;
    assert_eq!(
        stale_read.map_err(|error| error.kind),
        Err(ErrorKind::Unavailable),
        "a read of a copy that missed a write"
    );
    assert_eq!(ask(&n2, json!("Get")).await, Ok(9));
    for (node, (store, _)) in VOTERS.iter().zip(&voters) {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while held(store) != Some(9) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{node} holds {:?}, not 5 + 2 + 1 + 1",
                held(store)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
