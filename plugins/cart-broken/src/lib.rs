//! Version 2 of the `cart` type gone wrong: its items carry a price the stored ones (written by
//! `cart` version 1) do not have, and it has no migration. Its `activate` cannot read them, so
//! it never activates on a version-1 cart: the host must answer `failed` naming the key and
//! the reason, keep the state, and keep the cart's reminders until a rollback.
//!
//! `"Get"` replies the items (if it ever activated).

use tessera_sdk::prelude::*;

/// An item, as this version expects it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// What it is.
    pub name: String,
    /// Its price, which version 1 never stored.
    pub price_cents: u64,
}

/// What this version understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Replies with the items.
    Get,
}

/// A live cart, if its items decoded.
pub struct Cart {
    items: Vec<Item>,
}

impl Entity for Cart {
    type Msg = Msg;
    type Reply = Vec<Item>;

    fn activate(ctx: &mut Ctx, _: Activation) -> Self {
        // A value that does not decode refuses the activation (`Ctx::get`).
        Cart {
            items: ctx.get("items").unwrap_or_default(),
        }
    }

    fn handle(&mut self, _: &mut Ctx, Msg::Get: Msg) -> Result<Vec<Item>, Error> {
        Ok(self.items.clone())
    }
}

export_entity!(Cart);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    #[test]
    fn items_without_a_price_refuse_the_activation() {
        #[derive(Serialize)]
        struct Unpriced {
            name: &'static str,
        }
        let mut cart = Harness::<Cart>::new(Address::new("cart", "c"));
        cart.set_state("items", &vec![Unpriced { name: "apple" }]);
        let refused = cart.try_activate(Activation::Upgraded { from_version: 1 });
        let Err(Error::Failed(reason)) = refused else {
            panic!("activated on items without a price: {refused:?}");
        };
        assert!(
            reason.contains("\"items\"") && reason.contains("price_cents"),
            "{reason}"
        );
    }
}
