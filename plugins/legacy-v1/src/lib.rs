//! A component of the `tessera:entity@0.1.0` contract, built with wit-bindgen against
//! `wit/0.1.0` and no SDK (the SDK has moved to 0.2.0): the host must keep running it.
//!
//! It counts: every message's payload is ignored, the count (a MessagePack unsigned integer
//! under the key `"count"`) goes up by one and is the reply. `activate` records nothing; a
//! rollback reaches it as an upgrade, which 0.1.0 knows.

wit_bindgen::generate!({
    world: "entity",
    path: "../../wit/0.1.0",
});

use exports::tessera::entity::handler::Guest;
use tessera::entity::host;
use tessera::entity::types::{Activation, Error};

/// The state key of the count.
const COUNT_KEY: &str = "count";

struct Legacy;

impl Guest for Legacy {
    fn activate(_: Activation) {}

    fn handle(_: Vec<u8>) -> Result<Vec<u8>, Error> {
        let count = host::get(COUNT_KEY).map_or(Ok(0), |bytes| decode_u32(&bytes))?;
        let reply = encode_u32(count + 1);
        host::put(COUNT_KEY, &reply);
        Ok(reply)
    }

    fn deactivate() {}
}

/// A MessagePack `uint 32` (`0xce` and four big-endian bytes): the one shape this entity
/// writes, so it needs no codec.
fn encode_u32(value: u32) -> Vec<u8> {
    let mut bytes = vec![0xce];
    bytes.extend_from_slice(&value.to_be_bytes());
    bytes
}

fn decode_u32(bytes: &[u8]) -> Result<u32, Error> {
    match bytes {
        [0xce, a, b, c, d] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => Err(Error::Failed("the stored count is not a uint 32".into())),
    }
}

export!(Legacy);
