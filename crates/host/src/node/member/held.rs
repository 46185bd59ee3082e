//! Messages the mesh holds until this node's catalog can vouch for them (`authority.rs`,
//! `Verdict::Hold`): a peer may be a few commands ahead of this node — the coordinator answers
//! an allocation the moment it commits, before this node has applied it — and such a message
//! is neither acted on nor lost while this node catches up. Each peer's held messages stay in
//! the order it sent them, and a message arriving behind a held one waits behind it, so what
//! one peer sends a region keeps its order. A held message is asked about again whenever the
//! plane moves (a command applied, a new primary); one still unvouched after [`HOLD_FOR_MAX`]
//! is refused. At most [`HELD_PER_PEER_MAX`] messages per peer and [`HELD_MAX`] in all: past
//! either bound a new one is dropped and counted.

use super::authority::Verdict;
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tessera_contract::NodeId;
use tokio::time::Instant;

/// How long a message may wait for this node's catalog to vouch for it before it is refused.
/// A node trails the primary by a commit heartbeat or a follow round (tens of milliseconds);
/// one much further behind is catching up by state transfer, and the senders retry.
pub(crate) const HOLD_FOR_MAX: Duration = Duration::from_secs(2);

/// Messages held for one peer: its region messages keep flowing behind a held allocation for
/// a few heartbeats under load.
pub(crate) const HELD_PER_PEER_MAX: usize = 1024;

/// Messages held in all, as many as the transport's inbound queue holds by default.
pub(crate) const HELD_MAX: usize = tessera_cluster::INBOUND_QUEUE_MAX;

/// What became of a held message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Released<M> {
    /// The catalog vouches for it now: deliver it.
    Accepted(NodeId, M),
    /// The catalog says otherwise, or did not vouch for it in time: count it and drop it.
    Refused(NodeId, M),
}

/// The held messages, per peer, oldest first.
pub(crate) struct Held<M> {
    peers: HashMap<NodeId, VecDeque<(Instant, M)>>,
    count: usize,
}

impl<M> Default for Held<M> {
    fn default() -> Self {
        Held {
            peers: HashMap::new(),
            count: 0,
        }
    }
}

impl<M> Held<M> {
    /// Whether nothing is held.
    pub(crate) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Whether `peer` has messages held (a new one of it must wait behind them).
    pub(crate) fn holds_for(&self, peer: &str) -> bool {
        self.peers.contains_key(peer)
    }

    /// Holds `message` from `peer` behind its others, until `now + HOLD_FOR_MAX` at most.
    /// Gives it back when a bound is reached.
    pub(crate) fn hold(&mut self, peer: &str, message: M, now: Instant) -> Result<(), M> {
        let queued = self.peers.get(peer).map_or(0, VecDeque::len);
        if self.count >= HELD_MAX || queued >= HELD_PER_PEER_MAX {
            return Err(message);
        }
        self.peers
            .entry(peer.to_string())
            .or_default()
            .push_back((now + HOLD_FOR_MAX, message));
        self.count += 1;
        Ok(())
    }

    /// When the oldest held message runs out of time.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.peers
            .values()
            .filter_map(|queue| queue.front().map(|(deadline, _)| *deadline))
            .min()
    }

    /// Asks about each peer's held messages again, in order: what `judge` accepts or refuses
    /// leaves, and so does what ran out of time; a peer's queue stops at its first message
    /// still waiting.
    pub(crate) fn release(
        &mut self,
        now: Instant,
        mut judge: impl FnMut(&str, &M) -> Verdict,
    ) -> Vec<Released<M>> {
        let mut released = Vec::new();
        for (peer, queue) in &mut self.peers {
            while let Some((deadline, message)) = queue.front() {
                let verdict = match judge(peer, message) {
                    Verdict::Hold if now >= *deadline => Verdict::Refuse,
                    verdict => verdict,
                };
                if verdict == Verdict::Hold {
                    break;
                }
                let Some((_, message)) = queue.pop_front() else {
                    break;
                };
                released.push(match verdict {
                    Verdict::Accept => Released::Accepted(peer.clone(), message),
                    _ => Released::Refused(peer.clone(), message),
                });
            }
        }
        self.peers.retain(|_, queue| !queue.is_empty());
        self.count -= released.len();
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages are numbers; the catalog vouches for those up to `known`, refuses odd ones
    /// above 100, and holds the rest.
    fn judge_up_to(known: u32) -> impl FnMut(&str, &u32) -> Verdict {
        move |_, message| match *message {
            message if message > 100 && message % 2 == 1 => Verdict::Refuse,
            message if message <= known => Verdict::Accept,
            _ => Verdict::Hold,
        }
    }

    #[test]
    fn a_peers_messages_leave_in_the_order_it_sent_them() {
        let now = Instant::now();
        let mut held = Held::default();
        for message in [5, 2, 101, 3] {
            held.hold("n4", message, now).expect("room");
        }
        held.hold("n3", 1, now).expect("room");
        assert!(
            held.release(now, judge_up_to(4))
                .contains(&Released::Accepted("n3".into(), 1))
        );
        assert!(held.holds_for("n4") && !held.holds_for("n3"));
        let released = held.release(now, judge_up_to(5));
        assert_eq!(
            released,
            vec![
                Released::Accepted("n4".into(), 5),
                Released::Accepted("n4".into(), 2),
                Released::Refused("n4".into(), 101),
                Released::Accepted("n4".into(), 3),
            ]
        );
        assert!(held.is_empty());
        assert_eq!(held.next_deadline(), None);
    }

    #[test]
    fn what_the_catalog_never_vouches_for_is_refused_when_its_time_is_up() {
        let start = Instant::now();
        let mut held = Held::default();
        held.hold("rogue", 50, start).expect("room");
        held.hold("rogue", 3, start + Duration::from_millis(10))
            .expect("room");
        assert_eq!(held.next_deadline(), Some(start + HOLD_FOR_MAX));
        assert!(
            held.release(start + Duration::from_secs(1), judge_up_to(4))
                .is_empty()
        );
        let released = held.release(start + HOLD_FOR_MAX, judge_up_to(4));
        assert_eq!(
            released,
            vec![
                Released::Refused("rogue".into(), 50),
                Released::Accepted("rogue".into(), 3),
            ]
        );
        assert!(held.is_empty());
    }

    #[test]
    fn a_peer_holds_at_most_its_bound() {
        let now = Instant::now();
        let mut held = Held::default();
        for message in 0..HELD_PER_PEER_MAX as u32 {
            held.hold("rogue", 1000 + 2 * message, now).expect("room");
        }
        assert_eq!(held.hold("rogue", 7, now), Err(7));
        held.hold("n4", 7, now).expect("another peer has room");
    }
}
