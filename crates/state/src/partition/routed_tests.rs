//! The routed state: an entity's reads and commits go to its partition's replica or to the
//! local store, never both; an entity of a partition without a replica here is refused; the
//! node-wide scans merge every store in one order.

use super::*;
use crate::messaging::{OutboxEntry, Reminder};
use crate::{CommitError, EntityState, GroupCommitConfig, LocalState, WriteSet, WriteStamps};
use std::sync::Arc;
use tessera_consensus::group::{
    GROUP_INBOUND_MAX, Group, GroupConfig, GroupFrame, GroupId, GroupObserver, GroupOutbox,
    ObserverFuture,
};
use tessera_contract::EntityAddress;

struct Nowhere;

impl GroupOutbox for Nowhere {
    fn send(&self, _: &str, _: GroupFrame) {}
}

struct Unobserved;

impl GroupObserver<PartitionApplied> for Unobserved {
    fn applied<'a>(&'a self, _: &'a PartitionApplied) -> ObserverFuture<'a> {
        Box::pin(async {})
    }
}

/// A partition of one replica (a group of one voter commits alone), served here.
fn partition(dir: &std::path::Path, partition: u32) -> Arc<PartitionState> {
    let (sender, inbound) = tokio::sync::mpsc::channel(GROUP_INBOUND_MAX);
    // No peer ever sends to a group of one; its inbound stays open for the test's length.
    std::mem::forget(sender);
    let machine = PartitionMachine::open(&dir.join(format!("p{partition}.redb")))
        .expect("the partition database opens");
    let store = machine.store().clone();
    let config = GroupConfig::new(
        GroupId(u64::from(partition) + 1),
        vec!["n1".into()],
        "n1".into(),
    );
    let group = Group::start_voter(
        config,
        &dir.join(format!("p{partition}.journal")),
        PartitionReplica::new(machine),
        Arc::new(Unobserved),
        Arc::new(Nowhere),
        inbound,
    )
    .expect("a voter starts");
    Arc::new(PartitionState::new(store, Arc::new(group)))
}

/// Counters live in partition 0, relays in partition 1, everything else locally.
fn routed(dir: &std::path::Path) -> RoutedState {
    let store = crate::StateStore::open(&dir.join("tessera.redb")).expect("the store opens");
    let local = Arc::new(LocalState::new(store, GroupCommitConfig::default()));
    RoutedState::new(
        local,
        Arc::new(|entity: &EntityAddress| match entity.entity_type.as_str() {
            "counter" => Some(0),
            "relay" => Some(1),
            _ => None,
        }),
    )
}

/// A write of `entity` with one tell to `to` and one reminder due at `due_ms`.
fn tell_and_remind(entity: &EntityAddress, to: &EntityAddress, due_ms: u64) -> WriteSet {
    let mut writes = WriteSet::new(entity.clone());
    writes.put("value", vec![1]);
    let messaging = writes.messaging_mut();
    messaging.outbox.push(OutboxEntry {
        seq: 1,
        to: to.clone(),
        payload: b"tell".to_vec(),
    });
    messaging.reminders.push(Reminder {
        timer: 1,
        due_ms,
        payload: b"later".to_vec(),
    });
    messaging.counters = Some((2, 1));
    writes.set_stamps(WriteStamps {
        read: 0,
        written: 7,
    });
    writes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_live_where_their_partition_says_and_nowhere_else() {
    let dir = tempfile::tempdir().expect("temp dir");
    let routed = routed(dir.path());
    let counter = EntityAddress::new("t", "counter", "c1");
    let relay = EntityAddress::new("t", "relay", "r1");
    let echo = EntityAddress::new("t", "echo", "e1");
    // No replica of partition 0 yet: refused, and nothing lands in the local store.
    assert!(routed.get(&counter, "value").is_err());
    assert!(matches!(
        routed.commit(tell_and_remind(&counter, &echo, 30)).await,
        Err(CommitError::Unavailable(_))
    ));
    let zero = partition(dir.path(), 0);
    routed.hold(0, zero.clone());
    routed.hold(1, partition(dir.path(), 1));
    assert_eq!(routed.held(), vec![0, 1]);

    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while routed
        .commit(tell_and_remind(&counter, &echo, 30))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the one voter never committed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    routed
        .commit(tell_and_remind(&relay, &echo, 10))
        .await
        .expect("the relay's write commits");
    routed
        .commit(tell_and_remind(&echo, &counter, 20))
        .await
        .expect("the echo's write commits locally");
    assert_eq!(routed.get(&counter, "value"), Ok(Some(vec![1])));
    assert_eq!(zero.get(&counter, "value"), Ok(Some(vec![1])));
    assert_eq!(routed.meta(&counter).map(|meta| meta.stamp), Ok(7));
    // The local store's entities are unstamped, and read-ordered only in partitions.
    assert_eq!(routed.meta(&echo).map(|meta| meta.stamp), Ok(0));
    assert!(routed.orders_reads(&counter) && !routed.orders_reads(&echo));

    // The scans see all three stores, in one order.
    assert_eq!(
        routed.outbox_senders(None, 10),
        Ok(vec![counter.clone(), echo.clone(), relay.clone()])
    );
    assert_eq!(
        routed.outbox_senders(Some(&counter), 1),
        Ok(vec![echo.clone()])
    );
    let due: Vec<(u64, EntityAddress)> = routed
        .due_reminders(100, None, 10)
        .expect("due reminders")
        .into_iter()
        .map(|reminder| (reminder.due_ms, reminder.entity))
        .collect();
    assert_eq!(
        due,
        vec![
            (10, relay.clone()),
            (20, echo.clone()),
            (30, counter.clone())
        ]
    );
    assert_eq!(routed.next_due(), Ok(Some(10)));
    assert_eq!(routed.pending_messages(), Ok((3, 3)));

    // A partition placed away: its entities are refused again.
    routed.release(0);
    assert!(routed.get(&counter, "value").is_err());
    assert_eq!(routed.outbox_senders(None, 10), Ok(vec![echo, relay]));
}
