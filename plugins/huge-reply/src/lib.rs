//! A test entity for reply size limits: `{"Bytes": n}` replies with `n` bytes as one MessagePack
//! `bin` (every byte `0x5a`, `'Z'`); `n` above [`MAX_REPLY_BYTES`] is rejected. `"Ping"` replies
//! `"Pong"`.

use tessera_sdk::prelude::*;

/// The largest reply `Bytes` builds: beyond this the guest itself could not hold it (a
/// component `list<u8>` is at most 4 GiB, and the copy doubles it).
pub const MAX_REPLY_BYTES: u64 = 1024 * 1024 * 1024;

/// The byte every reply is filled with.
pub const FILL: u8 = b'Z';

/// The replier; it keeps nothing.
pub struct HugeReply;

/// What the replier understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Replies with this many bytes.
    Bytes(u64),
    /// Replies `"Pong"`.
    Ping,
}

/// The reply: a `bin` to `Bytes`, a string to `Ping`.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// To `Bytes`.
    Bytes(ByteBuf),
    /// To `Ping`.
    Pong(String),
}

impl Entity for HugeReply {
    type Msg = Msg;
    type Reply = Reply;

    fn activate(_: &mut Ctx, _: Activation) -> Self {
        HugeReply
    }

    fn handle(&mut self, _: &mut Ctx, msg: Msg) -> Result<Reply, Error> {
        match msg {
            Msg::Bytes(n) if n > MAX_REPLY_BYTES => Err(Error::rejected(format!(
                "{n} bytes is more than the {MAX_REPLY_BYTES} this entity builds"
            ))),
            Msg::Bytes(n) => {
                let len = usize::try_from(n)
                    .map_err(|_| Error::rejected("reply size does not fit in memory"))?;
                Ok(Reply::Bytes(ByteBuf::from(vec![FILL; len])))
            }
            Msg::Ping => Ok(Reply::Pong("Pong".to_string())),
        }
    }
}

export_entity!(HugeReply);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    fn replier() -> Harness<HugeReply> {
        Harness::new(Address::new("huge-reply", "h"))
    }

    #[test]
    fn eight_mib_reply_is_one_bin() {
        let n = 8 * 1024 * 1024;
        let bytes = replier().send_bytes(&rmp_bytes_msg(n)).unwrap();
        // bin 32: 0xc6, a big-endian u32 length, then the bytes.
        assert_eq!(bytes[0], 0xc6);
        assert_eq!(
            u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize,
            n
        );
        assert_eq!(bytes.len(), n + 5);
        assert!(bytes[5..].iter().all(|&b| b == FILL));
    }

    #[test]
    fn too_large_is_rejected() {
        assert!(matches!(
            replier().send(&Msg::Bytes(MAX_REPLY_BYTES + 1)),
            Err(Error::Rejected(_))
        ));
    }

    #[test]
    fn ping_answers() {
        assert_eq!(replier().send("Ping"), Ok(Reply::Pong("Pong".to_string())));
    }

    /// `{"Bytes": n}` as MessagePack: fixmap(1), fixstr "Bytes", uint32 n.
    fn rmp_bytes_msg(n: usize) -> Vec<u8> {
        let mut msg = vec![0x81, 0xa5];
        msg.extend_from_slice(b"Bytes");
        msg.push(0xce);
        msg.extend_from_slice(&u32::try_from(n).unwrap().to_be_bytes());
        msg
    }
}
