//! A test fixture for the host imports no other plugin uses: `{"TellAdd": {"entity_type":
//! "counter", "id": "c1", "amount": 3}}` tells that counter `{"Add": 3}` (one-way, sent once
//! this message commits) and replies with how many tells it has sent; `"Sleep"` asks the host
//! to passivate it after the reply; `"Sent"` replies with the number of tells sent so far;
//! `{"Bounce": {"path": ["r2", "r1"]}}` asks along a path of relays (a deadlock fixture);
//! `{"Flood": {"entity_type": "counter", "count": n, "bytes": k}}` fans out `n` tells of `k`
//! bytes (an effect-bounds fixture).

use tessera_sdk::prelude::*;

/// The state key counting tells sent.
pub const SENT_KEY: &str = "sent";

/// How long a bounce waits for the next relay: long, so a test sees a deadlock reported at
/// once rather than a timeout.
pub const BOUNCE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a relay understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Tell entity `id` of `entity_type` (a counter) to add `amount`.
    TellAdd {
        /// The target's type.
        entity_type: String,
        /// The target's id.
        id: String,
        /// What to add.
        amount: i64,
    },
    /// Ask the relay `path[0]` to bounce the rest of the path, and reply with its reply; an
    /// empty path replies with the tells sent. `{"Bounce": {"path": ["r2", "r1"]}}` sent to
    /// `r1` makes `r1` ask `r2`, which asks `r1` back: a deadlock the host reports at once.
    Bounce {
        /// Relay ids to ask in turn.
        path: Vec<String>,
    },
    /// Tell `count` entities `flood-<i>` of `entity_type` a payload of `bytes` bytes each (a
    /// fan-out fixture for the host's effect bounds); replies with the tells sent.
    Flood {
        /// The targets' type.
        entity_type: String,
        /// How many tells.
        count: u32,
        /// Payload bytes per tell.
        bytes: u32,
    },
    /// Tell entity `id` of `entity_type` (a `reminder`) one `{"Fire": {"note": n, "due_ms": 0}}`
    /// per note, in order (an ordering fixture); replies with the tells sent.
    TellNotes {
        /// The target's type.
        entity_type: String,
        /// The target's id.
        id: String,
        /// The notes, in the order to send them.
        notes: Vec<String>,
    },
    /// Passivate after this message.
    Sleep,
    /// How many tells were sent.
    Sent,
}

/// The reminder's firing message, as the reminder plugin decodes it.
#[derive(Serialize)]
enum ReminderMsg {
    Fire { note: String, due_ms: u64 },
}

/// The counter's message, as the counter plugin decodes it.
#[derive(Serialize)]
enum CounterMsg {
    Add(i64),
}

/// Counts the tells it sent.
pub struct Relay {
    sent: u64,
}

impl Entity for Relay {
    type Msg = Msg;
    type Reply = u64;

    fn activate(ctx: &mut Ctx, _: Activation) -> Self {
        Relay {
            sent: ctx.get(SENT_KEY).unwrap_or(0),
        }
    }

    fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<u64, Error> {
        match msg {
            Msg::TellAdd {
                entity_type,
                id,
                amount,
            } => {
                ctx.tell(&Address::new(entity_type, id), &CounterMsg::Add(amount))?;
                self.sent += 1;
                ctx.put(SENT_KEY, &self.sent);
            }
            Msg::Bounce { mut path } => {
                if path.is_empty() {
                    return Ok(self.sent);
                }
                let next = path.remove(0);
                let me = ctx.self_address();
                let target = Address::new(me.entity_type, next);
                return ctx.ask(&target, &Msg::Bounce { path }, BOUNCE_TIMEOUT);
            }
            Msg::Flood {
                entity_type,
                count,
                bytes,
            } => {
                let payload = vec![0xc0; bytes as usize];
                for index in 0..count {
                    let target = Address::new(entity_type.clone(), format!("flood-{index}"));
                    ctx.tell_bytes(&target, &payload)?;
                }
                self.sent += u64::from(count);
                ctx.put(SENT_KEY, &self.sent);
            }
            Msg::TellNotes {
                entity_type,
                id,
                notes,
            } => {
                let target = Address::new(entity_type, id);
                for note in notes {
                    ctx.tell(&target, &ReminderMsg::Fire { note, due_ms: 0 })?;
                    self.sent += 1;
                }
                ctx.put(SENT_KEY, &self.sent);
            }
            Msg::Sleep => ctx.passivate(),
            Msg::Sent => {}
        }
        Ok(self.sent)
    }
}

export_entity!(Relay);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    #[test]
    fn tells_the_counter_and_counts() {
        let mut harness = Harness::<Relay>::new(Address::new("relay", "r1"));
        let msg = Msg::TellAdd {
            entity_type: "counter".into(),
            id: "c1".into(),
            amount: 3,
        };
        assert_eq!(harness.send(&msg).unwrap(), 1);
        assert_eq!(harness.tells().len(), 1);
        harness.send(&Msg::Sleep).unwrap();
        assert!(harness.passivation_requested());
    }

    #[test]
    fn bounce_asks_the_next_relay_on_the_path() {
        let mut harness = Harness::<Relay>::new(Address::new("relay", "r1"));
        harness.on_ask(Address::new("relay", "r2"), |msg: Msg| match msg {
            Msg::Bounce { path } if path == ["r3"] => Ok(7u64),
            other => Err(Error::bad_message(format!("unexpected {other:?}"))),
        });
        let bounce = Msg::Bounce {
            path: vec!["r2".into(), "r3".into()],
        };
        assert_eq!(harness.send(&bounce), Ok(7));
        assert_eq!(harness.asks()[0].timeout, BOUNCE_TIMEOUT);
    }
}
