//! Partition moves in the simulator, on real replicas: seeds pass with moves again and again —
//! standbys filling for a leader that is down or beside it, replicas restarting on their
//! journals, messages lost, duplicated and reordered, primaries replaced — and commits
//! following them, and each canary that breaks the move protocol is caught.

use super::*;

/// Seeds run by `cargo test`.
const SEEDS: u64 = 300;

#[test]
fn partitions_move_again_and_again_and_lose_no_add() {
    let mut total = MoveSummary::default();
    for seed in 0..SEEDS {
        let summary =
            run_seed(seed, MoveCanary::None).unwrap_or_else(|error| panic!("seed {seed}: {error}"));
        add(&mut total, summary);
    }
    eprintln!("{SEEDS} seeds: {total:?}");
    assert!(total.moves > SEEDS, "moves: {total:?}");
    assert!(total.followed > 0, "commits followed a move: {total:?}");
    assert!(total.adds > 10 * SEEDS, "adds: {total:?}");
    assert!(total.restarts > SEEDS, "replicas restarted: {total:?}");
    assert!(total.view_changes > SEEDS, "primaries replaced: {total:?}");
    assert!(total.checkpoints > SEEDS, "checkpoints taken: {total:?}");
    assert!(total.disks_lost > 0, "disks lost: {total:?}");
    assert!(total.cuts > 0, "replicas cut off: {total:?}");
}

/// Many seeds: `MOVE_SEEDS=10000 cargo test --release -p tessera-sim --lib
/// partition_move -- --ignored --nocapture`.
#[test]
#[ignore = "long: run by hand with MOVE_SEEDS"]
fn many_move_seeds_pass() {
    let seeds = std::env::var("MOVE_SEEDS")
        .ok()
        .and_then(|seeds| seeds.parse().ok())
        .unwrap_or(10_000u64);
    let started = std::time::Instant::now();
    let mut total = MoveSummary::default();
    for seed in 0..seeds {
        let summary =
            run_seed(seed, MoveCanary::None).unwrap_or_else(|error| panic!("seed {seed}: {error}"));
        add(&mut total, summary);
    }
    eprintln!(
        "{seeds} seeds passed in {:.1} s: {total:?}",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn each_move_canary_is_caught() {
    for canary in [
        MoveCanary::ServeBeforeFilled,
        MoveCanary::ImageBeforeSeal,
        MoveCanary::CommitWithoutQuorum,
    ] {
        let caught = (0..SEEDS)
            .filter(|seed| run_seed(*seed, canary).is_err())
            .count();
        eprintln!("{canary:?}: caught by {caught} of {SEEDS} seeds");
        assert!(caught > 0, "{canary:?} was never caught");
    }
}

/// Adds `summary`'s counts to `total`.
fn add(total: &mut MoveSummary, summary: MoveSummary) {
    total.moves += summary.moves;
    total.adds += summary.adds;
    total.refused += summary.refused;
    total.followed += summary.followed;
    total.restarts += summary.restarts;
    total.view_changes += summary.view_changes;
    total.checkpoints += summary.checkpoints;
    total.states_installed += summary.states_installed;
    total.disks_lost += summary.disks_lost;
    total.cuts += summary.cuts;
}
