//! The simulator run as a test: a fixed set of seeds must pass every check and exercise
//! checkpoints, state transfer and lost disks, every canary must be caught, and a seed must
//! replay.

use super::*;
use crate::vsr::canary::Canary;
use crate::vsr::scenario::failures;

/// Seeds run by `cargo test`: enough to cover every cluster size and fault mix, small enough
/// for a debug build.
const FIXED_SEEDS: u64 = 200;

/// Seeds each canary runs in `cargo test`; it must fail at least one.
const CANARY_SEEDS: u64 = 60;
/// The most seeds a canary is run on before the test gives up on catching it.
const CANARY_SEEDS_MAX: u64 = 300;

#[test]
fn a_fixed_set_of_seeds_passes_every_check_and_transfers_state() {
    // Exactly what `vsr-sim --seeds 200` runs.
    let outcomes = run_seeds(0, FIXED_SEEDS, SimulationOptions::default(), 2);
    assert_eq!(outcomes.len() as u64, FIXED_SEEDS);
    assert_eq!(failures(&outcomes), Vec::<String>::new());
    let summaries: Vec<&Summary> = outcomes
        .iter()
        .filter_map(|outcome| outcome.result.as_ref().ok())
        .collect();
    let committed: u64 = summaries.iter().map(|summary| summary.ops_committed).sum();
    assert!(
        committed > FIXED_SEEDS * 20,
        "the seeds carried real load: {committed} ops"
    );
    let checkpointed = summaries
        .iter()
        .filter(|summary| summary.checkpoints_taken > 0)
        .count() as u64;
    let transferred = summaries
        .iter()
        .filter(|summary| summary.states_transferred > 0)
        .count() as u64;
    assert!(
        checkpointed * 10 >= FIXED_SEEDS * 9,
        "checkpoints in most seeds: {checkpointed}"
    );
    assert!(
        transferred * 2 >= FIXED_SEEDS,
        "state transfers in most seeds: {transferred}"
    );
    assert!(
        summaries.iter().any(|summary| summary.states_rejected > 0),
        "some corrupted chunk was caught by its checksum"
    );
    let disk_lost = summaries
        .iter()
        .filter(|summary| summary.disks_lost > 0)
        .count() as u64;
    assert!(
        disk_lost * 5 >= FIXED_SEEDS,
        "a replica lost its disk and recovered in many seeds: {disk_lost}"
    );
    let takeovers = summaries
        .iter()
        .filter(|summary| summary.primary_takeovers > 0)
        .count() as u64;
    assert!(
        takeovers * 2 >= FIXED_SEEDS,
        "a replica asked for the primary's role in most seeds: {takeovers}"
    );
}

#[test]
fn every_canary_of_the_replica_is_caught() {
    for canary in Canary::OF_THE_REPLICA {
        let options = SimulationOptions {
            canary,
            ..SimulationOptions::default()
        };
        // Seeds in windows of CANARY_SEEDS until one is caught: some canaries are rare (one
        // seed in a hundred or more).
        let mut failed = Vec::new();
        let mut start = 0;
        while failed.is_empty() && start < CANARY_SEEDS_MAX {
            failed = failures(&run_seeds(start, CANARY_SEEDS, options, 2));
            start += CANARY_SEEDS;
        }
        assert!(
            !failed.is_empty(),
            "the checkers caught no {} seed in {CANARY_SEEDS_MAX}",
            canary.name()
        );
    }
}

#[test]
fn the_agreement_checker_itself_catches_commits_without_a_quorum() {
    let options = SimulationOptions {
        canary: Canary::CommitWithoutQuorum,
        ..SimulationOptions::default()
    };
    let failed = failures(&run_seeds(0, 40, options, 2));
    assert!(
        failed.len() >= 4,
        "the checkers caught only {} canary seeds",
        failed.len()
    );
    assert!(
        failed
            .iter()
            .any(|failure| failure.contains("committed different entries")),
        "the agreement checker itself, not only replica asserts, catches the canary"
    );
}

#[test]
fn a_seed_replays_identically() {
    let options = SimulationOptions::default();
    assert_eq!(run_seed(11, options), run_seed(11, options));
    assert_ne!(run_seed(11, options), run_seed(12, options));
}
