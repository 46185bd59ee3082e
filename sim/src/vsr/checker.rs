//! The simulator's safety checks, fed every replica's applied ops, views and commit numbers
//! and every client acknowledgement as they happen:
//!
//! - agreement: no two replicas apply different entries at one op number;
//! - order: each replica applies ops 1, 2, 3, ... in sequence (per incarnation);
//! - monotonicity: a replica's view and commit number never decrease while it runs, and a
//!   restart resumes at or above its durable view (a replica that lost its disk starts over);
//! - durability: an acknowledged request was committed before its reply, and at the end every
//!   live replica has applied every acknowledged request;
//! - same state: every replica's state at a checkpoint op (taken, restored after a restart or
//!   installed by state transfer) has the same checksum as every other replica's at that op.

use std::collections::{BTreeMap, HashMap};

use tessera_consensus::message::{ClientId, OpNumber, ViewNumber};

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
    /// Checksum of the entry committed at each op seen applied (a replica that restarts from
    /// a checkpoint its crash kept it from reporting leaves ops no replica reported).
    committed: BTreeMap<OpNumber, u64>,
    /// The op at which each request first committed.
    request_ops: HashMap<(ClientId, u64), OpNumber>,
    /// Requests acknowledged to clients.
    acknowledged: Vec<(ClientId, u64)>,
    /// The state checksum first reported at each checkpoint op, and by which replica.
    states: HashMap<OpNumber, (u64, usize)>,
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

    /// The checksum of the entry reported applied at `op`, if any replica reported it.
    pub fn committed_checksum(&self, op: OpNumber) -> Option<u64> {
        self.committed.get(&op).copied()
    }

    /// The highest op any replica has applied.
    pub fn committed_max(&self) -> OpNumber {
        self.committed.keys().next_back().copied().unwrap_or(0)
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
        if *self.committed.entry(op).or_insert(checksum) != checksum {
            return Err(format!("replicas committed different entries at op {op}"));
        }
        for request in requests {
            self.request_ops.entry(*request).or_insert(op);
        }
        Ok(())
    }

    /// A replica's state at `op` has `state_checksum`: it checkpointed after applying `op`, or
    /// (`installed`) replaced its state with a checkpoint and resumes applying after `op`.
    pub fn on_checkpoint(
        &mut self,
        replica: usize,
        op: OpNumber,
        state_checksum: u64,
        installed: bool,
    ) -> Result<(), String> {
        let incarnation = &mut self.replicas[replica];
        if installed {
            if op < incarnation.applied {
                return Err(format!(
                    "replica {replica} installed a checkpoint at op {op} below applied op {}",
                    incarnation.applied
                ));
            }
            incarnation.applied = op;
        } else if op != incarnation.applied {
            return Err(format!(
                "replica {replica} checkpointed op {op} having applied op {}",
                incarnation.applied
            ));
        }
        match self.states.get(&op) {
            Some((first, other)) if *first != state_checksum => Err(format!(
                "replica {replica} {} a state at op {op} that differs from replica {other}'s",
                if installed {
                    "installed"
                } else {
                    "checkpointed"
                }
            )),
            Some(_) => Ok(()),
            None => {
                self.states.insert(op, (state_checksum, replica));
                Ok(())
            }
        }
    }

    /// A replica installed a state in which `request_number` of `client` committed at `op`
    /// (its client table says so). The ops below a checkpoint may never have been reported
    /// applied: a replica that crashed in the handler that applied them restarts from a
    /// checkpoint that holds them.
    pub fn on_session(&mut self, client: ClientId, request_number: u64, op: OpNumber) {
        self.request_ops
            .entry((client, request_number))
            .or_insert(op);
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

    /// A replica lost its disk: its next incarnation starts from nothing, in view 0.
    pub fn on_disk_lost(&mut self, replica: usize) {
        self.replicas[replica] = Incarnation::default();
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
