//! Recovery: how a replica restarted from its journal rejoins without voting on stale
//! knowledge.
//!
//! The journal holds everything the replica ever acknowledged, so its log is trustworthy; what
//! it may have missed is the views that moved on while it was down. It therefore comes back
//! in recovering status, sends a fresh nonce to every peer, and votes in nothing (no
//! prepare-ok, start-view-change or do-view-change) until a quorum (itself included) has
//! answered. Then it either installs the log of the primary of the newest view reported, or,
//! if that view has no normal primary it can hear from (or it was that primary itself and lost
//! its in-flight state), joins a view change with its durable log.

use super::journal::Journal;
use super::message::{Message, ReplicaIndex, Status, ViewNumber};
use super::progress::Answer;
use super::replica::Replica;
use super::replica_log::Join;
use super::state_machine::StateMachine;

impl<J: Journal, S: StateMachine> Replica<J, S> {
    /// Sends (and periodically resends) the recovery request; each round starts a fresh tally,
    /// so answers from before a view change do not linger.
    pub(super) fn tick_recovering(&mut self) {
        let resend_interval_ticks = self.config.timeouts.resend_interval_ticks;
        let now_ticks = self.now_ticks;
        let (replica, nonce) = {
            let Some(recovery) = self.recovery.as_mut() else {
                return;
            };
            if recovery
                .sent_tick
                .is_some_and(|sent| now_ticks < sent + resend_interval_ticks)
            {
                return;
            }
            recovery.sent_tick = Some(now_ticks);
            recovery
                .answers
                .iter_mut()
                .for_each(|answer| *answer = None);
            (self.config.replica, recovery.nonce)
        };
        self.broadcast(&Message::Recovery { replica, nonce });
    }

    pub(super) fn on_recovery(&mut self, replica: ReplicaIndex, nonce: u64) {
        if !self.is_peer(replica) {
            return self.ignore();
        }
        let log = (self.status == Status::Normal && self.is_primary()).then(|| self.log.suffix());
        let message = Message::RecoveryResponse {
            view: self.view,
            replica: self.config.replica,
            nonce,
            status: self.status,
            log,
            commit: self.commit.min(self.op()),
            empty: self.holds_no_promise(),
        };
        self.send(replica, message);
    }

    pub(super) fn on_recovery_response(
        &mut self,
        replica: ReplicaIndex,
        nonce: u64,
        answer: Answer,
    ) {
        let well_formed = self.is_peer(replica)
            && answer
                .log
                .as_ref()
                .is_none_or(|log| self.is_valid_suffix(log));
        let Some(recovery) = self.recovery.as_mut() else {
            return self.ignore();
        };
        if !well_formed || recovery.nonce != nonce {
            return self.ignore();
        }
        recovery.answers[usize::from(replica)] = Some(answer);
        self.conclude_recovery();
    }

    pub(super) fn conclude_recovery(&mut self) {
        if self.forgetful {
            return self.conclude_empty_recovery();
        }
        let Some(recovery) = self.recovery.as_ref() else {
            return;
        };
        // Only answers that name every view their sender voted in say which view is the newest:
        // a peer recovering on an empty disk may have forgotten the ones it was in.
        let answered = recovery.answers.iter().flatten().count();
        let heard_everyone = answered + 1 == usize::from(self.config.replica_count);
        let answers: Vec<&Answer> = recovery
            .answers
            .iter()
            .flatten()
            .filter(|answer| answer.knows_its_views())
            .collect();
        // A quorum with itself; or every peer: with at most f disks lost, every quorum that
        // started a view holds a replica that remembers it.
        if answers.len() + 1 < self.config.quorum() && !heard_everyone {
            return;
        }
        let view_max = answers
            .iter()
            .map(|answer| answer.view)
            .max()
            .unwrap_or(0)
            .max(self.view);
        let primary = self.primary_of(view_max);
        let normal_in_view_max = answers
            .iter()
            .any(|answer| answer.view == view_max && answer.status == Status::Normal);
        if primary != self.config.replica {
            if self.join_primary_of(view_max) {
                return;
            }
            if normal_in_view_max {
                return;
            }
        }
        let lost_primary_state = primary == self.config.replica && normal_in_view_max;
        if self.log_view == view_max || lost_primary_state {
            self.enter_view_change(view_max + 1);
        } else {
            self.enter_view_change(view_max);
        }
    }

    /// Recovery of a forgetful replica (see [`Replica::start_empty`]): it may have lost its
    /// disk, so it counts only peers that remember their views, and its own vote is marked.
    /// If every peer answered that it holds nothing either, the group has never promised
    /// anything and it starts in view 0. Otherwise it needs answers from enough peers that
    /// every quorum includes one of them (or from every peer, with at most f disks lost) —
    /// then the newest view they name is at least the newest view any quorum started — and
    /// installs that view's log from its primary. When that view has no normal primary to
    /// learn from, and it heard every peer, it joins the next view change as a forgetful voter.
    fn conclude_empty_recovery(&mut self) {
        let Some(recovery) = self.recovery.as_ref() else {
            return;
        };
        let peers = usize::from(self.config.replica_count) - 1;
        let answered: Vec<&Answer> = recovery.answers.iter().flatten().collect();
        let all_empty = answered.len() == peers && answered.iter().all(|answer| answer.empty);
        if all_empty && self.holds_no_promise() {
            self.recovery = None;
            self.forgetful = false;
            self.durable_dirty = true;
            if self.is_primary() {
                return self.become_primary_of_own_view();
            }
            self.status = Status::Normal;
            self.primary_heard_tick = self.now_ticks;
            return;
        }
        let answered_count = answered.len();
        let knowing: Vec<&Answer> = answered
            .into_iter()
            .filter(|answer| answer.knows_its_views())
            .collect();
        // Enough peers that every quorum includes one of them; or every peer, one of which
        // knows its views: with at most f replicas that lost their disk, every quorum that
        // started a view holds one that remembers it.
        let every_quorum_met = usize::from(self.config.replica_count) - self.config.quorum() + 1;
        // A forgetful replica that restarted remembers the views it voted in since its loss.
        let knows_a_view = !knowing.is_empty() || !self.holds_no_promise();
        let heard_everyone = answered_count == peers && knows_a_view;
        if knowing.len() < every_quorum_met && !heard_everyone {
            return;
        }
        // Its own durable view counts too: a forgetful replica that restarted remembers the
        // views it voted in since it lost its disk.
        let view_max = knowing
            .iter()
            .map(|answer| answer.view)
            .max()
            .unwrap_or(0)
            .max(self.view);
        let primary_normal = knowing.iter().any(|answer| {
            answer.view == view_max && answer.status == Status::Normal && answer.log.is_some()
        });
        if self.primary_of(view_max) != self.config.replica && self.join_primary_of(view_max) {
            return;
        }
        // No primary of the newest view to learn from (it is changing, or it was this replica
        // and lost that view's state): take part in the next view change as a forgetful voter,
        // whose vote counts only when every replica votes (`check_do_view_change_quorum`).
        if heard_everyone && !primary_normal {
            self.enter_view_change(view_max + 1);
        }
    }

    /// Joins `view` as a backup with the log its normal primary answered, if it did; a stale
    /// answer (older than a checkpoint installed since) waits for the next round of recovery
    /// requests, which brings a current one.
    fn join_primary_of(&mut self, view: ViewNumber) -> bool {
        let primary = self.primary_of(view);
        let Some((log, commit)) = self.recovery.as_ref().and_then(|recovery| {
            recovery.answers[usize::from(primary)]
                .as_ref()
                .filter(|answer| answer.view == view && answer.status == Status::Normal)
                .and_then(|answer| answer.log.clone().map(|log| (log, answer.commit)))
        }) else {
            return false;
        };
        let Join::At(common) = self.join(&log, primary) else {
            // Returning true: the state transfer `join` asked for, or the next round, goes on.
            return true;
        };
        self.recovery = None;
        self.view = view;
        self.start_view_as_backup(log, common, commit);
        true
    }
}
