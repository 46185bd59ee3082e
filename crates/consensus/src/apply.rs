//! The apply loop: committed ops are executed in op order against the state machine through
//! the client table (at most once per request; an evicted session is answered
//! [`ReplyError::SessionEvicted`] and never executed), the primary replies, and every
//! `checkpoint_interval_ops` applied ops — or sooner, once the ops applied since the last one
//! carry [`CHECKPOINT_LOG_BYTES`] — the replica takes a checkpoint.

use super::client_table::{Lookup, Session};
use super::config::CHECKPOINT_LOG_BYTES;
use super::journal::Journal;
use super::message::{Entry, OpNumber, Reply, ReplyError, Status};
use super::replica::{Action, Replica};
use super::state_machine::StateMachine;

impl<J: Journal, S: StateMachine> Replica<J, S> {
    pub(super) fn apply_committed(&mut self) {
        let target = self.commit.min(self.op());
        while self.applied < target {
            let op = self.applied + 1;
            let Some(entry) = self.log.entry(op) else {
                panic!("the log holds every op above the checkpoint, which is applied");
            };
            let checksum = entry.checksum;
            self.applied_bytes += entry_bytes(entry);
            let requests: Vec<(u64, u64)> = entry
                .requests
                .iter()
                .map(|request| (request.client, request.request_number))
                .collect();
            for position in 0..requests.len() {
                self.apply_request(op, position);
            }
            self.applied = op;
            self.outbox.push(Action::Applied {
                op,
                checksum,
                requests,
            });
            if op.is_multiple_of(self.config.checkpoint_interval_ops)
                || self.applied_bytes >= CHECKPOINT_LOG_BYTES
            {
                self.take_checkpoint();
            }
        }
    }

    fn apply_request(&mut self, op: OpNumber, position: usize) {
        let Some(request) = self
            .log
            .entry(op)
            .and_then(|entry| entry.requests.get(position))
        else {
            return;
        };
        let (client, request_number) = (request.client, request.request_number);
        let result = match self.clients.lookup(client, request_number) {
            Lookup::Stale => return,
            Lookup::Evicted => Err(ReplyError::SessionEvicted),
            Lookup::Latest(result) => Ok(result.to_vec()),
            Lookup::New => {
                let result = self.state_machine.apply(&request.operation);
                let session = Session {
                    request_number,
                    result: result.clone(),
                    op,
                };
                self.clients.record(client, session);
                Ok(result)
            }
        };
        if self.status == Status::Normal && self.is_primary() {
            let reply = Reply {
                client,
                request_number,
                view: self.view,
                result,
            };
            self.outbox.push(Action::Reply(reply));
        }
    }
}

/// The operation bytes an entry carries.
pub(super) fn entry_bytes(entry: &Entry) -> u64 {
    entry
        .requests
        .iter()
        .map(|request| request.operation.len() as u64)
        .sum()
}
