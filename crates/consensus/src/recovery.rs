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
use super::message::{LogSuffix, Message, OpNumber, ReplicaIndex, Status, ViewNumber};
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
        };
        self.send(replica, message);
    }

    pub(super) fn on_recovery_response(
        &mut self,
        view: ViewNumber,
        replica: ReplicaIndex,
        nonce: u64,
        status: Status,
        log: Option<LogSuffix>,
        commit: OpNumber,
    ) {
        let well_formed =
            self.is_peer(replica) && log.as_ref().is_none_or(|log| self.is_valid_suffix(log));
        let Some(recovery) = self.recovery.as_mut() else {
            return self.ignore();
        };
        if !well_formed || recovery.nonce != nonce {
            return self.ignore();
        }
        recovery.answers[usize::from(replica)] = Some(Answer {
            view,
            status,
            log,
            commit,
        });
        self.conclude_recovery();
    }

    pub(super) fn conclude_recovery(&mut self) {
        let Some(recovery) = self.recovery.as_ref() else {
            return;
        };
        let answers: Vec<&Answer> = recovery.answers.iter().flatten().collect();
        if answers.len() + 1 < self.config.quorum() {
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
        let primary_answer = recovery.answers[usize::from(primary)]
            .as_ref()
            .filter(|answer| answer.view == view_max && answer.status == Status::Normal)
            .and_then(|answer| answer.log.clone().map(|log| (log, answer.commit)));
        if primary != self.config.replica {
            if let Some((log, commit)) = primary_answer {
                // A stale answer (older than a checkpoint installed since) waits for the next
                // round of recovery requests, which brings a current one.
                let Join::At(common) = self.join(&log, primary) else {
                    return;
                };
                self.recovery = None;
                self.view = view_max;
                return self.start_view_as_backup(log, common, commit);
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
}
