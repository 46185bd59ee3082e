//! A partition's group of three voters in one process, through the one group driver the
//! metadata plane runs on: writes commit on every voter, a stale write and a stale read's
//! barrier are refused, and after the primary stops the others elect another and go on from
//! every committed write. The same group behind [`PartitionState`] on each node: a commit
//! reads its own write at once and reaches the other copies with its messaging, a stale copy's
//! commit and barrier are refused, and acknowledgements settle whatever the stamp.

use super::*;
use crate::messaging::OutboxEntry;
use crate::{CommitError, EntityState, Receipt, StateStore, WriteSet, WriteStamps};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_consensus::group::{
    GROUP_INBOUND_MAX, Group, GroupConfig, GroupFrame, GroupId, GroupInbound, GroupObserver,
    GroupOutbox, ObserverFuture,
};
use tessera_contract::{EntityAddress, TypeKey};
use tokio::sync::mpsc;

const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
const GROUP: GroupId = GroupId(8);
const DEADLINE: Duration = Duration::from_secs(20);

#[derive(Default)]
pub(super) struct Network {
    pub(super) inboxes: Mutex<BTreeMap<String, mpsc::Sender<(String, GroupFrame)>>>,
    /// State-transfer frames sent: `(whole-checkpoint chunks, stream parts, largest part)`.
    pub(super) transfers: Mutex<(u64, u64, usize)>,
    /// The members' checkpoint interval (`None`: the default).
    pub(super) checkpoint_interval_ops: Option<u64>,
}

impl Network {
    /// Counts `frame` if it carries state.
    fn count(&self, frame: &GroupFrame) {
        use tessera_consensus::group::GroupMessage;
        use tessera_consensus::message::Message;
        let mut transfers = self.transfers.lock().expect("network");
        match &frame.message {
            GroupMessage::Replica(Message::StateChunk { .. }) => transfers.0 += 1,
            GroupMessage::Replica(Message::ImagePart { bytes, .. }) => {
                transfers.1 += 1;
                transfers.2 = transfers.2.max(bytes.len());
            }
            _ => {}
        }
    }
}

struct Outbox {
    node: String,
    network: Arc<Network>,
}

impl GroupOutbox for Outbox {
    fn send(&self, to: &str, frame: GroupFrame) {
        self.network.count(&frame);
        let inboxes = self.network.inboxes.lock().expect("network");
        if let Some(inbox) = inboxes.get(to) {
            let _ = inbox.try_send((self.node.clone(), frame));
        }
    }
}

/// Every write a member applied, in order.
#[derive(Default)]
pub(super) struct Written(Mutex<Vec<(EntityAddress, u64)>>);

impl GroupObserver<PartitionApplied> for Written {
    fn applied<'a>(&'a self, applied: &'a PartitionApplied) -> ObserverFuture<'a> {
        if let PartitionApplied::Written { entity, stamp } = applied {
            self.0
                .lock()
                .expect("observer")
                .push((entity.clone(), *stamp));
        }
        Box::pin(async {})
    }
}

fn counter() -> EntityAddress {
    EntityAddress::new("t", "counter", "c1")
}

fn write(expect: u64, stamp: u64, value: u8) -> Vec<u8> {
    let mut writes = WriteSet::new(counter());
    writes.put("value", vec![value]);
    PartitionOp::write(writes, expect, stamp, 1_000, vec![value])
        .expect("replicable")
        .encode()
}

fn check(expect: u64) -> Vec<u8> {
    PartitionOp::Check {
        entity: counter(),
        expect,
        reply: Vec::new(),
    }
    .encode()
}

/// A member on `node`: its group, what it applied, and its replica's tables.
fn start(
    node: &str,
    network: &Arc<Network>,
    dir: &tempfile::TempDir,
) -> (Group, Arc<Written>, StateStore) {
    // On a file, as a node runs it: what the group writes goes through redb.
    let machine = PartitionMachine::open(&dir.path().join(format!("{node}.redb")))
        .expect("the partition database opens");
    start_member(GROUP, &VOTERS, node, network, dir, machine)
}

/// A member on `node` of `group` among `voters`, over `network` (one per group), its journal
/// in `dir`, applying to `machine`.
pub(super) fn start_member(
    group: GroupId,
    voters: &[&str],
    node: &str,
    network: &Arc<Network>,
    dir: &tempfile::TempDir,
    machine: PartitionMachine,
) -> (Group, Arc<Written>, StateStore) {
    let (sender, inbound): (_, GroupInbound) = mpsc::channel(GROUP_INBOUND_MAX);
    network
        .inboxes
        .lock()
        .expect("network")
        .insert(node.to_string(), sender);
    let written = Arc::new(Written::default());
    let voters = voters.iter().map(|voter| voter.to_string()).collect();
    let config = GroupConfig {
        sessions: 4,
        checkpoint_interval_ops: network.checkpoint_interval_ops,
        ..GroupConfig::new(group, voters, node.to_string())
    };
    let outbox = Arc::new(Outbox {
        node: node.to_string(),
        network: network.clone(),
    });
    let store = machine.store().clone();
    let journal = dir.path().join(format!("{node}.g{}.journal", group.0));
    let group = Group::start_voter(
        config,
        &journal,
        PartitionReplica::new(machine),
        written.clone(),
        outbox,
        inbound,
    )
    .expect("a voter starts");
    (group, written, store)
}

async fn submit(group: &Group, operation: Vec<u8>) -> PartitionResult {
    let answer = tokio::time::timeout(DEADLINE, async {
        loop {
            // A view change in progress answers no one: ask again.
            match group.submit(operation.clone()).await {
                Ok(bytes) => return PartitionResult::decode(&bytes),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    });
    answer.await.expect("the operation commits")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_group_commits_outcomes_refuses_stale_ones_and_survives_its_primary() {
    let dir = tempfile::tempdir().expect("temp dir");
    let network = Arc::new(Network::default());
    let mut members: BTreeMap<&str, (Group, Arc<Written>)> = VOTERS
        .iter()
        .map(|node| {
            let (group, written, _) = start(node, &network, &dir);
            (*node, (group, written))
        })
        .collect();
    let through = |node: &str| &members[node].0;

    assert_eq!(
        submit(through("n2"), write(0, 11, 1)).await,
        PartitionResult::Applied { reply: vec![1] }
    );
    // A second node ran a message against the copy before stamp 11: refused.
    assert_eq!(
        submit(through("n3"), write(0, 12, 9)).await,
        PartitionResult::Conflict { stamp: 11 }
    );
    assert_eq!(
        submit(through("n1"), check(0)).await,
        PartitionResult::Conflict { stamp: 11 }
    );
    assert_eq!(
        submit(through("n1"), check(11)).await,
        PartitionResult::Checked { reply: Vec::new() }
    );

    // The primary of view 0 stops; the other two elect one and go on from stamp 11.
    network.inboxes.lock().expect("network").remove("n1");
    members.remove("n1");
    assert_eq!(
        submit(&members["n3"].0, write(11, 13, 2)).await,
        PartitionResult::Applied { reply: vec![2] }
    );
    for (node, (_, written)) in &members {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let seen = written.0.lock().expect("observer").clone();
            if seen == [(counter(), 11), (counter(), 13)] {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{node} saw {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Commits through `state`, again while the group cannot order it yet (its first election).
pub(super) async fn commit(state: &PartitionState, writes: WriteSet) -> Result<(), CommitError> {
    let answer = tokio::time::timeout(DEADLINE, async {
        loop {
            match state.commit(writes.clone()).await {
                Err(CommitError::Unavailable(_)) => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                done => return done,
            }
        }
    });
    answer.await.expect("the group answers")
}

/// Waits until `check` holds of `state`.
pub(super) async fn until(
    state: &PartitionState,
    what: &str,
    check: impl Fn(&PartitionState) -> bool,
) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check(state) {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_partition_commits_through_its_group_and_refuses_a_stale_copy() {
    let dir = tempfile::tempdir().expect("temp dir");
    let network = Arc::new(Network::default());
    let states: BTreeMap<&str, PartitionState> = VOTERS
        .iter()
        .map(|node| {
            let (group, _, store) = start(node, &network, &dir);
            (*node, PartitionState::new(store, Arc::new(group)))
        })
        .collect();
    let (n1, n2, n3) = (&states["n1"], &states["n2"], &states["n3"]);
    let relay = EntityAddress::new("t", "relay", "r1");
    let stamp = |state: &PartitionState| state.meta(&counter()).expect("meta").stamp;
    let value = |state: &PartitionState| state.get(&counter(), "value").expect("get");
    assert_eq!(stamp(n1), 0);

    // A message on n1: a state key, a tell, the receipt of the tell it handled.
    let mut writes = WriteSet::new(counter());
    writes.put("value", vec![1]);
    writes.messaging_mut().outbox.push(OutboxEntry {
        seq: 1,
        to: EntityAddress::new("t", "counter", "c2"),
        payload: b"tell".to_vec(),
    });
    writes.messaging_mut().receipt = Some(Receipt::Entity {
        sender: relay.clone(),
        seq: 3,
    });
    writes.set_stamps(WriteStamps {
        read: 0,
        written: 11,
    });
    commit(n1, writes).await.expect("the write commits");
    // Read at once where it was committed: the answer waits for this replica's apply.
    assert_eq!((stamp(n1), value(n1)), (11, Some(vec![1])));
    until(n2, "n2 applies the write", |n2| stamp(n2) == 11).await;
    assert_eq!(value(n2), Some(vec![1]));
    assert_eq!(n2.outbox(&counter(), 10).expect("outbox").len(), 1);
    let receipt = Receipt::Entity {
        sender: relay,
        seq: 3,
    };
    assert_eq!(n2.is_duplicate(&counter(), &receipt), Ok(true));

    // n3 ran a message against the copy before stamp 11 (it served the entity too): refused.
    let mut stale = WriteSet::new(counter());
    stale.put("value", vec![9]);
    stale.set_stamps(WriteStamps {
        read: 0,
        written: 12,
    });
    assert_eq!(
        commit(n3, stale).await,
        Err(CommitError::Stale { stamp: 11 })
    );
    // A read of the copy before stamp 11 cannot answer; one of the current copy can.
    assert_eq!(
        n3.barrier(&counter(), 0).await,
        Err(CommitError::Stale { stamp: 11 })
    );
    n3.barrier(&counter(), 11)
        .await
        .expect("the read is current");

    // The receiver acknowledged the tell: settled from n2, whatever the stamp, which stays.
    let mut acked = WriteSet::new(counter());
    acked.messaging_mut().acked = vec![1];
    commit(n2, acked)
        .await
        .expect("the acknowledgement settles");
    until(n1, "n1 applies the acknowledgement", |n1| {
        n1.outbox(&counter(), 10).expect("outbox").is_empty()
    })
    .await;
    assert_eq!((stamp(n1), value(n1)), (11, Some(vec![1])));
    // A settle may not carry state.
    let mut smuggled = WriteSet::new(counter());
    smuggled.put("value", vec![7]);
    assert!(matches!(
        n2.commit(smuggled).await,
        Err(CommitError::Storage(_))
    ));
    assert_eq!(value(n2), Some(vec![1]));
}

/// A partitioned entity's remembered id is committed through its partition's group: every
/// replica lists it (so the next owner of its shard restarts it, whichever node that is),
/// the node's local store does not, and an id of a partition with no replica here is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_ids_of_partitioned_entities_are_on_every_replica() {
    use crate::remember::{RememberOp, RememberedId};
    use crate::{GroupCommitConfig, LocalState, RememberStore};
    let dir = tempfile::tempdir().expect("temp dir");
    let network = Arc::new(Network::default());
    let local = |node: &str| {
        let store =
            StateStore::open(&dir.path().join(format!("{node}-local.redb"))).expect("opens");
        Arc::new(LocalState::new(store, GroupCommitConfig::default()))
    };
    // Counters live in partition 0, everything else locally.
    let partition_of: crate::partition::PartitionOf =
        Arc::new(|entity: &EntityAddress| (entity.entity_type == "counter").then_some(0));
    let mut remembers = Vec::new();
    let mut locals = Vec::new();
    for node in VOTERS {
        let (group, _, store) = start(node, &network, &dir);
        let local = local(node);
        let routed = Arc::new(RoutedState::new(local.clone(), partition_of.clone()));
        routed.hold(0, Arc::new(PartitionState::new(store, Arc::new(group))));
        remembers.push(RoutedRemember::new(local.clone(), routed));
        locals.push(local);
    }
    let id = |entity_type: &str, id: &str| {
        RememberedId::new(&EntityAddress::new("t", entity_type, id), 1)
    };
    let batch = vec![
        RememberOp::Started(id("counter", "c1")),
        RememberOp::Started(id("relay", "r1")),
    ];
    let applied = tokio::time::timeout(DEADLINE, async {
        loop {
            match remembers[0].apply(batch.clone()).await {
                Err(CommitError::Unavailable(_)) => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                done => return done,
            }
        }
    });
    applied
        .await
        .expect("the group answers")
        .expect("remembered");
    let counters = TypeKey::new("t", "counter");
    for (index, remember) in remembers.iter().enumerate() {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while remember.list_ids(&counters, 1).expect("lists") != vec!["c1".to_string()] {
            assert!(
                tokio::time::Instant::now() < deadline,
                "replica {index} never lists c1"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(remember.list_shards(&counters), Ok(vec![1]));
        assert_eq!(
            locals[index].list_ids(&counters, 1),
            Ok(Vec::new()),
            "not in node {index}'s local store"
        );
    }
    let relays = TypeKey::new("t", "relay");
    assert_eq!(
        remembers[0].list_ids(&relays, 1),
        Ok(vec!["r1".to_string()])
    );
    assert_eq!(
        remembers[1].list_ids(&relays, 1),
        Ok(Vec::new()),
        "local to node 0"
    );

    // No replica of partition 5 here: refused.
    let elsewhere: crate::partition::PartitionOf = Arc::new(|_: &EntityAddress| Some(5));
    let routed = Arc::new(RoutedState::new(locals[0].clone(), elsewhere));
    let refused = RoutedRemember::new(locals[0].clone(), routed)
        .apply(vec![RememberOp::Started(id("counter", "c9"))])
        .await;
    assert!(
        matches!(refused, Err(CommitError::Unavailable(_))),
        "{refused:?}"
    );
}
