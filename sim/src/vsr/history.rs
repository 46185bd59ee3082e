//! What the simulated clients saw: every operation they invoked, with its answer once it came,
//! in one global event order — the history a workload's check reads.

use tessera_consensus::message::ClientId;

/// One operation as the clients saw it: `O` is the workload's request, `A` its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation<O, A> {
    /// Who issued it.
    pub client: ClientId,
    /// Its request number in the client's session.
    pub request_number: u64,
    /// The operation.
    pub operation: O,
    /// Position in the global event order when it was invoked.
    pub invoked: u64,
    /// Position when its reply arrived and the answer, or `None` while pending.
    pub completed: Option<(u64, A)>,
}

/// Every operation of a run, with a global event order.
#[derive(Clone, Debug)]
pub struct History<O, A> {
    /// The operations in invocation order.
    pub operations: Vec<Operation<O, A>>,
    events: u64,
}

impl<O, A> Default for History<O, A> {
    fn default() -> Self {
        History {
            operations: Vec::new(),
            events: 0,
        }
    }
}

impl<O, A> History<O, A> {
    /// The next position in the global event order.
    pub(super) fn next_event(&mut self) -> u64 {
        self.events += 1;
        self.events
    }
}
