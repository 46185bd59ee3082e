//! The simulation seen from outside: the protocol passes many seeds, runs replay exactly from
//! their seed, and every canary (a deliberately broken rule) is caught.

use super::{Canary, SimOptions, run_seed};

/// Seeds every test runs over: enough to exercise every fault many times; fewer in a debug
/// build (CI), where the 10,000-seed run is `cargo run --release --bin lease-sim`.
const SEEDS: u64 = if cfg!(debug_assertions) { 50 } else { 200 };

#[test]
fn every_seed_passes() {
    let options = SimOptions::default();
    let failures: Vec<String> = (0..SEEDS)
        .filter_map(|seed| run_seed(seed, &options).err())
        .map(|violation| violation.to_string())
        .collect();
    assert!(
        failures.is_empty(),
        "failing seeds:\n{}",
        failures.join("\n")
    );
}

#[test]
fn a_seed_replays_the_same_run() {
    let options = SimOptions::default();
    assert_eq!(run_seed(17, &options), run_seed(17, &options));
}

#[test]
fn invalid_options_are_refused() {
    let options = SimOptions {
        shards: 0,
        ..SimOptions::default()
    };
    assert!(run_seed(0, &options).is_err());
}

/// The first seed below [`SEEDS`] in which `canary` causes a safety violation.
fn first_catch(canary: Canary) -> Option<u64> {
    let options = SimOptions {
        canary: Some(canary),
        ..SimOptions::default()
    };
    (0..SEEDS).find(|seed| run_seed(*seed, &options).is_err_and(|violation| violation.is_safety()))
}

#[test]
fn ignoring_the_lease_is_caught() {
    assert!(first_catch(Canary::IgnoreLease).is_some());
}

#[test]
fn reassigning_without_waiting_is_caught() {
    assert!(first_catch(Canary::ReassignWithoutWait).is_some());
}

#[test]
fn measuring_the_lease_from_the_answer_is_caught() {
    assert!(first_catch(Canary::LeaseFromReceipt).is_some());
}

#[test]
fn serving_before_the_state_is_installed_is_caught() {
    assert!(first_catch(Canary::ServeBeforeInstall).is_some());
}

#[test]
fn dropping_the_coordinator_fence_is_caught() {
    assert!(first_catch(Canary::NoCoordinatorFence).is_some());
}

#[test]
fn a_deposed_coordinators_decisions_are_fenced() {
    let options = SimOptions::default();
    let mut report = super::SeedReport::default();
    for seed in 0..SEEDS {
        report.add(&run_seed(seed, &options).expect("the protocol is safe"));
    }
    assert!(
        report.deposed_decisions > 0,
        "deposed coordinators decided: {report:?}"
    );
    assert_eq!(report.deposed_committed, 0, "none of it committed");
}
