//! The checks, run after every event. Single activation: for every shard, evaluate the serving
//! rule of every node at the current real time; two at once is a violation. (Between events a
//! node can only stop serving — a lease runs out — never start, so checking at every event
//! checks every instant.) Exactly-once within a lineage: every acknowledgement of a message
//! newly applied is recorded with the lineage of the state it was applied to; the same id
//! applied twice within one lineage is a violation. Applying it again in a newer lineage is
//! allowed — and counted — because a new lineage starts only after the old state was declared
//! lost by an operator, and a lost state's acknowledgement may never have reached the client.

use std::collections::BTreeMap;

use super::node::{AppliedAck, Node};
use super::options::ViolationKind;

/// The acknowledgements of a run.
#[derive(Debug, Default)]
pub struct AckLedger {
    /// `(id, lineage) -> (member, real time)` of the first application.
    first_applied: BTreeMap<(u64, u64), (String, u64)>,
    /// Ids applied in some lineage, to count re-applications after a loss.
    ids_applied: BTreeMap<u64, u64>,
    /// Re-applications of an id in a newer lineage.
    pub reapplied_after_loss: u64,
}

impl AckLedger {
    /// Records `ack`, produced at `real_ms`; a violation if its id was applied in its lineage.
    pub fn record(&mut self, ack: &AppliedAck, real_ms: u64) -> Result<(), ViolationKind> {
        let key = (ack.id, ack.lineage);
        if let Some((first, first_at_ms)) = self.first_applied.get(&key) {
            return Err(ViolationKind::AppliedTwice {
                id: ack.id,
                shard: ack.shard,
                lineage: ack.lineage,
                first: first.clone(),
                second: ack.member.to_string(),
                first_at_ms: *first_at_ms,
            });
        }
        self.first_applied
            .insert(key, (ack.member.to_string(), real_ms));
        let applications = self.ids_applied.entry(ack.id).or_insert(0);
        if *applications > 0 {
            self.reapplied_after_loss += 1;
        }
        *applications += 1;
        Ok(())
    }
}

/// At most one node serves each shard at `real_ms`; `served` notes which shards are served.
pub fn check_single_serving(
    nodes: &[Node],
    shards: usize,
    real_ms: u64,
    served: &mut [bool],
) -> Result<(), ViolationKind> {
    for shard in 0..shards {
        let mut servers = nodes.iter().filter(|node| node.serves(shard, real_ms));
        let Some(first) = servers.next() else {
            continue;
        };
        if let Some(slot) = served.get_mut(shard) {
            *slot = true;
        }
        if let Some(second) = servers.next() {
            let members = vec![first.member().to_string(), second.member().to_string()];
            return Err(ViolationKind::TwoServers { shard, members });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::table::MemberId;

    #[test]
    fn the_same_id_twice_in_one_lineage_is_caught_but_not_across_lineages() {
        let mut ledger = AckLedger::default();
        let member = MemberId {
            machine: 0,
            incarnation: 1,
        };
        let ack = AppliedAck {
            id: 7,
            shard: 1,
            lineage: 3,
            member,
        };
        assert!(ledger.record(&ack, 10).is_ok());
        assert!(ledger.record(&AppliedAck { lineage: 4, ..ack }, 20).is_ok());
        assert_eq!(ledger.reapplied_after_loss, 1);
        assert!(matches!(
            ledger.record(&ack, 30),
            Err(ViolationKind::AppliedTwice { id: 7, .. })
        ));
    }
}
