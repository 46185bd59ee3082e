//! The catalog workload in the simulator: a few seeds pass every check and commit membership
//! commands and refusals, a canary is caught with the catalog machine, and the reference
//! replay catches a reply the committed order does not give.

use super::*;
use crate::vsr::history::Operation;
use crate::vsr::{Canary, SimulationOptions, Summary, failures, run_workload_seeds};

/// Catalog seeds run by `cargo test` (a debug build applies every command through redb).
const CATALOG_SEEDS: u64 = 8;

/// Seeds the canary runs with the catalog machine; it must fail at least one.
const CANARY_SEEDS: u64 = 30;

#[test]
fn a_few_catalog_seeds_pass_and_commit_membership_commands_and_refusals() {
    let outcomes = run_workload_seeds(
        &CatalogWorkload,
        0,
        CATALOG_SEEDS,
        SimulationOptions::default(),
        2,
    );
    assert_eq!(failures(&outcomes), Vec::<String>::new());
    let summaries: Vec<&Summary> = outcomes
        .iter()
        .filter_map(|outcome| outcome.result.as_ref().ok())
        .collect();
    for summary in &summaries {
        assert!(summary.workload.membership_commands > 0, "{summary:?}");
        assert!(summary.workload.replies_checked > 0, "{summary:?}");
    }
    let refusals: u64 = summaries
        .iter()
        .map(|summary| summary.workload.refusals)
        .sum();
    assert!(refusals > 0, "some commands were refused");
}

#[test]
fn the_catalog_workload_catches_commits_without_a_quorum() {
    let options = SimulationOptions {
        canary: Canary::CommitWithoutQuorum,
        ..SimulationOptions::default()
    };
    let failed = failures(&run_workload_seeds(
        &CatalogWorkload,
        0,
        CANARY_SEEDS,
        options,
        2,
    ));
    assert!(!failed.is_empty(), "no canary seed was caught");
}

#[test]
fn a_reply_the_committed_order_does_not_give_is_caught() {
    let workload = CatalogWorkload;
    let create = Command::CreateTenant {
        name: "acme".into(),
        token_sha256: "aa".into(),
        quotas: Quotas::default(),
        created_ms: 1,
    };
    let join = join_member(1, 2, "n1".into());
    let mut machine = workload.machine().expect("an in-memory catalog");
    let created = machine.apply(&CatalogMachine::encode_command(&create));
    let refused = machine.apply(&CatalogMachine::encode_command(&create));
    let joined = machine.apply(&CatalogMachine::encode_command(&join));
    let operation = |request_number, command, answer| Operation {
        client: 1,
        request_number,
        operation: command,
        invoked: request_number * 2,
        completed: Some((request_number * 2 + 1, answer)),
    };
    let mut history = History::default();
    history.operations = vec![operation(1, create, refused), operation(2, join, joined)];
    let committed = CommittedOrder::from([(1, vec![(1, 1)]), (2, vec![(1, 2)])]);
    let error = workload
        .check(&history, &committed)
        .expect_err("a refusal where the reference created the tenant");
    assert!(error.contains("committed order gives"), "{error}");
    history.operations[0].completed = Some((3, created));
    let counts = workload.check(&history, &committed);
    assert_eq!(
        counts,
        Ok(WorkloadCounts {
            replies_checked: 2,
            refusals: 0,
            membership_commands: 1,
        })
    );
}
