//! A durable counter: `{"Add": n}` adds `n` and replies with the new value, `"Get"` replies with
//! the value, `"Reset"` sets it to 0 and replies 0. Values are `i64`; an `Add` that would
//! overflow is rejected. The value lives in durable state under the key `"value"`.

use tessera_sdk::prelude::*;

/// The state key holding the value (an `i64`; absent means 0).
pub const VALUE_KEY: &str = "value";

/// The in-memory copy of the counter, rebuilt from state on activation.
pub struct Counter {
    value: i64,
}

/// What the counter understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Add `n` (may be negative); replies with the new value.
    Add(i64),
    /// Replies with the value.
    Get,
    /// Sets the value to 0; replies 0.
    Reset,
}

impl Entity for Counter {
    type Msg = Msg;
    type Reply = i64;

    fn activate(ctx: &mut Ctx, _: Activation) -> Self {
        Counter {
            value: ctx.get(VALUE_KEY).unwrap_or(0),
        }
    }

    fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<i64, Error> {
        match msg {
            Msg::Get => {}
            Msg::Add(n) => {
                let value = self.value.checked_add(n).ok_or_else(|| {
                    Error::rejected(format!("{} + {n} overflows an i64", self.value))
                })?;
                ctx.put(VALUE_KEY, &value);
                self.value = value;
            }
            Msg::Reset => {
                ctx.delete(VALUE_KEY);
                self.value = 0;
            }
        }
        Ok(self.value)
    }
}

export_entity!(Counter);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    fn counter() -> Harness<Counter> {
        Harness::new(Address::new("counter", "c-1"))
    }

    #[test]
    fn add_get_reset() {
        let mut counter = counter();
        assert_eq!(counter.send(&Msg::Add(5)), Ok(5));
        assert_eq!(counter.send(&Msg::Add(-2)), Ok(3));
        assert_eq!(counter.send("Get"), Ok(3));
        assert_eq!(counter.state::<i64>(VALUE_KEY), Some(3));
        assert_eq!(counter.send("Reset"), Ok(0));
        assert_eq!(counter.state::<i64>(VALUE_KEY), None);
        assert_eq!(counter.send("Get"), Ok(0));
    }

    #[test]
    fn value_survives_restart() {
        let mut counter = counter();
        counter.send(&Msg::Add(41)).unwrap();
        counter.restart();
        assert_eq!(counter.send(&Msg::Add(1)), Ok(42));
    }

    #[test]
    fn overflow_is_rejected_and_state_unchanged() {
        let mut counter = counter();
        counter.send(&Msg::Add(i64::MAX)).unwrap();
        assert!(matches!(
            counter.send(&Msg::Add(1)),
            Err(Error::Rejected(_))
        ));
        assert_eq!(counter.state::<i64>(VALUE_KEY), Some(i64::MAX));
    }

    #[test]
    fn unknown_message_is_a_bad_message() {
        let mut counter = counter();
        assert!(matches!(counter.send("Explode"), Err(Error::BadMessage(_))));
    }
}
