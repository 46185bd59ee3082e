//! A learner: a non-voting copy of the replicated state machine. It votes on nothing and
//! journals nothing; it applies committed entries that a voter sends it, in op order, through
//! a client table exactly as a replica's apply loop does (each request at most once, evicted
//! sessions never executed), and installs a voter's checkpoint when the entries it needs were
//! trimmed away. Entries must chain from what it holds (each entry intact, its parent the
//! checksum of the one before), so a lost, reordered or corrupted batch is refused, not
//! applied. It starts empty on every start: its state is a cache of the voters'.

use super::checkpoint::{Checkpoint, CheckpointError, decode_state};
use super::client_table::{ClientTable, Lookup, Session};
use super::message::{CHECKSUM_ROOT, ClientId, Entry, OpNumber};
use super::state_machine::StateMachine;
use thiserror::Error;

/// Why a learner refused an entry or a checkpoint (it changed nothing).
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum LearnError {
    /// The entry is not the next op.
    #[error("entry {got} does not follow op {applied}")]
    NotNext {
        /// The last op applied.
        applied: OpNumber,
        /// The entry's op.
        got: OpNumber,
    },
    /// The entry's checksum does not match its contents, or it does not chain from the last
    /// applied entry.
    #[error("entry {0} is corrupt or does not chain from the one before")]
    Broken(OpNumber),
    /// The checkpoint is corrupt, not newer than the state held, or does not decode.
    #[error("checkpoint refused: {0}")]
    Checkpoint(String),
}

impl From<CheckpointError> for LearnError {
    fn from(error: CheckpointError) -> Self {
        LearnError::Checkpoint(error.to_string())
    }
}

/// A non-voting copy of the state machine `S`.
///
/// ```
/// use tessera_consensus::learner::Learner;
/// use tessera_consensus::message::{Entry, Request, CHECKSUM_ROOT};
/// use tessera_consensus::state_machine::{KeyValue, KeyValueOperation};
///
/// let mut learner = Learner::new(KeyValue::default());
/// let operation = KeyValueOperation::Put { key: 1, value: 5 }.encode();
/// let request = Request { client: 7, request_number: 1, operation };
/// let entry = Entry::new(1, 0, CHECKSUM_ROOT, vec![request]);
/// assert_eq!(learner.apply(&entry).unwrap(), vec![(7, 1)]);
/// assert_eq!(learner.state_machine().get(1), Some(5));
/// assert!(learner.apply(&entry).is_err()); // op 1 again is not the next op
/// ```
pub struct Learner<S> {
    state_machine: S,
    clients: ClientTable,
    applied: OpNumber,
    /// The checksum of the entry at `applied` (the chain's head).
    head_checksum: u64,
}

impl<S: StateMachine> Learner<S> {
    /// A learner holding `state_machine` as the state before op 1.
    pub fn new(state_machine: S) -> Learner<S> {
        Learner {
            state_machine,
            clients: ClientTable::default(),
            applied: 0,
            head_checksum: CHECKSUM_ROOT,
        }
    }

    /// The last op applied.
    pub fn applied(&self) -> OpNumber {
        self.applied
    }

    /// The state machine.
    pub fn state_machine(&self) -> &S {
        &self.state_machine
    }

    /// The state machine, to drain what it recorded.
    pub fn state_machine_mut(&mut self) -> &mut S {
        &mut self.state_machine
    }

    /// Applies the committed `entry`, which must be the next op and chain from the last.
    /// Returns the `(client, request number)` of every request in it, executed or not (a
    /// duplicate is skipped, as on the voters).
    pub fn apply(&mut self, entry: &Entry) -> Result<Vec<(ClientId, u64)>, LearnError> {
        if entry.op != self.applied + 1 {
            return Err(LearnError::NotNext {
                applied: self.applied,
                got: entry.op,
            });
        }
        if !entry.is_intact() || entry.parent != self.head_checksum {
            return Err(LearnError::Broken(entry.op));
        }
        let mut requests = Vec::with_capacity(entry.requests.len());
        for request in &entry.requests {
            requests.push((request.client, request.request_number));
            if let Lookup::New = self.clients.lookup(request.client, request.request_number) {
                let result = self.state_machine.apply(&request.operation);
                let session = Session {
                    request_number: request.request_number,
                    result,
                    op: entry.op,
                };
                self.clients.record(request.client, session);
            }
        }
        self.applied = entry.op;
        self.head_checksum = entry.checksum;
        Ok(requests)
    }

    /// Replaces the state with `checkpoint`'s, which must be intact and newer than what is
    /// held.
    pub fn install(&mut self, checkpoint: &Checkpoint) -> Result<(), LearnError> {
        if !checkpoint.is_intact() {
            return Err(LearnError::Checkpoint("its checksum does not match".into()));
        }
        if checkpoint.op <= self.applied {
            return Err(LearnError::Checkpoint(format!(
                "op {} is not newer than op {}",
                checkpoint.op, self.applied
            )));
        }
        let (clients, machine) = decode_state(&checkpoint.state)?;
        self.state_machine
            .restore(&machine)
            .map_err(CheckpointError::from)?;
        self.clients = clients;
        self.applied = checkpoint.op;
        self.head_checksum = checkpoint.entry_checksum;
        Ok(())
    }
}
