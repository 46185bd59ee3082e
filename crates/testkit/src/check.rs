//! The property helper ([`check`]): one scenario over many seeds, each on a fresh simulated
//! node, stopping at the first seed that fails and saying how to replay just that one.

use super::Testkit;
use super::faults::Faults;
use super::sim::Sim;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The environment variable that makes [`check`] run one seed only: the replay of a failure.
pub const REPLAY_SEED_ENV: &str = "TESSERA_TESTKIT_SEED";

/// Trace lines a failure report shows: the end of the failing run.
const FAILURE_TRACE_LINES: usize = 40;

/// What a scenario returns: `Err` (or a panic) fails its seed.
pub type Outcome = Result<(), Box<dyn std::error::Error>>;

/// What a passing [`check`] ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Seeds run.
    pub seeds: u64,
    /// Scheduler steps, over all seeds.
    pub steps: u64,
    /// Crashes injected, over all seeds.
    pub crashes: u64,
}

/// Runs `scenario` once per seed in `seeds` (or only the seed in [`REPLAY_SEED_ENV`]), each on
/// a new [`Sim`] with `faults`. Panics at the first seed whose scenario fails or panics, with the
/// seed, the error, the end of its trace and the command that replays it.
///
/// ```no_run
/// use serde_json::json;
/// use tessera_testkit::{Faults, Testkit, check};
/// let mut kit = Testkit::new().unwrap();
/// kit.load("accounts", "bank_account.wasm").unwrap();
/// let report = check(&kit, 0..100, Faults::all(), |sim| {
///     sim.tell("accounts", "a", &json!({"Deposit": 10}))?;
///     sim.tell("accounts", "a", &json!({"Transfer": {"to": "b", "amount": 4}}))?;
///     sim.run_until_quiet(1_000)?;
///     let b: Option<u64> = sim.state("accounts", "b", "balance")?;
///     if b != Some(4) {
///         return Err(format!("b holds {b:?}").into());
///     }
///     Ok(())
/// });
/// assert_eq!(report.seeds, 100);
/// ```
pub fn check(
    kit: &Testkit,
    seeds: Range<u64>,
    faults: Faults,
    mut scenario: impl FnMut(&mut Sim) -> Outcome,
) -> CheckReport {
    let seeds = match replay_seed() {
        Some(seed) => seed..seed.saturating_add(1),
        None => seeds,
    };
    let mut report = CheckReport::default();
    for seed in seeds {
        let mut sim = match kit.sim(seed, faults) {
            Ok(sim) => sim,
            Err(error) => fail(seed, &error.to_string(), &[]),
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| scenario(&mut sim)));
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error.to_string()),
            Err(panic) => Some(panic_message(panic.as_ref())),
        };
        if let Some(failure) = failure {
            fail(seed, &failure, sim.trace());
        }
        report.seeds += 1;
        report.steps += sim.steps();
        report.crashes += sim.crashes();
    }
    report
}

fn replay_seed() -> Option<u64> {
    std::env::var(REPLAY_SEED_ENV).ok()?.trim().parse().ok()
}

fn fail(seed: u64, failure: &str, trace: &[String]) -> ! {
    let tail = &trace[trace.len().saturating_sub(FAILURE_TRACE_LINES)..];
    panic!(
        "seed {seed} failed: {failure}\n\
         the end of its trace ({} lines in all):\n  {}\n\
         replay just this seed with {REPLAY_SEED_ENV}={seed} and the same test command",
        trace.len(),
        tail.join("\n  "),
    );
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|text| text.to_string()))
        .unwrap_or_else(|| "the scenario panicked".to_string())
}
