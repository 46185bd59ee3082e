//! A test entity for guest output limits: `"Shout"` writes [`LINES_PER_STREAM`] lines to stdout
//! and as many to stderr, then replies with the total number of lines written (a `u64`);
//! `"Ping"` replies `"Pong"`. Write errors are ignored, so a host that drops output does not
//! fail the message.

use std::io::Write;

use tessera_sdk::prelude::*;

/// Lines `Shout` writes to each of stdout and stderr.
pub const LINES_PER_STREAM: u64 = 100_000;

/// The shouter; it keeps nothing.
pub struct Noisy;

/// What the shouter understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Floods stdout and stderr.
    Shout,
    /// Replies `"Pong"`.
    Ping,
}

/// The reply: the line count to `Shout`, a string to `Ping`.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// To `Shout`: lines written in total.
    Lines(u64),
    /// To `Ping`.
    Pong(String),
}

/// Writes `lines` numbered lines to `out` and to `err`; returns how many lines it wrote.
fn shout(out: &mut impl Write, err: &mut impl Write, lines: u64) -> u64 {
    for line in 0..lines {
        let _ = writeln!(out, "noisy: stdout line {line}");
        let _ = writeln!(err, "noisy: stderr line {line}");
    }
    let _ = out.flush();
    let _ = err.flush();
    lines * 2
}

impl Entity for Noisy {
    type Msg = Msg;
    type Reply = Reply;

    fn activate(_: &mut Ctx, _: Activation) -> Self {
        Noisy
    }

    fn handle(&mut self, _: &mut Ctx, msg: Msg) -> Result<Reply, Error> {
        match msg {
            Msg::Shout => {
                let lines = shout(
                    &mut std::io::stdout().lock(),
                    &mut std::io::stderr().lock(),
                    LINES_PER_STREAM,
                );
                Ok(Reply::Lines(lines))
            }
            Msg::Ping => Ok(Reply::Pong("Pong".to_string())),
        }
    }
}

export_entity!(Noisy);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    #[test]
    fn shout_writes_numbered_lines_to_both_streams() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(shout(&mut out, &mut err, 3), 6);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "noisy: stdout line 0\nnoisy: stdout line 1\nnoisy: stdout line 2\n"
        );
        assert_eq!(String::from_utf8(err).unwrap().lines().count(), 3);
    }

    #[test]
    fn ping_answers() {
        let mut noisy = Harness::<Noisy>::new(Address::new("noisy", "n"));
        assert_eq!(noisy.send("Ping"), Ok(Reply::Pong("Pong".to_string())));
    }
}
