//! The unit-test harness (`tessera_sdk::testing::Harness`, native) and the host (the real
//! runtime and entity layer, under the testkit's simulation) must agree on reminders, or an
//! author's unit tests pass on semantics the host does not have. The same entity source — the
//! `reminder` plugin's, compiled natively here and to wasm by `build.rs` — runs one scenario on
//! both: reminders scheduled, the entity deactivated, time moved past each due time. Each side
//! must give the expected notes, so a change on either side fails here.

#[path = "../../plugins/reminder/src/lib.rs"]
#[allow(dead_code)]
mod reminder;

use reminder::{FiredLog, Msg, Reply};
use std::time::Duration;
use tessera_sdk::Address;
use tessera_sdk::testing::Harness;
use tessera_testkit::{Faults, Testkit};

/// What fired after each stage: scheduled then deactivated, 1 s later, 5 s later.
type Stages = Vec<Vec<String>>;

fn remind(delay_ms: u64, note: &str) -> Msg {
    Msg::Remind {
        delay_ms,
        note: note.to_string(),
    }
}

fn on_the_harness() -> Stages {
    let mut entity = Harness::<reminder::Reminder>::new(Address::new("reminders", "r"));
    let notes = |entity: &mut Harness<reminder::Reminder>| match entity.send(&Msg::Fired) {
        Ok(Reply::Fired(FiredLog { notes, .. })) => notes,
        other => panic!("Fired answered {other:?}"),
    };
    entity.send(&remind(1_000, "soon")).unwrap();
    entity.send(&remind(5_000, "later")).unwrap();
    entity.deactivate();
    let mut stages = vec![notes(&mut entity)];
    entity.deactivate();
    entity.advance(Duration::from_millis(1_000));
    entity.fire_due();
    stages.push(notes(&mut entity));
    entity.deactivate();
    entity.advance(Duration::from_millis(4_000));
    entity.fire_due();
    stages.push(notes(&mut entity));
    stages
}

fn on_the_host() -> Stages {
    let mut kit = Testkit::new().expect("the engine starts");
    kit.load("reminders", tessera_tests::REMINDER)
        .expect("the reminder component loads");
    let mut sim = kit.sim(0, Faults::none()).expect("the simulation starts");
    let notes = |sim: &mut tessera_testkit::Sim| {
        let fired: serde_json::Value = sim.ask("reminders", "r", &Msg::Fired).unwrap();
        serde_json::from_value::<Vec<String>>(fired["notes"].clone()).unwrap()
    };
    sim.tell("reminders", "r", &remind(1_000, "soon")).unwrap();
    sim.tell("reminders", "r", &remind(5_000, "later")).unwrap();
    sim.passivate("reminders", "r").unwrap();
    sim.run_until_quiet(100).unwrap();
    let mut stages = vec![notes(&mut sim)];
    sim.passivate("reminders", "r").unwrap();
    sim.advance(1_000);
    sim.run_until_quiet(100).unwrap();
    stages.push(notes(&mut sim));
    sim.passivate("reminders", "r").unwrap();
    sim.advance(4_000);
    sim.run_until_quiet(100).unwrap();
    stages.push(notes(&mut sim));
    stages
}

#[test]
fn harness_and_host_keep_reminders_across_deactivation_alike() {
    let expected: Stages = vec![
        vec![],
        vec!["soon".to_string()],
        vec!["soon".to_string(), "later".to_string()],
    ];
    assert_eq!(
        on_the_host(),
        expected,
        "the host keeps and fires reminders"
    );
    assert_eq!(
        on_the_harness(),
        on_the_host(),
        "the harness drifted from the host"
    );
}
