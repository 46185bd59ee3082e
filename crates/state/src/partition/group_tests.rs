//! A partition's group of three voters in one process, through the one group driver the
//! metadata plane runs on: writes commit on every voter, a stale write and a stale read's
//! barrier are refused, and after the primary stops the others elect another and go on from
//! every committed write.

use super::*;
use crate::WriteSet;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_consensus::group::{
    GROUP_INBOUND_MAX, Group, GroupConfig, GroupFrame, GroupId, GroupInbound, GroupObserver,
    GroupOutbox, ObserverFuture,
};
use tessera_contract::EntityAddress;
use tokio::sync::mpsc;

const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
const GROUP: GroupId = GroupId(8);
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

/// Every write a member applied, in order.
#[derive(Default)]
struct Written(Mutex<Vec<(EntityAddress, u64)>>);

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

fn start(node: &str, network: &Arc<Network>, dir: &tempfile::TempDir) -> (Group, Arc<Written>) {
    let (sender, inbound): (_, GroupInbound) = mpsc::channel(GROUP_INBOUND_MAX);
    network
        .inboxes
        .lock()
        .expect("network")
        .insert(node.to_string(), sender);
    let written = Arc::new(Written::default());
    let config = GroupConfig {
        sessions: 4,
        ..GroupConfig::new(GROUP, VOTERS.map(String::from).to_vec(), node.to_string())
    };
    let outbox = Arc::new(Outbox {
        node: node.to_string(),
        network: network.clone(),
    });
    let group = Group::start_voter(
        config,
        &dir.path().join(format!("{node}.journal")),
        // On a file, as a node runs it: what the group writes goes through redb.
        PartitionReplica::new(
            PartitionMachine::create(&dir.path().join(format!("{node}.redb")))
                .expect("the partition database opens"),
        ),
        written.clone(),
        outbox,
        inbound,
    )
    .expect("a voter starts");
    (group, written)
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
        .map(|node| (*node, start(node, &network, &dir)))
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
