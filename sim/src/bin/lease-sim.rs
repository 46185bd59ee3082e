//! Runs many seeds of the lease simulation on a few threads and prints the failing seeds and a
//! summary. Usage: `lease-sim --seeds N [--from K] [--canary NAME] [--threads T]`. Without a
//! canary every seed must pass (exit status 1 otherwise); with one, the run reports how many
//! seeds the checker caught it in (exit status 1 if none).

use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tessera_sim::lease::{Canary, SeedReport, SimOptions, Violation, run_seed};

/// Failing seeds printed in full; the rest are only counted.
const FAILURES_PRINTED_MAX: usize = 20;

/// Threads the seeds are spread over at most.
const THREADS_MAX: usize = 16;

/// What the command line asked for.
struct Arguments {
    seeds: u64,
    from: u64,
    canary: Option<Canary>,
    threads: usize,
}

fn parse(mut words: impl Iterator<Item = String>) -> Result<Arguments, String> {
    let mut arguments = Arguments {
        seeds: 100,
        from: 0,
        canary: None,
        threads: 2,
    };
    while let Some(flag) = words.next() {
        let value = words
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag}: `{value}` is not a number"))
        };
        match flag.as_str() {
            "--seeds" => arguments.seeds = number()?,
            "--from" => arguments.from = number()?,
            "--threads" => arguments.threads = (number()? as usize).clamp(1, THREADS_MAX),
            "--canary" => {
                let names: Vec<_> = Canary::ALL.iter().map(|canary| canary.name()).collect();
                let canary = Canary::from_name(&value).ok_or_else(|| {
                    format!("unknown canary `{value}`; known: {}", names.join(", "))
                })?;
                arguments.canary = Some(canary);
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(arguments)
}

/// Runs the seeds, each thread taking the next seed not yet taken.
fn run_all(arguments: &Arguments) -> (SeedReport, Vec<Violation>) {
    let options = SimOptions {
        canary: arguments.canary,
        ..SimOptions::default()
    };
    let next = AtomicU64::new(arguments.from);
    let end = arguments.from.saturating_add(arguments.seeds);
    let totals = Mutex::new(SeedReport::default());
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..arguments.threads {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end {
                        break;
                    }
                    match run_seed(seed, &options) {
                        Ok(report) => totals
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .add(&report),
                        Err(violation) => failures
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(violation),
                    }
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    failures.sort_by_key(|violation| violation.seed);
    (
        totals.into_inner().unwrap_or_else(|p| p.into_inner()),
        failures,
    )
}

fn main() -> ExitCode {
    let arguments = match parse(std::env::args().skip(1)) {
        Ok(arguments) => arguments,
        Err(reason) => {
            eprintln!(
                "{reason}\nusage: lease-sim --seeds N [--from K] [--canary NAME] [--threads T]"
            );
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let (totals, failures) = run_all(&arguments);
    let elapsed = started.elapsed();
    for violation in failures.iter().take(FAILURES_PRINTED_MAX) {
        println!("FAIL {violation}");
    }
    if failures.len() > FAILURES_PRINTED_MAX {
        println!("... and {} more", failures.len() - FAILURES_PRINTED_MAX);
    }
    let safety = failures
        .iter()
        .filter(|violation| violation.is_safety())
        .count();
    let passed = arguments.seeds - failures.len() as u64;
    println!(
        "seeds {}..{}: {passed} passed, {} failed ({safety} safety, {} liveness) in {:.1} s",
        arguments.from,
        arguments.from + arguments.seeds,
        failures.len(),
        failures.len() - safety,
        elapsed.as_secs_f64()
    );
    println!("passing seeds together: {totals:?}");
    match arguments.canary {
        Some(canary) => {
            println!(
                "canary {}: caught (safety violation) in {safety} of {} seeds",
                canary.name(),
                arguments.seeds
            );
            if safety > 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        None if failures.is_empty() => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    }
}
