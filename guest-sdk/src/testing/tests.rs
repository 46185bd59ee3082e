//! Unit tests of the native harness and its fake host, from the entity's side: per-message
//! atomicity, activation reasons, panics as traps, ask scripts, timers, the clock and the
//! host's trap rules in `deactivate`. They share the two test entities below: the STYLE.md
//! `Counter` and a `Probe` that misbehaves on request.

use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use super::{Harness, START_MS, TestHost};
use crate::runtime::handle_bytes;
use crate::{Activation, Address, Ctx, Entity, Error};

/// The STYLE.md counter, verbatim.
#[derive(Default)]
struct Counter {
    value: i64,
}

#[derive(Serialize, Deserialize)]
enum Msg {
    Add(i64),
    Get,
}

impl Entity for Counter {
    type Msg = Msg;
    type Reply = i64;
    fn activate(ctx: &mut Ctx, _: Activation) -> Self {
        Counter {
            value: ctx.get("value").unwrap_or(0),
        }
    }
    fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<i64, Error> {
        if let Msg::Add(n) = msg {
            self.value += n;
            ctx.put("value", &self.value);
        }
        Ok(self.value)
    }
}

#[test]
fn counter_counts_and_rebuilds_from_state() {
    let mut counter = Harness::<Counter>::new(Address::new("counter", "c-1"));
    assert_eq!(counter.send(&Msg::Add(2)), Ok(2));
    assert_eq!(counter.send(&Msg::Add(3)), Ok(5));
    assert_eq!(counter.send(&Msg::Get), Ok(5));
    assert_eq!(counter.state::<i64>("value"), Some(5));
    counter.restart();
    assert_eq!(counter.entity().map(|c| c.value), Some(5));
    assert_eq!(counter.send_bytes(b"\xa3Get"), Ok(vec![5]));
}

/// Records what the host did to it, and misbehaves on request.
struct Probe {
    activations: Vec<Activation>,
    handled: u32,
}

#[derive(Serialize, Deserialize)]
enum ProbeMsg {
    Write(String),
    WriteThenFail(String),
    WriteThenPanic,
    ReadOwnWrite,
    PutUnencodable,
    Passivate,
    Handled,
}

struct Unencodable;

impl Serialize for Unencodable {
    fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("refuses to encode"))
    }
}

impl Entity for Probe {
    type Msg = ProbeMsg;
    type Reply = String;
    fn activate(_: &mut Ctx, reason: Activation) -> Self {
        Probe {
            activations: vec![reason],
            handled: 0,
        }
    }
    fn handle(&mut self, ctx: &mut Ctx, msg: ProbeMsg) -> Result<String, Error> {
        self.handled += 1;
        match msg {
            ProbeMsg::Write(value) => ctx.put("key", &value),
            ProbeMsg::WriteThenFail(value) => {
                ctx.put("key", &value);
                return Err(Error::rejected("no"));
            }
            ProbeMsg::WriteThenPanic => {
                ctx.put("key", "panicked");
                panic!("probe panic");
            }
            ProbeMsg::ReadOwnWrite => {
                ctx.put("key", "mine");
                return Ok(ctx.get("key").unwrap_or_default());
            }
            ProbeMsg::PutUnencodable => ctx.put("key", &Unencodable),
            ProbeMsg::Passivate => ctx.passivate(),
            ProbeMsg::Handled => return Ok(self.handled.to_string()),
        }
        Ok("ok".to_string())
    }
}

fn probe() -> Harness<Probe> {
    Harness::new(Address::new("probe", "p-1"))
}

/// A stored value that no longer decodes is never read as "absent": the counter does not
/// restart from 0 and its next `put` cannot overwrite the stored value.
#[test]
fn state_that_no_longer_decodes_fails_the_message_and_keeps_the_value() {
    let mut counter = Harness::<Counter>::new(Address::new("counter", "c-1"));
    counter.set_state("value", &"forty-one");
    let error = counter.send(&Msg::Add(1)).unwrap_err();
    assert!(
        matches!(&error, Error::Failed(message) if message.contains("\"value\" did not decode")),
        "{error:?}"
    );
    assert!(counter.entity().is_none(), "the activation did not happen");
    assert_eq!(counter.state::<String>("value"), Some("forty-one".into()));
}

#[test]
fn first_message_activates_with_first_start_or_restarted() {
    let mut fresh = probe();
    fresh.send(&ProbeMsg::Handled).unwrap();
    assert_eq!(
        fresh.entity().unwrap().activations,
        vec![Activation::FirstStart]
    );

    let host = TestHost::new(Address::new("probe", "p-2"));
    host.set_state("key", "old");
    let mut seeded = Harness::<Probe>::with_host(host);
    seeded.send(&ProbeMsg::Handled).unwrap();
    assert_eq!(
        seeded.entity().unwrap().activations,
        vec![Activation::Restarted]
    );
}

#[test]
fn handle_without_activate_activates_restarted() {
    let host = TestHost::new(Address::new("probe", "p-1"));
    let mut entity: Option<Probe> = None;
    let reply = handle_bytes(&mut entity, &mut host.ctx(), b"\xa7Handled");
    assert_eq!(reply, Ok(b"\xa11".to_vec()));
    assert_eq!(entity.unwrap().activations, vec![Activation::Restarted]);
}

#[test]
fn writes_commit_on_ok_and_are_discarded_on_err() {
    let mut probe = probe();
    probe.send(&ProbeMsg::Write("one".into())).unwrap();
    assert_eq!(probe.state::<String>("key"), Some("one".into()));
    assert_eq!(
        probe.send(&ProbeMsg::WriteThenFail("two".into())),
        Err(Error::rejected("no"))
    );
    assert_eq!(probe.state::<String>("key"), Some("one".into()));
}

#[test]
fn reads_see_the_message_own_writes() {
    let mut probe = probe();
    assert_eq!(probe.send(&ProbeMsg::ReadOwnWrite), Ok("mine".into()));
}

#[test]
fn a_bad_message_is_answered_without_calling_handle() {
    let mut probe = probe();
    assert!(matches!(
        probe.send("NoSuchMessage"),
        Err(Error::BadMessage(_))
    ));
    assert!(matches!(
        probe.send_bytes(b"\xc1"),
        Err(Error::BadMessage(_))
    ));
    assert_eq!(probe.send(&ProbeMsg::Handled), Ok("1".into()));
}

#[test]
fn a_panic_is_a_trap_that_discards_writes_and_the_instance() {
    let mut probe = probe();
    probe.send(&ProbeMsg::Write("kept".into())).unwrap();
    let failed = probe.send(&ProbeMsg::WriteThenPanic);
    assert_eq!(failed, Err(Error::failed("entity panicked: probe panic")));
    assert_eq!(probe.state::<String>("key"), Some("kept".into()));
    assert!(probe.entity().is_none());
    assert_eq!(probe.send(&ProbeMsg::Handled), Ok("1".into()));
    assert_eq!(
        probe.entity().unwrap().activations,
        vec![Activation::Restarted]
    );
}

#[test]
fn an_unencodable_put_fails_the_message() {
    let mut probe = probe();
    probe.send(&ProbeMsg::Write("kept".into())).unwrap();
    assert!(matches!(
        probe.send(&ProbeMsg::PutUnencodable),
        Err(Error::Failed(_))
    ));
    assert_eq!(probe.state::<String>("key"), Some("kept".into()));
}

#[test]
fn passivation_is_flagged_until_the_next_activation() {
    let mut probe = probe();
    probe.send(&ProbeMsg::Passivate).unwrap();
    assert!(probe.passivation_requested());
    probe.restart();
    assert!(!probe.passivation_requested());
}

#[test]
fn asks_are_scripted_per_address_and_recorded() {
    let host = TestHost::new(Address::new("a", "1"));
    let b = Address::new("b", "2");
    let mut calls = 0;
    host.on_ask(b.clone(), move |n: u32| {
        calls += 1;
        Ok(n * 10 + calls)
    });
    let ask = |n: u32| host.with_ctx(|ctx| ctx.ask::<_, u32>(&b, &n, Duration::from_millis(100)));
    assert_eq!(ask(1), Ok(11));
    assert_eq!(ask(2), Ok(22));
    let unscripted: Result<u32, Error> =
        host.with_ctx(|ctx| ctx.ask(&Address::new("c", "3"), &1u32, Duration::from_secs(1)));
    assert!(matches!(unscripted, Err(Error::Failed(_))));
    let to_self: Result<u32, Error> =
        host.with_ctx(|ctx| ctx.ask(&Address::new("a", "1"), &1u32, Duration::ZERO));
    assert!(matches!(to_self, Err(Error::Failed(_))));
    assert_eq!(host.asks().len(), 4);
    assert_eq!(host.asks()[1].reply, Ok(vec![22]));
}

#[test]
fn an_undecodable_ask_reply_is_failed() {
    let host = TestHost::new(Address::new("a", "1"));
    let b = Address::new("b", "2");
    host.on_ask(b.clone(), |_: u32| Ok("text"));
    let reply: Result<u32, Error> = host.with_ctx(|ctx| ctx.ask(&b, &1u32, Duration::from_secs(1)));
    assert!(matches!(reply, Err(Error::Failed(_))));
}

#[test]
fn timers_fire_in_due_order_and_cancelled_ones_do_not() {
    let host = TestHost::new(Address::new("counter", "c-1"));
    host.set_now_ms(0);
    let mut counter = Harness::<Counter>::with_host(host);
    counter.send(&Msg::Get).unwrap();
    let cancelled = counter.with_ctx(|ctx| {
        ctx.schedule(Duration::from_millis(30), &Msg::Add(100));
        ctx.schedule(Duration::from_millis(10), &Msg::Add(1));
        ctx.schedule(Duration::from_millis(20), &Msg::Add(1000))
    });
    counter.with_ctx(|ctx| ctx.cancel(cancelled));
    counter.advance(Duration::from_millis(15));
    assert_eq!(counter.fire_due(), vec![Ok(1)]);
    counter.set_now_ms(30);
    assert_eq!(counter.fire_due(), vec![Ok(101)]);
    assert!(counter.fire_due().is_empty());
    let timers = counter.schedules();
    assert_eq!(timers.iter().filter(|t| t.fired).count(), 2);
    assert!(timers[2].cancelled && !timers[2].fired);
}

#[test]
fn timers_outlive_deactivation_and_fire_into_a_new_instance() {
    struct Leaves;
    impl Entity for Leaves {
        type Msg = ();
        type Reply = ();
        fn activate(_: &mut Ctx, _: Activation) -> Self {
            Leaves
        }
        fn handle(&mut self, ctx: &mut Ctx, _: ()) -> Result<(), Error> {
            ctx.schedule(Duration::from_secs(1), &());
            Ok(())
        }
    }
    let mut leaves = Harness::<Leaves>::new(Address::new("leaves", "l"));
    leaves.send(&()).unwrap();
    leaves.deactivate();
    assert!(!leaves.schedules()[0].cancelled, "the host keeps reminders");
    leaves.advance(Duration::from_secs(1));
    assert_eq!(leaves.fire_due(), vec![Ok(())]);
    assert!(leaves.schedules()[0].fired);
    assert!(
        leaves.entity().is_some(),
        "the firing activated a new instance"
    );
}

#[test]
#[should_panic(expected = "only allowed while handling a message, not in deactivate")]
fn writes_in_deactivate_are_refused_as_the_host_refuses_them() {
    struct Late;
    impl Entity for Late {
        type Msg = ();
        type Reply = ();
        fn activate(_: &mut Ctx, _: Activation) -> Self {
            Late
        }
        fn handle(&mut self, _: &mut Ctx, _: ()) -> Result<(), Error> {
            Ok(())
        }
        fn deactivate(&mut self, ctx: &mut Ctx) {
            ctx.put("late", &1u8);
        }
    }
    let mut late = Harness::<Late>::new(Address::new("late", "l"));
    late.send(&()).unwrap();
    late.deactivate();
}

#[test]
fn the_clock_is_controlled_by_the_test() {
    let host = TestHost::new(Address::new("a", "1"));
    assert_eq!(host.with_ctx(|ctx| ctx.now_ms()), START_MS);
    host.advance(Duration::from_secs(2));
    assert_eq!(host.with_ctx(|ctx| ctx.now_ms()), START_MS + 2_000);
}

#[test]
fn deletes_are_atomic_too() {
    let host = TestHost::new(Address::new("a", "1"));
    host.set_state("k", &1u8);
    host.with_ctx(|ctx| {
        ctx.delete("k");
        assert_eq!(ctx.get_bytes("k"), None);
    });
    assert_eq!(host.state_bytes("k"), None);
}
