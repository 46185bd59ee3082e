//! Which node leads each partition's group, as the nodes report it
//! ([`CoordinatorCommand::PartitionPrimaries`](crate::link::CoordinatorCommand::PartitionPrimaries)),
//! and which nodes have gone quiet. With the partition plane serving, a partition's shards
//! follow its primary: the node that orders its writes serves its entities, with no hop to
//! another replica, and a primary elected by a view change (about half a second after its
//! predecessor died) takes the shards over as soon as it reports — long before the failure
//! detector would call the dead node unreachable.
//!
//! A report is believed for the highest epoch and view heard per partition (a moved
//! partition's new group starts again at view 0, in a later epoch): a deposed primary that
//! still thinks it leads (an older view, or a sealed epoch) changes nothing. The epoch heard
//! also says a move finished: a group reports only while it serves, so a partition's current
//! epoch heard of is one whose group opened. Nothing here is needed for safety — a node
//! serving from a stale copy cannot commit or answer a read (`docs/partitions.md`) — only for
//! how soon the right node serves.

use crate::link::PRIMARY_REPORT_SILENCE;
use std::collections::BTreeMap;
use tessera_contract::NodeId;
use tokio::time::Instant;

/// The primaries the coordinator has heard of, and when it last heard from each node.
#[derive(Debug)]
pub(super) struct Primaries {
    /// Per partition, its primary and the epoch and view it leads in: the highest reported.
    led: BTreeMap<u32, (NodeId, (u64, u64))>,
    /// When each node's last report came.
    heard: BTreeMap<NodeId, Instant>,
    /// When this coordinator started listening: a node never heard from is silent only once
    /// it has had the time to report.
    since: Instant,
}

impl Primaries {
    pub(super) fn new(now: Instant) -> Primaries {
        Primaries {
            led: BTreeMap::new(),
            heard: BTreeMap::new(),
            since: now,
        }
    }

    /// Takes `node`'s report of the partitions it leads (those `is_partition` denies are
    /// ignored); whether some partition's primary changed.
    pub(super) fn report(
        &mut self,
        node: &NodeId,
        led: &[(u32, u64, u64)],
        is_partition: impl Fn(u32) -> bool,
        now: Instant,
    ) -> bool {
        self.heard.insert(node.clone(), now);
        let mut changed = false;
        let partitions = led
            .iter()
            .filter(|(partition, ..)| is_partition(*partition));
        for (partition, epoch, view) in partitions {
            let term = (*epoch, *view);
            let known = self.led.get(partition);
            if known.is_none_or(|(_, known_term)| term > *known_term) {
                changed |= known.is_none_or(|(known_node, _)| known_node != node);
                self.led.insert(*partition, (node.clone(), term));
            }
        }
        changed
    }

    /// The latest epoch of `partition` whose group was heard serving.
    pub(super) fn serving_epoch(&self, partition: u32) -> Option<u64> {
        self.led.get(&partition).map(|(_, (epoch, _))| *epoch)
    }

    /// The node that leads `partition`'s group, as far as reports say.
    pub(super) fn of(&self, partition: u32) -> Option<&NodeId> {
        self.led.get(&partition).map(|(node, _)| node)
    }

    /// Whether `node` has not reported for [`PRIMARY_REPORT_SILENCE`] (counted from this
    /// coordinator's start for one never heard from).
    pub(super) fn is_silent(&self, node: &str, now: Instant) -> bool {
        let last = self.heard.get(node).copied().unwrap_or(self.since);
        now.duration_since(last) >= PRIMARY_REPORT_SILENCE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_highest_view_reported_names_the_primary() {
        let now = Instant::now();
        let mut primaries = Primaries::new(now);
        let in_four = |partition: u32| partition < 4;
        assert!(primaries.report(&"n1".into(), &[(0, 0, 3), (1, 0, 1)], in_four, now));
        assert_eq!(primaries.of(0).map(String::as_str), Some("n1"));
        // A later view elsewhere takes the partition over.
        assert!(primaries.report(&"n2".into(), &[(0, 0, 4)], in_four, now));
        assert_eq!(primaries.of(0).map(String::as_str), Some("n2"));
        // A deposed primary that still reports its old view changes nothing.
        assert!(!primaries.report(&"n1".into(), &[(0, 0, 3), (1, 0, 1)], in_four, now));
        assert_eq!(primaries.of(0).map(String::as_str), Some("n2"));
        // The same primary in a later view is no change of primary.
        assert!(!primaries.report(&"n2".into(), &[(0, 0, 6)], in_four, now));
        assert!(!primaries.report(&"n1".into(), &[(0, 0, 5)], in_four, now));
        assert_eq!(primaries.serving_epoch(0), Some(0));
        // A moved partition's new group, back at view 0 of a later epoch, takes it over; the
        // old epoch's primary, at any view, no longer does.
        assert!(primaries.report(&"n3".into(), &[(0, 1, 0)], in_four, now));
        assert_eq!(primaries.of(0).map(String::as_str), Some("n3"));
        assert!(!primaries.report(&"n2".into(), &[(0, 0, 9)], in_four, now));
        assert_eq!(primaries.serving_epoch(0), Some(1));
        // Partitions that are none of the coordinator's are not believed.
        assert!(!primaries.report(&"n3".into(), &[(9, 0, 1)], in_four, now));
        assert_eq!(primaries.of(9), None);
    }

    #[test]
    fn a_node_is_silent_once_it_has_not_reported_for_the_silence() {
        let start = Instant::now();
        let mut primaries = Primaries::new(start);
        assert!(
            !primaries.is_silent("n1", start),
            "a new coordinator waits for reports"
        );
        let later = start + PRIMARY_REPORT_SILENCE;
        assert!(
            primaries.is_silent("n1", later),
            "never heard, past the silence"
        );
        primaries.report(&"n1".into(), &[], |_| true, later);
        assert!(!primaries.is_silent("n1", later + Duration::from_millis(1)));
        assert!(primaries.is_silent("n1", later + PRIMARY_REPORT_SILENCE));
    }
}
