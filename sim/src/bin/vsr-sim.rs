//! `vsr-sim`: runs the deterministic VSR simulator over seeds and reports every failing seed.
//!
//! ```text
//! cargo run --release -p tessera-sim --bin vsr-sim -- --seed 42          # replay one seed
//! cargo run --release -p tessera-sim --bin vsr-sim -- --seeds 10000      # seeds 0..10000
//! cargo run --release -p tessera-sim --bin vsr-sim -- --seeds 500 --from 7 --canary install-unverified-state
//! cargo run --release -p tessera-sim --bin vsr-sim -- --machine catalog --seeds 2000  # the real catalog
//! cargo run --release -p tessera-sim --bin vsr-sim -- --machine partition --seeds 10000 # the partition plane
//! ```

use std::process::ExitCode;
use std::str::FromStr;
use std::time::Instant;

use clap::Parser;
use tessera_sim::catalog::CatalogWorkload;
use tessera_sim::partition::PartitionWorkload;
use tessera_sim::vsr::{
    Canary, KeyValueWorkload, Outcome, SimulationOptions, Summary, Workload, run_workload_seeds,
};

/// What the simulated cluster replicates.
#[derive(Clone, Copy, Debug)]
enum Machine {
    /// The test key-value store, checked for linearizability.
    KeyValue,
    /// The real catalog, checked against a reference replay of the committed order.
    Catalog,
    /// The real partition machine, messages to counters executed where they arrive; each
    /// counter's history checked.
    Partition,
}

impl FromStr for Machine {
    type Err = String;

    fn from_str(name: &str) -> Result<Machine, String> {
        match name {
            name if name == KeyValueWorkload.name() => Ok(Machine::KeyValue),
            name if name == CatalogWorkload.name() => Ok(Machine::Catalog),
            name if name == PartitionWorkload.name() => Ok(Machine::Partition),
            _ => Err(format!("unknown machine {name}: kv, catalog or partition")),
        }
    }
}

/// Runs the VSR simulator and prints one line per failing seed, then a summary.
#[derive(Debug, Parser)]
#[command(name = "vsr-sim")]
struct Arguments {
    /// Run exactly this seed (prints its summary too).
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run this many consecutive seeds.
    #[arg(long)]
    seeds: Option<u64>,
    /// First seed of `--seeds`.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Run a deliberately broken replica; failures are expected. One of
    /// commit-without-quorum (the default when no name is given), acknowledge-before-durable,
    /// install-unverified-state, vote-after-disk-loss, apply-uncommitted,
    /// read-without-barrier (partition only).
    #[arg(long, num_args = 0..=1, default_missing_value = "commit-without-quorum")]
    canary: Option<Canary>,
    /// Ticks of the fault phase of each run.
    #[arg(long, default_value_t = SimulationOptions::default().fault_ticks)]
    fault_ticks: u64,
    /// The replicated state machine: kv (the test key-value store), catalog or partition.
    #[arg(long, default_value = "kv")]
    machine: Machine,
    /// Worker threads.
    #[arg(long, default_value_t = std::thread::available_parallelism().map_or(1, |count| count.get()))]
    threads: usize,
}

fn main() -> ExitCode {
    let arguments = Arguments::parse();
    let options = SimulationOptions {
        canary: arguments.canary.unwrap_or_default(),
        fault_ticks: arguments.fault_ticks,
    };
    let (first, count) = match (arguments.seed, arguments.seeds) {
        (Some(seed), _) => (seed, 1),
        (None, Some(count)) => (arguments.from, count),
        (None, None) => (arguments.from, 100),
    };
    // A violated invariant panics inside a replica; the runner reports it per seed.
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    let outcomes: Vec<Outcome> = match arguments.machine {
        Machine::KeyValue => {
            run_workload_seeds(&KeyValueWorkload, first, count, options, arguments.threads)
        }
        Machine::Catalog => {
            run_workload_seeds(&CatalogWorkload, first, count, options, arguments.threads)
        }
        Machine::Partition => {
            run_workload_seeds(&PartitionWorkload, first, count, options, arguments.threads)
        }
    };
    let elapsed_seconds = started.elapsed().as_secs_f64();
    let mut failed = 0u64;
    let mut totals = Totals::default();
    for outcome in &outcomes {
        match &outcome.result {
            Ok(summary) => {
                totals.add(summary);
                if arguments.seed.is_some() {
                    println!("seed {} passed: {summary:?}", outcome.seed);
                }
            }
            Err(reason) => {
                failed += 1;
                println!("seed {} failed: {reason}", outcome.seed);
            }
        }
    }
    println!("ran {count} seeds in {elapsed_seconds:.1} s");
    println!(
        "passing seeds: {} ops committed, {} with checkpoints ({} taken), {} with state \
         transfers ({} installed, {} corrupted chunks rejected), {} with a disk lost ({} lost), \
         {} leadership transfers asked for",
        totals.ops_committed,
        totals.seeds_with_checkpoints,
        totals.checkpoints_taken,
        totals.seeds_with_transfers,
        totals.states_transferred,
        totals.states_rejected,
        totals.seeds_with_disk_loss,
        totals.disks_lost,
        totals.primary_takeovers
    );
    println!(
        "{:?} machine: {} acknowledged replies checked, {} membership commands committed \
         ({} seeds with one), {} refusals",
        arguments.machine,
        totals.replies_checked,
        totals.membership_commands,
        totals.seeds_with_membership,
        totals.refusals
    );
    println!("{} seeds passed", count - failed);
    if failed > 0 {
        println!("{failed} seeds failed");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// What the passing seeds did, summed.
#[derive(Debug, Default)]
struct Totals {
    ops_committed: u64,
    seeds_with_checkpoints: u64,
    checkpoints_taken: u64,
    seeds_with_transfers: u64,
    states_transferred: u64,
    states_rejected: u64,
    seeds_with_disk_loss: u64,
    disks_lost: u64,
    primary_takeovers: u64,
    replies_checked: u64,
    membership_commands: u64,
    seeds_with_membership: u64,
    refusals: u64,
}

impl Totals {
    fn add(&mut self, summary: &Summary) {
        self.ops_committed += summary.ops_committed;
        self.seeds_with_checkpoints += u64::from(summary.checkpoints_taken > 0);
        self.checkpoints_taken += summary.checkpoints_taken;
        self.seeds_with_transfers += u64::from(summary.states_transferred > 0);
        self.states_transferred += summary.states_transferred;
        self.states_rejected += summary.states_rejected;
        self.seeds_with_disk_loss += u64::from(summary.disks_lost > 0);
        self.disks_lost += summary.disks_lost;
        self.primary_takeovers += summary.primary_takeovers;
        self.replies_checked += summary.workload.replies_checked;
        self.membership_commands += summary.workload.membership_commands;
        self.seeds_with_membership += u64::from(summary.workload.membership_commands > 0);
        self.refusals += summary.workload.refusals;
    }
}
