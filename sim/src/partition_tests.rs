//! The partition workload in the simulator: seeds pass every check with conflicts among racing
//! messages, each canary that breaks the plane is caught, and the check itself catches a lost
//! add and a stale read in a hand-made history.

use super::*;
use crate::vsr::history::Operation;
use crate::vsr::{SimulationOptions, failures, run_workload_seeds};

/// Partition seeds run by `cargo test`.
const PARTITION_SEEDS: u64 = 40;

/// Seeds each canary runs; it must fail at least one (a backup applying an uncommitted write
/// shows only when a view change then drops that write: about one seed in twenty).
const CANARY_SEEDS: u64 = 100;

#[test]
fn partition_seeds_pass_with_racing_messages_refused_as_conflicts() {
    let outcomes = run_workload_seeds(
        &PartitionWorkload,
        0,
        PARTITION_SEEDS,
        SimulationOptions::default(),
        2,
    );
    assert_eq!(failures(&outcomes), Vec::<String>::new());
    let summaries: Vec<_> = outcomes
        .iter()
        .filter_map(|outcome| outcome.result.as_ref().ok())
        .collect();
    let checked: u64 = summaries.iter().map(|s| s.workload.replies_checked).sum();
    let conflicts: u64 = summaries.iter().map(|s| s.workload.refusals).sum();
    assert!(checked > 1_000, "replies checked: {checked}");
    assert!(conflicts > 0, "racing messages met a conflict somewhere");
    assert!(summaries.iter().any(|summary| summary.crashes > 0));
}

#[test]
fn every_canary_that_breaks_the_plane_is_caught() {
    for canary in [
        Canary::CommitWithoutQuorum,
        Canary::ApplyUncommitted,
        Canary::ReadWithoutBarrier,
    ] {
        let options = SimulationOptions {
            canary,
            ..SimulationOptions::default()
        };
        let failed = failures(&run_workload_seeds(
            &PartitionWorkload,
            0,
            CANARY_SEEDS,
            options,
            2,
        ));
        assert!(!failed.is_empty(), "no {} seed was caught", canary.name());
    }
}

fn add(
    client: ClientId,
    invoked: u64,
    completed: u64,
    amount: u64,
    value: u64,
) -> Operation<CounterMessage, CounterAnswer> {
    Operation {
        client,
        request_number: 1,
        operation: CounterMessage::Add { counter: 0, amount },
        invoked,
        completed: Some((completed, CounterAnswer::Value(value))),
    }
}

#[test]
fn the_check_catches_a_doubled_add_and_a_stale_read() {
    let committed: CommittedOrder = [(1, vec![(1, 1)]), (2, vec![(2, 1)])].into_iter().collect();
    let mut history = History::default();
    history.operations = vec![add(1, 1, 2, 5, 5), add(2, 3, 4, 3, 8)];
    assert!(PartitionWorkload.check(&history, &committed).is_ok());
    // The second add answered as if the first had been applied twice.
    history.operations[1] = add(2, 3, 4, 3, 13);
    assert!(PartitionWorkload.check(&history, &committed).is_err());
    // A get sent after the add of 8 was acknowledged answers 5, and no barrier committed it.
    history.operations[1] = add(2, 3, 4, 3, 8);
    history.operations.push(Operation {
        client: 3,
        request_number: 1,
        operation: CounterMessage::Get { counter: 0 },
        invoked: 5,
        completed: Some((6, CounterAnswer::Value(5))),
    });
    assert!(PartitionWorkload.check(&history, &committed).is_err());
    // An acknowledged add no committed op carries is a lost write.
    history.operations.pop();
    history.operations.push(add(4, 7, 8, 1, 9));
    assert!(PartitionWorkload.check(&history, &committed).is_err());
}
