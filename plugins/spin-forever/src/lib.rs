//! A test entity for the per-message CPU deadline and wall-clock bound: `"Spin"` never returns
//! (a busy loop), `{"Sleep": ms}` blocks in a WASI sleep, `"Ping"` replies `"Pong"`.

use tessera_sdk::prelude::*;

/// The spinner; it keeps nothing.
pub struct SpinForever;

/// What the spinner understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Loops forever, until the host's deadline interrupts the instance.
    Spin,
    /// Sleeps this many milliseconds (a blocking WASI call the CPU deadline does not see),
    /// then replies `"Awake"`.
    Sleep(u64),
    /// Replies `"Pong"`.
    Ping,
}

/// Busy-loops forever; `black_box` keeps the optimiser from proving the loop empty.
fn spin() -> ! {
    let mut turns: u64 = 0;
    loop {
        turns = std::hint::black_box(turns.wrapping_add(1));
    }
}

impl Entity for SpinForever {
    type Msg = Msg;
    type Reply = String;

    fn activate(_: &mut Ctx, _: Activation) -> Self {
        SpinForever
    }

    fn handle(&mut self, _: &mut Ctx, msg: Msg) -> Result<String, Error> {
        match msg {
            Msg::Spin => spin(),
            Msg::Sleep(ms) => {
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok("Awake".to_string())
            }
            Msg::Ping => Ok("Pong".to_string()),
        }
    }
}

export_entity!(SpinForever);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    #[test]
    fn ping_answers() {
        let mut spinner = Harness::<SpinForever>::new(Address::new("spin-forever", "s"));
        assert_eq!(spinner.send("Ping"), Ok("Pong".to_string()));
    }
}
