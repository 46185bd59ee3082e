//! A test entity for moving large state between nodes: `{"Fill": {"key": k, "bytes": n}}`
//! stores `n` bytes of a pattern fixed by `k` under state key `k<k>` and counts the keys;
//! `"Check"` reads every key back and replies how many keys and bytes it holds and which keys
//! do not hold their pattern. `"Ping"` starts it and replies that it holds nothing.

use tessera_sdk::prelude::*;

/// The entity; everything it holds is in its state.
pub struct Ballast;

/// What the entity understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Stores `bytes` bytes of key `key`'s pattern.
    Fill {
        /// Which key (`k<key>`).
        key: u32,
        /// How many bytes.
        bytes: u32,
    },
    /// Reads every key back.
    Check,
    /// Replies an empty [`Held`].
    Ping,
}

/// What `Check` found, and what the other messages answer.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// Keys filled.
    pub keys: u32,
    /// Bytes of their values, all told.
    pub bytes: u64,
    /// Keys whose value is missing or not its pattern.
    pub wrong: Vec<u32>,
    /// To `Fill`: the entity's clock when it ran (ms since the epoch), so a test can tell when
    /// a write it sees acknowledged was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
}

/// Key `key`'s pattern, `bytes` long.
pub fn pattern(key: u32, bytes: usize) -> Vec<u8> {
    (0..bytes)
        .map(|at| (at as u32 / 7).wrapping_add(key.wrapping_mul(31)) as u8)
        .collect()
}

/// Byte counts of each key, kept with the values so `Check` knows what to expect.
fn sizes(ctx: &mut Ctx) -> Vec<u32> {
    ctx.get("sizes").unwrap_or_default()
}

impl Entity for Ballast {
    type Msg = Msg;
    type Reply = Held;

    fn activate(_: &mut Ctx, _: Activation) -> Self {
        Ballast
    }

    fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<Held, Error> {
        match msg {
            Msg::Fill { key, bytes } => {
                let mut sizes = sizes(ctx);
                let slot = key as usize;
                if sizes.len() <= slot {
                    sizes.resize(slot + 1, 0);
                }
                sizes[slot] = bytes;
                ctx.put_bytes(&format!("k{key}"), &pattern(key, bytes as usize));
                ctx.put("sizes", &sizes);
                Ok(Held {
                    keys: sizes.len() as u32,
                    bytes: sizes.iter().map(|size| u64::from(*size)).sum(),
                    wrong: Vec::new(),
                    at_ms: Some(ctx.now_ms()),
                })
            }
            Msg::Check => {
                let mut held = Held::default();
                for (key, size) in sizes(ctx).into_iter().enumerate() {
                    let key = key as u32;
                    held.keys += 1;
                    match ctx.get_bytes(&format!("k{key}")) {
                        Some(value) if value == pattern(key, size as usize) => {
                            held.bytes += value.len() as u64;
                        }
                        _ => held.wrong.push(key),
                    }
                }
                Ok(held)
            }
            Msg::Ping => Ok(Held::default()),
        }
    }
}

export_entity!(Ballast);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    #[test]
    fn what_is_filled_checks_back() {
        let mut ballast = Harness::<Ballast>::new(Address::new("ballast", "b1"));
        ballast.send(&Msg::Fill { key: 1, bytes: 100 }).unwrap();
        let held = ballast.send(&Msg::Check).unwrap();
        assert_eq!(held.keys, 2);
        assert_eq!(held.bytes, 100);
        assert_eq!(held.wrong, vec![0], "key 0 was never filled");
    }
}
