//! The simulator's safety checks, fed every replica's applied ops, views and commit numbers
//! and every client acknowledgement as they happen:
//!
//! - agreement: no two replicas apply different entries at one op number;
//! - order: each replica applies ops 1, 2, 3, ... in sequence (per incarnation);
//! - monotonicity: a replica's view and commit number never decrease while it runs, and a
//!   restart resumes at or above its durable view;
//! - durability: an acknowledged request was committed before its reply, and at the end every
//!   live replica has applied every acknowledged request.

use std::collections::HashMap;

use crate::consensus::message::{ClientId, OpNumber, ViewNumber};

/// What the checker knows about one replica's current incarnation.
#[derive(Clone, Copy, Debug, Default)]
struct Incarnation {
    view: ViewNumber,
    commit: OpNumber,
    applied: OpNumber,
}

/// Accumulated observations of one run.
#[derive(Debug, Default)]
pub struct Checker {
    /// Checksum of the entry committed at each op (index `op - 1`).
    committed: Vec<u64>,
    /// The op at which each request first committed.
    request_ops: HashMap<(ClientId, u64), OpNumber>,
    /// Requests acknowledged to clients.
    acknowledged: Vec<(ClientId, u64)>,
    replicas: Vec<Incarnation>,
}

impl Checker {
    /// A checker for `replica_count` replicas.
    pub fn new(replica_count: usize) -> Checker {
        Checker {
            replicas: vec![Incarnation::default(); replica_count],
            ..Checker::default()
        }
    }

    /// The highest op any replica has applied.
    pub fn committed_max(&self) -> OpNumber {
        self.committed.len() as OpNumber
    }

    /// A replica applied `op`.
    pub fn on_applied(
        &mut self,
        replica: usize,
        op: OpNumber,
        checksum: u64,
        requests: &[(ClientId, u64)],
    ) -> Result<(), String> {
        let incarnation = &mut self.replicas[replica];
        if op != incarnation.applied + 1 {
            return Err(format!(
                "replica {replica} applied op {op} after op {}",
                incarnation.applied
            ));
        }
        incarnation.applied = op;
        match self.committed.get(op as usize - 1) {
            Some(existing) if *existing != checksum => {
                return Err(format!("replicas committed different entries at op {op}"));
            }
            Some(_) => {}
            None => {
                assert_eq!(
                    self.committed.len() as u64,
                    op - 1,
                    "ops are committed in order"
                );
                self.committed.push(checksum);
            }
        }
        for request in requests {
            self.request_ops.entry(*request).or_insert(op);
        }
        Ok(())
    }

    /// A replica's view and commit after a handler.
    pub fn on_state(
        &mut self,
        replica: usize,
        view: ViewNumber,
        commit: OpNumber,
    ) -> Result<(), String> {
        let incarnation = &mut self.replicas[replica];
        if view < incarnation.view || commit < incarnation.commit {
            return Err(format!(
                "replica {replica} went back from view {} commit {} to view {view} commit {commit}",
                incarnation.view, incarnation.commit
            ));
        }
        incarnation.view = view;
        incarnation.commit = commit;
        Ok(())
    }

    /// A replica restarted from its journal in `view`.
    pub fn on_restart(
        &mut self,
        replica: usize,
        view: ViewNumber,
        commit: OpNumber,
    ) -> Result<(), String> {
        let previous = self.replicas[replica];
        if view < previous.view {
            let durable = previous.view;
            return Err(format!(
                "replica {replica} restarted in view {view} below view {durable}"
            ));
        }
        self.replicas[replica] = Incarnation {
            view,
            commit,
            applied: 0,
        };
        Ok(())
    }

    /// A client received the reply to `request_number`.
    pub fn on_acknowledged(&mut self, client: ClientId, request_number: u64) -> Result<(), String> {
        if !self.request_ops.contains_key(&(client, request_number)) {
            return Err(format!(
                "client {client} request {request_number} acknowledged uncommitted"
            ));
        }
        self.acknowledged.push((client, request_number));
        Ok(())
    }

    /// At the end: every acknowledged request is applied on every live replica.
    pub fn check_acknowledged_everywhere(&self, live: &[bool]) -> Result<(), String> {
        for (client, request_number) in &self.acknowledged {
            let op = self.request_ops[&(*client, *request_number)];
            for (replica, incarnation) in self.replicas.iter().enumerate() {
                if live[replica] && incarnation.applied < op {
                    return Err(format!(
                        "acknowledged request {client}/{request_number} (op {op}) missing on replica {replica}"
                    ));
                }
            }
        }
        Ok(())
    }
}
