//! The incarnations of removed peers a transport refuses. When the application removes a peer
//! for good (`Transport::quarantine_peer`: its cluster removed the member), the incarnation this
//! transport last spoke with is remembered here and refused at every later handshake, in both
//! directions, with `RefusalReason::Removed`. A restarted process of the same node is a new
//! incarnation and is not refused: it may join again as a new member. At most
//! [`QUARANTINED_PEERS_MAX`] are remembered, the oldest forgotten first.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use tessera_contract::NodeId;

/// How long a quarantined peer's connection stays open after its removal, so that what was
/// queued for it before — the answer to the command that removed it, say — is still written.
/// Nothing new is queued for it meanwhile, and it is refused if it dials again.
pub const REMOVED_PEER_LINGER: Duration = Duration::from_secs(1);

/// Removed incarnations remembered. Bounded so a cluster that removes members for years does
/// not grow this table; a process forgotten here is still no member, so what it sends is
/// refused above the transport.
pub const QUARANTINED_PEERS_MAX: usize = 1024;

/// The refused incarnations, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Quarantine {
    refused: HashSet<(NodeId, u64)>,
    order: VecDeque<(NodeId, u64)>,
}

impl Quarantine {
    /// Refuses `incarnation` of `node_id` from now on.
    pub fn refuse(&mut self, node_id: &str, incarnation: u64) {
        let entry = (node_id.to_owned(), incarnation);
        if !self.refused.insert(entry.clone()) {
            return;
        }
        self.order.push_back(entry);
        if self.order.len() > QUARANTINED_PEERS_MAX
            && let Some(oldest) = self.order.pop_front()
        {
            self.refused.remove(&oldest);
        }
    }

    /// Whether `incarnation` of `node_id` is refused.
    pub fn refuses(&self, node_id: &str, incarnation: u64) -> bool {
        self.refused.contains(&(node_id.to_owned(), incarnation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_removed_incarnation_is_refused() {
        let mut quarantine = Quarantine::default();
        quarantine.refuse("node-1", 7);
        assert!(quarantine.refuses("node-1", 7));
        assert!(!quarantine.refuses("node-1", 8), "a restarted process");
        assert!(!quarantine.refuses("node-2", 7));
    }

    #[test]
    fn the_oldest_is_forgotten_past_the_bound() {
        let mut quarantine = Quarantine::default();
        for incarnation in 1..=QUARANTINED_PEERS_MAX as u64 + 1 {
            quarantine.refuse("node-1", incarnation);
        }
        quarantine.refuse("node-1", 2); // already refused: no second entry
        assert!(!quarantine.refuses("node-1", 1));
        assert!(quarantine.refuses("node-1", 2));
        assert!(quarantine.refuses("node-1", QUARANTINED_PEERS_MAX as u64 + 1));
        assert_eq!(quarantine.order.len(), QUARANTINED_PEERS_MAX);
    }
}
