//! Voters of partition groups in one process over an in-memory network, as the partition
//! plane's benchmarks run them: each a `PartitionReplica` on its own file journal and redb
//! database, through the one group driver a node runs, its frames handed to the other voters'
//! inbound queues (no transport). The same wiring as the state crate's group tests, shared here
//! so the benchmarks do not each carry a copy.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use tessera_consensus::group::{
    GROUP_INBOUND_MAX, Group, GroupConfig, GroupFrame, GroupId, GroupObserver, GroupOutbox,
    ObserverFuture,
};
use tessera_state::StateStore;
use tessera_state::partition::{
    PARTITION_TICK_FACTOR, PARTITION_TIMEOUTS, PartitionApplied, PartitionMachine, PartitionReplica,
};
use tokio::sync::mpsc;

/// `node`'s member of `group` among `voters`, ticking and timing out as a node's partition
/// groups do (at the default cluster tick).
pub fn partition_config(group: GroupId, voters: Vec<String>, node: String) -> GroupConfig {
    let base = GroupConfig::new(group, voters, node);
    GroupConfig {
        tick: base.tick * PARTITION_TICK_FACTOR,
        timeouts: PARTITION_TIMEOUTS,
        ..base
    }
}

/// Where a voter's frames from other voters go.
type Inbox = mpsc::Sender<(String, GroupFrame)>;

/// Every voter's inbound queue, by `(node, group)`. A frame to a voter not in it is dropped,
/// as a transport drops frames to a node that is down.
#[derive(Default)]
pub struct Network {
    inboxes: Mutex<BTreeMap<(String, GroupId), Inbox>>,
}

impl Network {
    /// Cuts `node`'s voter of `group` off: frames to it are dropped from now on.
    pub fn cut(&self, node: &str, group: GroupId) {
        self.inboxes
            .lock()
            .expect("network")
            .remove(&(node.to_string(), group));
    }
}

/// What one voter sends, into the network.
struct Outbox {
    node: String,
    network: Arc<Network>,
}

impl GroupOutbox for Outbox {
    fn send(&self, to: &str, frame: GroupFrame) {
        let inboxes = self.network.inboxes.lock().expect("network");
        if let Some(inbox) = inboxes.get(&(to.to_string(), frame.group)) {
            let _ = inbox.try_send((self.node.clone(), frame));
        }
    }
}

/// An observer that ignores what was applied.
pub struct Quiet;

impl GroupObserver<PartitionApplied> for Quiet {
    fn applied<'a>(&'a self, _: &'a PartitionApplied) -> ObserverFuture<'a> {
        Box::pin(async {})
    }
}

/// One running voter: its group handle and its replica's tables.
pub struct Voter {
    /// The member's handle (dropping the last clone stops its driver).
    pub group: Arc<Group>,
    /// The replica's tables, as its machine applied them.
    pub store: StateStore,
}

/// The journal and database files of `node`'s voter of `group` under `dir`.
pub fn voter_files(dir: &Path, node: &str, group: GroupId) -> [std::path::PathBuf; 2] {
    [
        dir.join(format!("{node}-{}.journal", group.0)),
        dir.join(format!("{node}-{}.redb", group.0)),
    ]
}

/// Starts `config.node`'s voter of `config.group` with its journal and database in `dir`
/// ([`voter_files`]; a journal that does not exist is a new member's or a lost disk's), its
/// inbound queue registered in `network`. Must be called within a Tokio runtime.
pub fn start_voter(network: &Arc<Network>, config: GroupConfig, dir: &Path) -> Voter {
    let (sender, inbound) = mpsc::channel(GROUP_INBOUND_MAX);
    network
        .inboxes
        .lock()
        .expect("network")
        .insert((config.node.clone(), config.group), sender);
    let outbox = Arc::new(Outbox {
        node: config.node.clone(),
        network: network.clone(),
    });
    let [journal, database] = voter_files(dir, &config.node, config.group);
    let machine = PartitionMachine::open(&database).expect("the partition database opens");
    let store = machine.store().clone();
    let group = Group::start_voter(
        config,
        &journal,
        PartitionReplica::new(machine),
        Arc::new(Quiet),
        outbox,
        inbound,
    )
    .expect("a voter starts");
    Voter {
        group: Arc::new(group),
        store,
    }
}

/// `len` bytes that do not repeat from one seed to the next (so nothing compresses them away):
/// entity state for the partition benchmarks.
pub fn filler(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}
