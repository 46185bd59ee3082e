//! A test fixture for the host imports no other plugin uses: `{"TellAdd": {"entity_type":
//! "counter", "id": "c1", "amount": 3}}` tells that counter `{"Add": 3}` (one-way, sent once
//! this message commits) and replies with how many tells it has sent; `"Sleep"` asks the host
//! to passivate it after the reply; `"Sent"` replies with the number of tells sent so far.

use tessera_sdk::prelude::*;

/// The state key counting tells sent.
pub const SENT_KEY: &str = "sent";

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
    /// Passivate after this message.
    Sleep,
    /// How many tells were sent.
    Sent,
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
}
