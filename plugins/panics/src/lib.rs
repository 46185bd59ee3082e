//! A test entity for write discarding: `"Panic"` writes the state key `"touched"` and then
//! panics (a trap, so the host must discard the write); `"Touched"` replies whether `"touched"`
//! is in durable state (`false` unless the write leaked); `"Ping"` replies `"Pong"`.
//!
//! The panic message (`panics: deliberate panic after a put`) goes to stderr.

use tessera_sdk::prelude::*;

/// The state key `Panic` writes before it panics.
pub const TOUCHED_KEY: &str = "touched";

/// The panicker; it keeps nothing.
pub struct Panics;

/// What the panicker understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Puts `"touched"`, then panics.
    Panic,
    /// Replies whether `"touched"` is in durable state.
    Touched,
    /// Replies `"Pong"`.
    Ping,
}

/// The reply: a string to `Ping`, a bool to `Touched`.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// To `Ping`.
    Pong(String),
    /// To `Touched`.
    Touched(bool),
}

impl Entity for Panics {
    type Msg = Msg;
    type Reply = Reply;

    fn activate(_: &mut Ctx, _: Activation) -> Self {
        Panics
    }

    fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<Reply, Error> {
        match msg {
            Msg::Panic => {
                ctx.put(TOUCHED_KEY, &true);
                panic!("panics: deliberate panic after a put");
            }
            Msg::Touched => Ok(Reply::Touched(ctx.get_bytes(TOUCHED_KEY).is_some())),
            Msg::Ping => Ok(Reply::Pong("Pong".to_string())),
        }
    }
}

export_entity!(Panics);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    #[test]
    fn a_panic_fails_the_message_and_discards_its_write() {
        let mut panics = Harness::<Panics>::new(Address::new("panics", "p"));
        assert!(matches!(panics.send("Panic"), Err(Error::Failed(_))));
        assert_eq!(panics.state_bytes(TOUCHED_KEY), None);
        assert_eq!(panics.send("Touched"), Ok(Reply::Touched(false)));
        assert_eq!(panics.send("Ping"), Ok(Reply::Pong("Pong".to_string())));
    }
}
