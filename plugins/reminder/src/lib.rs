//! Durable reminders. The entity schedules a message to itself and records, in
//! durable state, every reminder that fired.
//!
//! - `{"Remind": {"delay_ms": n, "note": "..."}}` schedules `{"Fire": {"note": "...", "due_ms": t}}`
//!   to itself after `n` ms; replies `{"timer": <u64>, "due_ms": <u64>}`.
//! - `{"Fire": {"note": "...", "due_ms": t}}` (normally sent by the timer) records the note;
//!   replies like `"Fired"`.
//! - `{"Cancel": timer}` cancels a reminder (durably); replies like `"Fired"`.
//! - `"Fired"` replies `{"count": <u64>, "notes": ["...", ...]}`: how many fired in total and
//!   the last [`NOTES_KEPT`] notes, oldest first.
//!
//! Reminders are durable: one scheduled before a passivation, an upgrade or a host restart still
//! fires (activating the entity) and is recorded exactly once. The record lives under the key
//! `"fired"`.

use tessera_sdk::prelude::*;

/// The state key holding the [`FiredLog`].
pub const FIRED_KEY: &str = "fired";

/// How many fired notes the log keeps; older ones are dropped (the count keeps growing).
pub const NOTES_KEPT: usize = 100;

/// What fired so far.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FiredLog {
    /// How many reminders fired in total.
    pub count: u64,
    /// The last [`NOTES_KEPT`] notes, oldest first.
    pub notes: Vec<String>,
}

/// What a reminder understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Schedules a reminder.
    Remind {
        /// Delay before it fires.
        delay_ms: u64,
        /// What to record when it fires.
        note: String,
    },
    /// A reminder firing (sent by the timer).
    Fire {
        /// The note to record.
        note: String,
        /// When it was due, in ms since the Unix epoch.
        due_ms: u64,
    },
    /// Cancels the reminder with this timer id; replies like `"Fired"`.
    Cancel(u64),
    /// Replies with the [`FiredLog`].
    Fired,
}

/// The reply to every message.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// To `Remind`: the timer and when it is due.
    Scheduled {
        /// The host's timer id.
        timer: u64,
        /// When it is due, in ms since the Unix epoch.
        due_ms: u64,
    },
    /// To `Fire` and `Fired`: what fired so far.
    Fired(FiredLog),
}

/// The in-memory copy of the fired log.
pub struct Reminder {
    fired: FiredLog,
}

impl Entity for Reminder {
    type Msg = Msg;
    type Reply = Reply;

    fn activate(ctx: &mut Ctx, _: Activation) -> Self {
        Reminder {
            fired: ctx.get(FIRED_KEY).unwrap_or_default(),
        }
    }

    fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<Reply, Error> {
        match msg {
            Msg::Remind { delay_ms, note } => {
                let due_ms = ctx.now_ms().saturating_add(delay_ms);
                let timer =
                    ctx.schedule(Duration::from_millis(delay_ms), &Msg::Fire { note, due_ms });
                Ok(Reply::Scheduled {
                    timer: timer.as_raw(),
                    due_ms,
                })
            }
            Msg::Fire { note, due_ms } => {
                ctx.info(format_args!("reminder due at {due_ms} fired: {note}"));
                let mut fired = self.fired.clone();
                fired.count += 1;
                fired.notes.push(note);
                let excess = fired.notes.len().saturating_sub(NOTES_KEPT);
                fired.notes.drain(..excess);
                ctx.put(FIRED_KEY, &fired);
                self.fired = fired;
                Ok(Reply::Fired(self.fired.clone()))
            }
            Msg::Cancel(timer) => {
                ctx.cancel(TimerId::from_raw(timer));
                Ok(Reply::Fired(self.fired.clone()))
            }
            Msg::Fired => Ok(Reply::Fired(self.fired.clone())),
        }
    }
}

export_entity!(Reminder);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    fn remind(delay_ms: u64, note: &str) -> Msg {
        Msg::Remind {
            delay_ms,
            note: note.to_string(),
        }
    }

    #[test]
    fn remind_schedules_a_fire_to_itself() {
        let mut reminder = Harness::<Reminder>::new(Address::new("reminder", "r-1"));
        let now = reminder.now_ms();
        let reply = reminder.send(&remind(1_500, "tea")).unwrap();
        let timers = reminder.schedules();
        assert_eq!(timers.len(), 1);
        assert_eq!(timers[0].delay, Duration::from_millis(1_500));
        assert!(matches!(
            timers[0].decode::<Msg>(),
            Ok(Msg::Fire { ref note, due_ms }) if note == "tea" && due_ms == now + 1_500
        ));
        assert_eq!(
            reply,
            Reply::Scheduled {
                timer: timers[0].id.as_raw(),
                due_ms: now + 1_500
            }
        );
    }

    #[test]
    fn cancel_cancels_the_timer() {
        let mut reminder = Harness::<Reminder>::new(Address::new("reminder", "r-1"));
        let Ok(Reply::Scheduled { timer, .. }) = reminder.send(&remind(1_000, "tea")) else {
            panic!("not scheduled");
        };
        reminder.send(&Msg::Cancel(timer)).unwrap();
        assert!(reminder.schedules()[0].cancelled);
        reminder.advance(Duration::from_millis(2_000));
        assert!(reminder.fire_due().is_empty());
    }

    #[test]
    fn fired_reminders_are_recorded_in_order() {
        let mut reminder = Harness::<Reminder>::new(Address::new("reminder", "r-1"));
        reminder.send(&remind(2_000, "second")).unwrap();
        reminder.send(&remind(1_000, "first")).unwrap();
        reminder.advance(Duration::from_millis(999));
        assert!(reminder.fire_due().is_empty());
        reminder.advance(Duration::from_millis(1_001));
        assert_eq!(reminder.fire_due().len(), 2);
        let expected = FiredLog {
            count: 2,
            notes: vec!["first".into(), "second".into()],
        };
        assert_eq!(reminder.send("Fired"), Ok(Reply::Fired(expected.clone())));
        assert_eq!(reminder.state::<FiredLog>(FIRED_KEY), Some(expected));
    }

    #[test]
    fn the_log_keeps_the_last_notes() {
        let mut reminder = Harness::<Reminder>::new(Address::new("reminder", "r-1"));
        for i in 0..NOTES_KEPT + 5 {
            reminder
                .send(&Msg::Fire {
                    note: i.to_string(),
                    due_ms: 0,
                })
                .unwrap();
        }
        let Ok(Reply::Fired(log)) = reminder.send("Fired") else {
            panic!("Fired replies with the log")
        };
        assert_eq!(log.count, (NOTES_KEPT + 5) as u64);
        assert_eq!(log.notes.len(), NOTES_KEPT);
        assert_eq!(log.notes[0], "5");
    }

    #[test]
    fn pending_reminders_survive_passivation() {
        let mut reminder = Harness::<Reminder>::new(Address::new("reminder", "r-1"));
        reminder.send(&remind(10, "kept")).unwrap();
        reminder.deactivate();
        reminder.advance(Duration::from_secs(1));
        assert_eq!(reminder.fire_due().len(), 1);
        assert!(!reminder.schedules()[0].cancelled);
        let Ok(Reply::Fired(log)) = reminder.send("Fired") else {
            panic!("Fired replies with the log")
        };
        assert_eq!(log.notes, vec!["kept".to_string()]);
    }
}
