//! A test entity for the per-instance memory cap: `"Grow"` allocates and touches memory without
//! bound (1 MiB at a time) until the instance dies, `"Ping"` replies `"Pong"`.

use tessera_sdk::prelude::*;

/// How much `Grow` allocates per step.
pub const CHUNK_BYTES: usize = 1024 * 1024;

/// A wasm page: touching one byte per page makes every page resident.
const PAGE_BYTES: usize = 64 * 1024;

/// The hog; it keeps nothing between messages.
pub struct MemoryHog;

/// What the hog understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Allocates 1 MiB chunks forever; ends only when allocation fails (a trap).
    Grow,
    /// Replies `"Pong"`.
    Ping,
}

/// Allocates, touches and keeps 1 MiB chunks until allocation aborts the instance.
fn grow() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; CHUNK_BYTES];
        for page in chunk.chunks_mut(PAGE_BYTES) {
            page[0] = 1;
        }
        hoard.push(std::hint::black_box(chunk));
    }
}

impl Entity for MemoryHog {
    type Msg = Msg;
    type Reply = String;

    fn activate(_: &mut Ctx, _: Activation) -> Self {
        MemoryHog
    }

    fn handle(&mut self, _: &mut Ctx, msg: Msg) -> Result<String, Error> {
        match msg {
            Msg::Grow => grow(),
            Msg::Ping => Ok("Pong".to_string()),
        }
    }
}

export_entity!(MemoryHog);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    #[test]
    fn ping_answers() {
        let mut hog = Harness::<MemoryHog>::new(Address::new("memory-hog", "m"));
        assert_eq!(hog.send("Ping"), Ok("Pong".to_string()));
    }
}
