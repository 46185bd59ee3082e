//! Replies with the bytes it was sent (a MessagePack `bin`), touching no state: the fixture
//! the runtime benchmarks use to measure the cost of the host around one message.

use tessera_sdk::prelude::*;

/// An entity with nothing to remember.
pub struct Echo;

impl Entity for Echo {
    type Msg = ByteBuf;
    type Reply = ByteBuf;

    fn activate(_: &mut Ctx, _: Activation) -> Self {
        Echo
    }

    fn handle(&mut self, _: &mut Ctx, msg: ByteBuf) -> Result<ByteBuf, Error> {
        Ok(msg)
    }
}

export_entity!(Echo);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    #[test]
    fn replies_with_what_it_was_sent() {
        let mut harness = Harness::<Echo>::new(Address::new("echo", "e1"));
        let payload = ByteBuf::from(vec![7u8; 64]);
        assert_eq!(harness.send(&payload).unwrap(), payload);
    }
}
