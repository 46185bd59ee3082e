//! A linearizability checker for the key-value histories: the Wing-Gong search with memoised
//! states (as in Lowe's refinement), run per key since a key-value store is linearizable exactly
//! when each key's sub-history is. A pending operation (no reply) may be linearized or left out.

use std::collections::HashSet;

use super::history;
use tessera_consensus::state_machine::KeyValueOperation;

/// The key-value history: each operation with the value it returned.
pub type History = history::History<KeyValueOperation, Option<u64>>;
/// One key-value operation of a [`History`].
pub type Operation = history::Operation<KeyValueOperation, Option<u64>>;

/// Search steps per key before the checker gives up and reports the history as unchecked.
/// Bounds the exponential worst case; histories from the simulator need a tiny fraction of it.
pub const SEARCH_STEPS_MAX: u64 = 2_000_000;

/// Checks every key's sub-history; the error names the first key that cannot be linearized.
pub fn check(history: &History) -> Result<(), String> {
    let mut keys: Vec<u64> = history.operations.iter().map(key_of).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let operations: Vec<&Operation> = history
            .operations
            .iter()
            .filter(|operation| key_of(operation) == key)
            .collect();
        let mut search = Search::new(operations);
        match search.run(None) {
            Some(true) => {}
            Some(false) => return Err(format!("history of key {key} is not linearizable")),
            None => {
                return Err(format!(
                    "linearizability search for key {key} exceeded its bound"
                ));
            }
        }
    }
    Ok(())
}

fn key_of(operation: &Operation) -> u64 {
    match operation.operation {
        KeyValueOperation::Put { key, .. } | KeyValueOperation::Get { key } => key,
    }
}

struct Search<'a> {
    operations: Vec<&'a Operation>,
    linearized: Vec<bool>,
    seen: HashSet<(Vec<bool>, Option<u64>)>,
    steps: u64,
}

impl<'a> Search<'a> {
    fn new(operations: Vec<&'a Operation>) -> Search<'a> {
        let count = operations.len();
        Search {
            operations,
            linearized: vec![false; count],
            seen: HashSet::new(),
            steps: 0,
        }
    }

    /// Whether the remaining operations can be linearized from `state`; `None` if the step
    /// bound was hit.
    fn run(&mut self, state: Option<u64>) -> Option<bool> {
        self.steps += 1;
        if self.steps > SEARCH_STEPS_MAX {
            return None;
        }
        let done = self
            .operations
            .iter()
            .zip(&self.linearized)
            .all(|(operation, linearized)| *linearized || operation.completed.is_none());
        if done {
            return Some(true);
        }
        if !self.seen.insert((self.linearized.clone(), state)) {
            return Some(false);
        }
        let horizon = self.earliest_pending_completion();
        for index in 0..self.operations.len() {
            if self.linearized[index] || self.operations[index].invoked > horizon {
                continue;
            }
            let Some(next) = step(self.operations[index], state) else {
                continue;
            };
            self.linearized[index] = true;
            let found = self.run(next)?;
            self.linearized[index] = false;
            if found {
                return Some(true);
            }
        }
        Some(false)
    }

    /// The first completion among operations not yet linearized: any operation invoked after
    /// it cannot be linearized before that one.
    fn earliest_pending_completion(&self) -> u64 {
        self.operations
            .iter()
            .zip(&self.linearized)
            .filter(|(_, linearized)| !**linearized)
            .filter_map(|(operation, _)| operation.completed.map(|(event, _)| event))
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// The state after `operation`, if its observed result is possible from `state`.
fn step(operation: &Operation, state: Option<u64>) -> Option<Option<u64>> {
    let observed = operation.completed.map(|(_, result)| result);
    match operation.operation {
        KeyValueOperation::Put { value, .. } => observed
            .is_none_or(|result| result == state)
            .then_some(Some(value)),
        KeyValueOperation::Get { .. } => observed
            .is_none_or(|result| result == state)
            .then_some(state),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operation(
        operation: KeyValueOperation,
        invoked: u64,
        completed: Option<(u64, Option<u64>)>,
    ) -> Operation {
        Operation {
            client: invoked,
            request_number: 1,
            operation,
            invoked,
            completed,
        }
    }

    fn history(operations: Vec<Operation>) -> History {
        let mut history = History::default();
        history.operations = operations;
        history
    }

    #[test]
    fn concurrent_operations_may_take_effect_in_either_order() {
        let put = operation(
            KeyValueOperation::Put { key: 0, value: 5 },
            1,
            Some((4, None)),
        );
        let get = operation(KeyValueOperation::Get { key: 0 }, 2, Some((3, Some(5))));
        assert_eq!(check(&history(vec![put, get])), Ok(()));
    }

    #[test]
    fn a_stale_read_after_a_completed_write_is_rejected() {
        let put = operation(
            KeyValueOperation::Put { key: 0, value: 5 },
            1,
            Some((2, None)),
        );
        let get = operation(KeyValueOperation::Get { key: 0 }, 3, Some((4, None)));
        assert!(check(&history(vec![put, get])).is_err());
    }

    #[test]
    fn a_write_that_vanishes_is_rejected() {
        let first = operation(
            KeyValueOperation::Put { key: 1, value: 1 },
            1,
            Some((2, None)),
        );
        let second = operation(
            KeyValueOperation::Put { key: 1, value: 2 },
            3,
            Some((4, None)),
        );
        assert!(check(&history(vec![first.clone(), second])).is_err());
        let again = operation(
            KeyValueOperation::Put { key: 1, value: 2 },
            3,
            Some((4, Some(1))),
        );
        let read = operation(KeyValueOperation::Get { key: 1 }, 5, Some((6, Some(1))));
        assert!(check(&history(vec![first, again, read])).is_err());
    }

    #[test]
    fn a_pending_write_may_or_may_not_have_happened() {
        let pending = operation(KeyValueOperation::Put { key: 2, value: 9 }, 1, None);
        let seen = operation(KeyValueOperation::Get { key: 2 }, 2, Some((3, Some(9))));
        let unseen = operation(KeyValueOperation::Get { key: 2 }, 2, Some((3, None)));
        assert_eq!(check(&history(vec![pending.clone(), seen])), Ok(()));
        assert_eq!(check(&history(vec![pending, unseen])), Ok(()));
    }
}
