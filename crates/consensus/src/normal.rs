//! Normal operation of a replica: client requests, the prepare pipeline (with batching),
//! prepare-ok counting and commit, heartbeats, retransmission of unacknowledged prepares,
//! repair of a backup's missing prepares, and the primary's abdication when it can no longer
//! hear a quorum.

use super::client_table::Lookup;
use super::config::{
    BATCH_BYTES_MAX, PIPELINE_PREPARE_QUEUE_MAX, REPAIR_BYTES_MAX, REPAIR_PREPARES_MAX,
    REQUEST_QUEUE_MAX,
};
use super::journal::Journal;
use super::message::{
    Entry, Message, OpNumber, ReplicaIndex, Reply, ReplyError, Request, Status, ViewNumber,
};
use super::replica::{Action, Replica};
use super::state_machine::StateMachine;

impl<J: Journal, S: StateMachine> Replica<J, S> {
    pub(super) fn on_request(&mut self, request: Request) {
        if self.status != Status::Normal || !self.is_primary() {
            return self.drop_request();
        }
        let result = match self.clients.lookup(request.client, request.request_number) {
            Lookup::Stale => return self.drop_request(),
            Lookup::Latest(result) => Ok(result.to_vec()),
            Lookup::Evicted if self.clients.was_evicted(request.client) => {
                Err(ReplyError::SessionEvicted)
            }
            // Decided when the op applies, once the table holds every op before it.
            Lookup::Evicted | Lookup::New => return self.queue_request(request),
        };
        let reply = Reply {
            client: request.client,
            request_number: request.request_number,
            view: self.view,
            result,
        };
        self.outbox.push(Action::Reply(reply));
    }

    fn queue_request(&mut self, request: Request) {
        if self.is_in_flight(&request) || self.request_queue.len() >= REQUEST_QUEUE_MAX {
            return self.drop_request();
        }
        self.request_queue.push_back(request);
        self.prepare_from_queue();
    }

    fn is_in_flight(&self, request: &Request) -> bool {
        let same = |queued: &Request| {
            queued.client == request.client && queued.request_number == request.request_number
        };
        self.request_queue.iter().any(same)
            || self
                .log
                .entries()
                .iter()
                .filter(|entry| entry.op > self.commit)
                .any(|entry| entry.requests.iter().any(same))
    }

    fn prepare_from_queue(&mut self) {
        while !self.abdicating
            && !self.request_queue.is_empty()
            && self.op() - self.commit.min(self.op()) < PIPELINE_PREPARE_QUEUE_MAX
            && self.op() + 1 - self.checkpoint.op <= self.config.log_entries_max() / 2
        {
            let count = batch_length(&self.request_queue, self.config.batch_requests_max);
            let batch: Vec<Request> = self.request_queue.drain(..count).collect();
            let entry = Entry::new(self.op() + 1, self.view, self.head_checksum(), batch);
            self.append(entry.clone());
            self.acks[usize::from(self.config.replica)] = self.op();
            let message = Message::Prepare {
                view: self.view,
                entry,
                commit: self.commit,
            };
            self.broadcast(&message);
        }
        self.try_commit();
    }

    pub(super) fn on_prepare(&mut self, view: ViewNumber, entry: Entry, commit: OpNumber) {
        if entry.op == 0 {
            return self.ignore();
        }
        if !self.accept_from_primary(view) {
            return;
        }
        self.repair_target = self.repair_target.max(entry.op);
        let fits = entry.op.saturating_sub(self.checkpoint.op) <= self.config.log_entries_max();
        if entry.op <= self.op() {
            let held = self.log.checksum_at(entry.op);
            if entry.op <= self.log.base() || held == Some(entry.checksum) {
                self.acknowledge();
            } else {
                self.ignore();
            }
        } else if entry.op == self.op() + 1
            && entry.parent == self.head_checksum()
            && entry.is_intact()
        {
            if fits {
                let op = entry.op;
                self.append(entry);
                self.acknowledge();
                if self.config.canaries.apply_uncommitted {
                    return self.advance_commit(op);
                }
            } else {
                self.ignore();
            }
        } else {
            self.request_repair();
        }
        self.advance_commit(commit);
    }

    /// Whether a message from the primary of `view` is for this replica's current normal view.
    /// A message from a newer view makes a lagging replica ask for that view's log.
    fn accept_from_primary(&mut self, view: ViewNumber) -> bool {
        if self.status == Status::Recovering || view < self.view {
            self.ignore();
            return false;
        }
        if view > self.view || self.status == Status::ViewChange {
            self.request_start_view(view);
            return false;
        }
        if self.is_primary() {
            self.ignore();
            return false;
        }
        self.primary_heard_tick = self.now_ticks;
        true
    }

    fn acknowledge(&mut self) {
        let primary = self.primary_of(self.view);
        let (view, op, replica) = (self.view, self.op(), self.config.replica);
        self.send(primary, Message::PrepareOk { view, op, replica });
    }

    pub(super) fn on_prepare_ok(&mut self, view: ViewNumber, op: OpNumber, replica: ReplicaIndex) {
        let valid = self.status == Status::Normal
            && self.is_primary()
            && view == self.view
            && self.is_peer(replica)
            && op <= self.op();
        if !valid {
            return self.ignore();
        }
        let ack = &mut self.acks[usize::from(replica)];
        *ack = (*ack).max(op);
        self.peer_heard_tick[usize::from(replica)] = self.now_ticks;
        self.try_commit();
        self.prepare_from_queue();
    }

    pub(super) fn try_commit(&mut self) {
        let mut acks = self.acks.clone();
        acks.sort_unstable_by(|left, right| right.cmp(left));
        let mut candidate = acks[self.config.quorum() - 1];
        if self.config.canaries.commit_without_quorum {
            candidate = self.op();
        }
        if candidate > self.commit {
            self.advance_commit(candidate);
            // Tell the backups at once rather than at the next heartbeat, so a backup whose
            // client waits to read its own write applies it one round trip later.
            self.heartbeat_tick = self.now_ticks;
            self.broadcast(&Message::Commit {
                view: self.view,
                commit: self.commit,
            });
        }
    }

    pub(super) fn on_commit(&mut self, view: ViewNumber, commit: OpNumber) {
        if self.accept_from_primary(view) {
            self.repair_target = self.repair_target.max(commit);
            self.acknowledge();
            self.advance_commit(commit);
        }
    }

    pub(super) fn advance_commit(&mut self, commit: OpNumber) {
        if commit > self.commit {
            self.commit = commit;
        }
        if self.commit > self.op() && self.status == Status::Normal && !self.is_primary() {
            self.request_repair();
        }
        self.apply_committed();
    }

    fn request_repair(&mut self) {
        if self.now_ticks < self.repair_allowed_tick || self.fetching_state() {
            return;
        }
        self.repair_allowed_tick = self.now_ticks + self.config.timeouts.resend_interval_ticks;
        let missing = self
            .repair_target
            .max(self.commit)
            .saturating_sub(self.op())
            .max(1);
        let message = Message::RequestPrepares {
            view: self.view,
            replica: self.config.replica,
            op_first: self.op() + 1,
            count: missing.min(REPAIR_PREPARES_MAX),
        };
        let primary = self.primary_of(self.view);
        self.send(primary, message);
    }

    pub(super) fn on_request_prepares(
        &mut self,
        view: ViewNumber,
        replica: ReplicaIndex,
        op_first: OpNumber,
        count: u64,
    ) {
        let valid = self.status == Status::Normal
            && self.is_primary()
            && view == self.view
            && self.is_peer(replica)
            && op_first >= 1;
        if !valid {
            return self.ignore();
        }
        if op_first <= self.log.base() {
            // The backup needs ops this replica has checkpointed and discarded.
            return self.offer_state(replica);
        }
        let op_last = op_first
            .saturating_add(count.min(REPAIR_PREPARES_MAX))
            .saturating_sub(1);
        self.send_prepares(replica, op_first, op_last.min(self.op()));
    }

    /// Sends the prepares `op_first..=op_last` to `to`, stopping once they carry
    /// [`REPAIR_BYTES_MAX`] bytes of operations (the first is always sent).
    fn send_prepares(&mut self, to: ReplicaIndex, op_first: OpNumber, op_last: OpNumber) {
        let mut bytes = 0u64;
        for op in op_first..=op_last {
            let Some(entry) = self.log.entry(op).cloned() else {
                continue;
            };
            let entry_bytes: u64 = entry
                .requests
                .iter()
                .map(|request| request.operation.len() as u64)
                .sum();
            if bytes > 0 && bytes.saturating_add(entry_bytes) > REPAIR_BYTES_MAX {
                break;
            }
            bytes = bytes.saturating_add(entry_bytes).max(1);
            let message = Message::Prepare {
                view: self.view,
                entry,
                commit: self.commit,
            };
            self.send(to, message);
        }
    }

    pub(super) fn tick_primary(&mut self) {
        let timeouts = self.config.timeouts;
        let in_contact = self
            .peer_heard_tick
            .iter()
            .enumerate()
            .filter(|(replica, heard)| {
                *replica == usize::from(self.config.replica)
                    || self.now_ticks - **heard < timeouts.primary_silence_timeout_ticks
            })
            .count();
        self.abdicating = in_contact < self.config.quorum();
        if self.abdicating {
            return;
        }
        if self.now_ticks >= self.heartbeat_tick + timeouts.heartbeat_interval_ticks {
            self.heartbeat_tick = self.now_ticks;
            self.broadcast(&Message::Commit {
                view: self.view,
                commit: self.commit,
            });
        }
        if self.now_ticks >= self.resend_tick + timeouts.resend_interval_ticks {
            self.resend_tick = self.now_ticks;
            self.retransmit_prepares();
        }
        self.prepare_from_queue();
    }

    /// Resends uncommitted prepares to each backup that has not acknowledged them, backing
    /// off from one that acknowledged nothing since the last time (see [`Retransmit`]).
    fn retransmit_prepares(&mut self) {
        let interval = self.config.timeouts.resend_interval_ticks;
        for replica in 0..self.config.replica_count {
            if !self.is_peer(replica) {
                continue;
            }
            let ack = self.acks[usize::from(replica)];
            let op_first = ack.max(self.commit.min(self.op())) + 1;
            let op_last = self.op().min(op_first + REPAIR_PREPARES_MAX - 1);
            let schedule = &mut self.retransmits[usize::from(replica)];
            if schedule.due(ack, op_first <= op_last, self.now_ticks, interval) {
                self.send_prepares(replica, op_first, op_last);
            }
        }
    }

    pub(super) fn tick_backup(&mut self) {
        let silence = self.now_ticks - self.primary_heard_tick;
        let timeout = self.timeout_with_jitter(self.config.timeouts.primary_silence_timeout_ticks);
        // A replica fetching state is in no position to judge the primary; the transfer is
        // abandoned if its source goes silent, and the timeout applies again.
        if silence >= timeout && !self.fetching_state() {
            return self.start_view_change(self.view + 1);
        }
        if self.repair_target > self.op() || self.commit > self.op() {
            self.request_repair();
        }
    }
}

/// How many of the first queued requests one batch takes: at most `count_max`, and while the
/// batch holds fewer than [`BATCH_BYTES_MAX`] bytes of operations (at least one).
fn batch_length<'a>(queue: impl IntoIterator<Item = &'a Request>, count_max: usize) -> usize {
    let mut bytes = 0;
    let mut taken = 0;
    for request in queue.into_iter().take(count_max) {
        if taken > 0 && bytes + request.operation.len() > BATCH_BYTES_MAX {
            break;
        }
        bytes += request.operation.len();
        taken += 1;
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(bytes: usize) -> Request {
        Request {
            client: 1,
            request_number: 1,
            operation: vec![0; bytes],
        }
    }

    #[test]
    fn a_batch_stops_at_its_bytes_but_always_takes_one() {
        let small: Vec<Request> = (0..100).map(|_| request(10)).collect();
        assert_eq!(
            batch_length(&small, 64),
            64,
            "small requests: the count bounds"
        );
        let large: Vec<Request> = (0..5).map(|_| request(3 * 1024 * 1024)).collect();
        assert_eq!(batch_length(&large, 64), 1, "3 MiB each: one a batch");
        let huge = [request(BATCH_BYTES_MAX + 1), request(1)];
        assert_eq!(batch_length(&huge, 64), 1, "one over the bound goes alone");
        let mixed = [
            request(1024 * 1024),
            request(2 * 1024 * 1024),
            request(1024 * 1024 + 1),
        ];
        assert_eq!(batch_length(&mixed, 64), 2, "up to 4 MiB");
        assert_eq!(batch_length(&[] as &[Request], 64), 0);
    }
}
