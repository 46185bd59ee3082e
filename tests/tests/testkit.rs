//! The testkit (`tessera-testkit`) seen from an author's side: several built components under
//! the deterministic simulation — money conserved by the bank-account example over 1,000 seeds
//! with crashes, duplicates and delays; a seed that replays to the same trace; a crash between
//! a commit and its delivery that loses no tell and runs none twice; reminders that fire when
//! virtual time reaches them, across crashes; entities that ask and tell each other.

use rand::Rng;
use serde_json::json;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tessera_contract::ErrorKind;
use tessera_testkit::{Faults, Sim, SimError, Testkit, check};

const ACCOUNTS: &str = "accounts";
const ACCOUNT_COUNT: usize = 4;

/// One engine and one compile of each component for the whole test binary.
fn kit() -> Testkit {
    static KIT: OnceLock<Testkit> = OnceLock::new();
    KIT.get_or_init(|| {
        let mut kit = Testkit::new().expect("the engine starts");
        kit.load(ACCOUNTS, tessera_tests::BANK_ACCOUNT)
            .expect("bank-account loads");
        kit.load("reminders", tessera_tests::REMINDER)
            .expect("reminder loads");
        kit.load("counter", tessera_tests::COUNTER)
            .expect("counter loads");
        kit.load("relays", tessera_tests::RELAY)
            .expect("relay loads");
        kit
    })
    .clone()
}

fn account(index: usize) -> String {
    format!("a{index}")
}

/// Whether a client message was refused by the entity itself (an overdraft): not a failure.
fn rejected(result: Result<(), SimError>) -> Result<(), SimError> {
    match result {
        Err(SimError::Message(error)) if error.kind == ErrorKind::Rejected => Ok(()),
        other => other,
    }
}

fn total_balance(sim: &Sim) -> Result<u64, SimError> {
    let mut total = 0;
    for index in 0..ACCOUNT_COUNT {
        total += sim
            .state::<u64>(ACCOUNTS, &account(index), "balance")?
            .unwrap_or(0);
    }
    Ok(total)
}

/// Deposits, then random transfers between accounts with scheduler steps (and their faults)
/// in between; returns the money deposited.
fn bank_workload(sim: &mut Sim) -> Result<u64, SimError> {
    let mut deposited = 0;
    for index in 0..ACCOUNT_COUNT {
        let amount = sim.rng().random_range(50..150_u64);
        sim.tell(ACCOUNTS, &account(index), &json!({ "Deposit": amount }))?;
        deposited += amount;
    }
    for _ in 0..12 {
        let from = sim.rng().random_range(0..ACCOUNT_COUNT);
        let to = (from + sim.rng().random_range(1..ACCOUNT_COUNT)) % ACCOUNT_COUNT;
        let amount = sim.rng().random_range(1..80_u64);
        let transfer = json!({ "Transfer": { "to": account(to), "amount": amount } });
        rejected(sim.tell(ACCOUNTS, &account(from), &transfer))?;
        for _ in 0..sim.rng().random_range(0..4) {
            sim.step()?;
        }
    }
    Ok(deposited)
}

#[test]
fn bank_account_conserves_money_over_1000_seeds_with_crashes() {
    let kit = kit();
    let started = Instant::now();
    let faults = Faults {
        crash_per_mille: 60,
        ..Faults::all()
    };
    let report = check(&kit, 0..1_000, faults, |sim| {
        let deposited = bank_workload(sim)?;
        sim.run_until_quiet(10_000)?;
        let total = total_balance(sim)?;
        if total != deposited {
            return Err(format!("{deposited} deposited but the accounts hold {total}").into());
        }
        let (outbox, _) = sim.pending()?;
        if outbox != 0 {
            return Err(format!("{outbox} tells left undelivered").into());
        }
        Ok(())
    });
    eprintln!(
        "{} seeds, {} steps, {} crashes in {:?}",
        report.seeds,
        report.steps,
        report.crashes,
        started.elapsed()
    );
    if std::env::var(tessera_testkit::REPLAY_SEED_ENV).is_err() {
        assert_eq!(report.seeds, 1_000);
        assert!(
            report.crashes >= 100,
            "the faults crashed the node only {} times over 1,000 seeds",
            report.crashes
        );
    }
}

#[test]
fn a_seed_replays_to_the_same_trace() {
    let kit = kit();
    let run = |seed| {
        let mut sim = kit.sim(seed, Faults::all()).expect("the simulation starts");
        bank_workload(&mut sim).expect("the workload runs");
        sim.run_until_quiet(10_000).expect("messaging settles");
        sim.trace().to_vec()
    };
    let first = run(7);
    assert!(
        first.iter().any(|line| line.starts_with("deliver")),
        "the run delivered tells: {first:#?}"
    );
    assert_eq!(first, run(7), "seed 7 replays step for step");
    assert_ne!(first, run(8), "another seed makes other choices");
}

#[test]
fn a_crash_between_commit_and_delivery_loses_no_tell_and_runs_none_twice() {
    let kit = kit();
    // No random faults: the crash and the duplicates are placed by hand.
    let mut sim = kit.sim(1, Faults::none()).expect("the simulation starts");
    sim.tell(ACCOUNTS, "alice", &json!({"Deposit": 100}))
        .unwrap();
    for amount in [10, 20, 30] {
        let transfer = json!({"Transfer": {"to": "bob", "amount": amount}});
        sim.tell(ACCOUNTS, "alice", &transfer).unwrap();
    }
    assert_eq!(
        sim.pending().unwrap().0,
        3,
        "three credits committed, not delivered"
    );
    sim.crash().unwrap();
    assert_eq!(sim.pending().unwrap().0, 3, "the outbox survives the crash");
    // Step until a credit was delivered (bob committed it) but not yet acknowledged, then
    // crash: alice's delivery must send it again, and bob must drop it.
    let delivered = |sim: &Sim| {
        let lines = sim.trace().iter();
        lines.filter(|line| line.starts_with("deliver")).count()
    };
    while !sim
        .trace()
        .last()
        .is_some_and(|line| line.starts_with("deliver"))
    {
        assert!(sim.step().unwrap(), "a credit is left to deliver");
    }
    let before_crash = delivered(&sim);
    sim.crash().unwrap();
    sim.run_until_quiet(1_000).unwrap();
    let delivered_again = delivered(&sim) - before_crash;
    assert!(
        delivered(&sim) > 3 && delivered_again >= 1,
        "a credit delivered before the crash went again after it: {:#?}",
        sim.trace()
    );
    assert_eq!(
        sim.state::<u64>(ACCOUNTS, "alice", "balance").unwrap(),
        Some(40)
    );
    assert_eq!(
        sim.state::<u64>(ACCOUNTS, "bob", "balance").unwrap(),
        Some(60),
        "each credit ran exactly once: {:#?}",
        sim.trace()
    );
    assert_eq!(sim.pending().unwrap().0, 0);
    let dropped = sim
        .stats()
        .unwrap()
        .duplicates_dropped
        .load(Ordering::Relaxed);
    assert!(dropped >= 1, "bob dropped the credit sent again");
}

#[test]
fn reminders_fire_when_virtual_time_reaches_them_across_crashes() {
    let kit = kit();
    check(&kit, 0..50, Faults::all(), |sim| {
        let remind = json!({"Remind": {"delay_ms": 60_000, "note": "later"}});
        sim.tell("reminders", "r", &remind)?;
        let soon = json!({"Remind": {"delay_ms": 1_000, "note": "soon"}});
        sim.tell("reminders", "r", &soon)?;
        sim.run_until_quiet(1_000)?;
        let fired: serde_json::Value = sim.ask("reminders", "r", &"Fired")?;
        if fired["count"] != 0 {
            return Err(format!("fired before its time: {fired}").into());
        }
        sim.crash()?;
        sim.advance(1_000);
        sim.run_until_quiet(1_000)?;
        let fired: serde_json::Value = sim.ask("reminders", "r", &"Fired")?;
        if fired["notes"] != json!(["soon"]) {
            return Err(format!("at 1 s only \"soon\" fires, once: {fired}").into());
        }
        sim.advance(59_000);
        sim.run_until_quiet(1_000)?;
        let fired: serde_json::Value = sim.ask("reminders", "r", &"Fired")?;
        if fired["notes"] != json!(["soon", "later"]) {
            return Err(format!("at 60 s both fired, once each: {fired}").into());
        }
        Ok(())
    });
}

#[test]
fn entities_ask_and_tell_each_other_under_the_simulation() {
    let kit = kit();
    check(&kit, 0..20, Faults::all(), |sim| {
        // r1 asks r2, which asks r3: a chain of asks inside one client message.
        let sent: u64 = sim.ask("relays", "r1", &json!({"Bounce": {"path": ["r2", "r3"]}}))?;
        if sent != 0 {
            return Err(format!("r3 had sent {sent} tells").into());
        }
        // A cycle of asks fails at once, as on the host.
        match sim.ask::<u64>("relays", "r1", &json!({"Bounce": {"path": ["r2", "r1"]}})) {
            Err(SimError::Message(error)) if error.kind == ErrorKind::Deadlock => {}
            other => return Err(format!("a cycle of asks answered {other:?}").into()),
        }
        for relay in ["r1", "r2", "r3"] {
            let add = json!({"TellAdd": {"entity_type": "counter", "id": "c", "amount": 2}});
            sim.tell("relays", relay, &add)?;
        }
        sim.run_until_quiet(1_000)?;
        let value: i64 = sim.ask("counter", "c", &"Get")?;
        if value != 6 {
            return Err(format!("three tells of 2 made the counter {value}").into());
        }
        Ok(())
    });
}
