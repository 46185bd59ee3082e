//! View changes: how the replicas replace a primary they no longer hear from.
//!
//! A replica that times out moves to view `v + 1` and sends start-view-change to all. Once a
//! quorum (itself included) has asked for `v + 1`, each sends do-view-change with its log and
//! `log_view` (the last view it was normal in) to the new primary. With a quorum of those,
//! its own among them, the new primary keeps the log with the highest `(log_view, op)`, which
//! holds every committed op, and sends start-view with it. A replica that sees a newer view
//! than its own asks that view's primary for the start-view (`RequestStartView`), which is also
//! how a replica cut off during a view change catches up.

use super::journal::Journal;
use super::message::{LogSuffix, Message, OpNumber, ReplicaIndex, Status, ViewNumber};
use super::progress::DoViewChangeVote;
use super::replica::{Action, Replica, Retransmit};
use super::replica_log::Join;
use super::state_machine::StateMachine;

impl<J: Journal, S: StateMachine> Replica<J, S> {
    pub(super) fn become_primary_of_own_view(&mut self) {
        assert!(
            self.is_primary(),
            "only the view's primary takes the primary role"
        );
        self.status = Status::Normal;
        self.log_view = self.view;
        self.acks.iter_mut().for_each(|ack| *ack = 0);
        self.acks[usize::from(self.config.replica)] = self.op();
        self.retransmits.fill(Retransmit::default());
        self.peer_heard_tick
            .iter_mut()
            .for_each(|tick| *tick = self.now_ticks);
        self.abdicating = false;
        self.heartbeat_tick = self.now_ticks;
        self.resend_tick = self.now_ticks;
        self.forgetful = false;
        self.durable_dirty = true;
        self.try_commit();
    }

    pub(super) fn become_backup(&mut self, commit: OpNumber) {
        assert!(
            !self.is_primary(),
            "a backup is not the primary of its view"
        );
        self.status = Status::Normal;
        self.log_view = self.view;
        self.request_queue.clear();
        self.primary_heard_tick = self.now_ticks;
        self.forgetful = false;
        self.repair_target = self.op();
        self.durable_dirty = true;
        let primary = self.primary_of(self.view);
        let (view, op, replica) = (self.view, self.op(), self.config.replica);
        self.send(primary, Message::PrepareOk { view, op, replica });
        self.advance_commit(commit);
    }

    /// A leadership transfer: a backup in normal status that has applied everything it knows
    /// committed asks the group to move to the next view it is the primary of. This is the
    /// view change protocol started early (as a primary's silence would start it), so it is as
    /// safe in any state; the new view's log is the best of a quorum's, whatever this
    /// replica's. Anything else (a primary, a replica changing views, recovering or fetching
    /// a checkpoint) does nothing.
    ///
    /// ```
    /// use tessera_consensus::config::Config;
    /// use tessera_consensus::journal::InMemoryJournal;
    /// use tessera_consensus::replica::Replica;
    /// use tessera_consensus::state_machine::KeyValue;
    /// let mut replica =
    ///     Replica::format(Config::new(3, 0), InMemoryJournal::new(), KeyValue::default())?;
    /// // Replica 0 is view 0's primary already: nothing to take.
    /// assert!(replica.take_primary().is_empty());
    /// # Ok::<(), tessera_consensus::replica::ReplicaError>(())
    /// ```
    pub fn take_primary(&mut self) -> Vec<Action> {
        let caught_up = self.applied >= self.commit && self.op() >= self.commit;
        if self.status != Status::Normal || self.is_primary() || self.fetching_state() || !caught_up
        {
            return Vec::new();
        }
        let mut view = self.view + 1;
        while self.primary_of(view) != self.config.replica {
            view += 1;
        }
        self.start_view_change(view);
        self.flush()
    }

    /// Gives up on the current view and asks everyone to move to `view`.
    pub(super) fn start_view_change(&mut self, view: ViewNumber) {
        assert!(
            view > self.view,
            "a view change always moves to a newer view"
        );
        self.enter_view_change(view);
    }

    /// Enters view-change status for `view` (also from recovery, possibly at the current view).
    pub(super) fn enter_view_change(&mut self, view: ViewNumber) {
        assert!(view >= self.view, "the view never goes backwards");
        assert!(
            view > self.log_view,
            "a view change targets a view newer than the log's"
        );
        self.view = view;
        self.status = Status::ViewChange;
        self.recovery = None;
        self.clear_primary_state();
        self.view_change.reset(self.now_ticks);
        self.resend_tick = self.now_ticks;
        self.durable_dirty = true;
        self.counters.view_changes_started += 1;
        self.view_change.start_view_change_votes[usize::from(self.config.replica)] = true;
        let replica = self.config.replica;
        self.broadcast(&Message::StartViewChange { view, replica });
        self.check_start_view_change_quorum();
    }

    pub(super) fn on_start_view_change(&mut self, view: ViewNumber, replica: ReplicaIndex) {
        if !self.is_peer(replica) || self.status == Status::Recovering || view < self.view {
            return self.ignore();
        }
        if view == self.view && self.status == Status::Normal {
            if self.is_primary() {
                self.send_start_view(replica);
            }
            return;
        }
        if view > self.view {
            self.enter_view_change(view);
        }
        self.view_change.start_view_change_votes[usize::from(replica)] = true;
        self.check_start_view_change_quorum();
    }

    fn check_start_view_change_quorum(&mut self) {
        let votes = self
            .view_change
            .start_view_change_votes
            .iter()
            .filter(|vote| **vote)
            .count();
        if self.status != Status::ViewChange
            || self.view_change.do_view_change_sent
            || votes < self.config.quorum()
        {
            return;
        }
        self.view_change.do_view_change_sent = true;
        self.send_do_view_change();
    }

    fn send_do_view_change(&mut self) {
        let primary = self.primary_of(self.view);
        if primary == self.config.replica {
            let vote = DoViewChangeVote {
                replica: primary,
                log_view: self.log_view,
                log: self.log.suffix(),
                commit: self.commit.min(self.op()),
                forgetful: self.forgetful,
            };
            self.view_change.do_view_change_votes[usize::from(primary)] = Some(vote);
            return self.check_do_view_change_quorum();
        }
        let message = Message::DoViewChange {
            view: self.view,
            replica: self.config.replica,
            log_view: self.log_view,
            log: self.log.suffix(),
            commit: self.commit.min(self.op()),
            forgetful: self.forgetful,
        };
        self.send(primary, message);
    }

    pub(super) fn on_do_view_change(&mut self, view: ViewNumber, vote: DoViewChangeVote) {
        let replica = vote.replica;
        let well_formed =
            self.is_peer(replica) && vote.log_view < view && self.is_valid_suffix(&vote.log);
        if !well_formed
            || self.status == Status::Recovering
            || view < self.view
            || self.primary_of(view) != self.config.replica
        {
            return self.ignore();
        }
        if view > self.view {
            self.enter_view_change(view);
        }
        if self.status == Status::Normal {
            return self.send_start_view(replica);
        }
        let commit = vote.commit.min(vote.log.op());
        let index = usize::from(replica);
        self.view_change.start_view_change_votes[index] = true;
        self.view_change.do_view_change_votes[index] = Some(DoViewChangeVote { commit, ..vote });
        self.check_start_view_change_quorum();
        self.check_do_view_change_quorum();
    }

    pub(super) fn check_do_view_change_quorum(&mut self) {
        let votes = &self.view_change.do_view_change_votes;
        let own_vote = votes[usize::from(self.config.replica)].is_some();
        let count = votes.iter().flatten().count();
        // A forgetful vote (a replica that lost its disk, or cannot tell) may hide ops it
        // acknowledged: a quorum of the others must vote, or every replica — then, with at
        // most f disks lost, each committed op is in some remembering replica's log.
        let remembering = votes
            .iter()
            .flatten()
            .filter(|vote| !vote.forgetful)
            .count();
        let everyone = count == usize::from(self.config.replica_count);
        if self.status != Status::ViewChange
            || !own_vote
            || (remembering < self.config.quorum() && !everyone)
        {
            return;
        }
        let best = votes
            .iter()
            .flatten()
            .max_by_key(|vote| {
                (
                    !vote.forgetful || remembering == 0,
                    vote.log_view,
                    vote.log.op(),
                )
            })
            .map(|vote| (vote.replica, vote.log.clone()));
        let commit_max = votes
            .iter()
            .flatten()
            .map(|vote| vote.commit)
            .max()
            .unwrap_or(0);
        let Some((source, log)) = best else { return };
        // A stale best log means these votes predate a checkpoint installed since (from a
        // later view): this view change cannot complete; a newer view will be learned.
        let Join::At(common) = self.join(&log, source) else {
            return;
        };
        self.install_suffix(log, common);
        self.commit = self.commit.max(commit_max.min(self.op()));
        assert!(
            self.commit <= self.op(),
            "every op known committed survives a view change"
        );
        self.become_primary_of_own_view();
        let message = Message::StartView {
            view: self.view,
            log: self.log.suffix(),
            commit: self.commit,
        };
        self.broadcast(&message);
        self.apply_committed();
    }

    fn send_start_view(&mut self, to: ReplicaIndex) {
        let message = Message::StartView {
            view: self.view,
            log: self.log.suffix(),
            commit: self.commit,
        };
        self.send(to, message);
    }

    pub(super) fn on_start_view(&mut self, view: ViewNumber, log: LogSuffix, commit: OpNumber) {
        let current = view < self.view || (view == self.view && self.status == Status::Normal);
        if current
            || !self.is_valid_suffix(&log)
            || self.status == Status::Recovering
            || self.primary_of(view) == self.config.replica
        {
            return self.ignore();
        }
        let common = match self.join(&log, self.primary_of(view)) {
            Join::At(common) => common,
            Join::Pending => return,
            // Sent before ops this replica has since installed by state transfer were prepared
            // in that view: ask for the view's current log instead.
            Join::Stale => return self.request_start_view(view),
        };
        self.view = view;
        self.view_change.reset(self.now_ticks);
        self.start_view_as_backup(log, common, commit);
    }

    /// Whether a log suffix from a peer is chained and within the log bound.
    pub(super) fn is_valid_suffix(&self, log: &LogSuffix) -> bool {
        log.entries.len() as u64 <= self.config.log_entries_max() && log.is_chained()
    }

    /// Installs the log of the current view as a backup (after start-view or recovery), joining
    /// it to the local log at `common`.
    pub(super) fn start_view_as_backup(
        &mut self,
        log: LogSuffix,
        common: OpNumber,
        commit: OpNumber,
    ) {
        self.install_suffix(log, common);
        assert!(
            self.commit <= self.op(),
            "every op known committed is in the view's log"
        );
        self.become_backup(commit.min(self.op()));
    }

    pub(super) fn on_request_start_view(&mut self, view: ViewNumber, replica: ReplicaIndex) {
        if !self.is_peer(replica)
            || self.status != Status::Normal
            || !self.is_primary()
            || view != self.view
        {
            return self.ignore();
        }
        self.send_start_view(replica);
    }

    /// Asks the primary of `view` for its start-view, at most once per resend interval.
    pub(super) fn request_start_view(&mut self, view: ViewNumber) {
        let primary = self.primary_of(view);
        if primary == self.config.replica
            || self.now_ticks < self.view_change.request_start_view_allowed_tick
        {
            return;
        }
        self.view_change.request_start_view_allowed_tick =
            self.now_ticks + self.config.timeouts.resend_interval_ticks;
        let replica = self.config.replica;
        self.send(primary, Message::RequestStartView { view, replica });
    }

    pub(super) fn tick_view_change(&mut self) {
        let timeouts = self.config.timeouts;
        let elapsed = self.now_ticks - self.view_change.started_tick;
        let timeout = self.timeout_with_jitter(timeouts.view_change_timeout_ticks);
        // While fetching state the replica holds its view change open rather than pushing
        // everyone into the next view (see `tick_backup`).
        if elapsed >= timeout && !self.fetching_state() {
            return self.start_view_change(self.view + 1);
        }
        if self.now_ticks < self.resend_tick + timeouts.resend_interval_ticks {
            return;
        }
        self.resend_tick = self.now_ticks;
        let (view, replica) = (self.view, self.config.replica);
        self.broadcast(&Message::StartViewChange { view, replica });
        if self.view_change.do_view_change_sent && self.primary_of(view) != replica {
            self.send_do_view_change();
        }
    }
}
