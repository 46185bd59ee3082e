//! Version 2 of the `cart` type done right: items carry a price, and `activate` migrates a
//! version-1 cart (items without one) before its first message, pricing each item at
//! [`DEFAULT_PRICE_CENTS`] and marking the schema. An item named [`UNPRICEABLE`] cannot be
//! priced: the migration fails, the activation is refused and the version-1 state stays.
//!
//! - `"Get"` replies `{"items": [{"name": …, "price_cents": n}], "total_cents": n}`.
//! - `"Activation"` replies why the live instance was activated.

use tessera_sdk::prelude::*;

/// The state key of the items.
pub const ITEMS_KEY: &str = "items";

/// The state key of the schema version the items are stored in (absent: version 1).
pub const SCHEMA_KEY: &str = "schema";

/// The schema this version stores.
pub const SCHEMA: u32 = 2;

/// The price a migrated item gets.
pub const DEFAULT_PRICE_CENTS: u64 = 100;

/// An item name the migration refuses.
pub const UNPRICEABLE: &str = "unpriceable";

/// An item, as version 1 stored it.
#[derive(Debug, Deserialize)]
struct UnpricedItem {
    name: String,
}

/// An item, as this version stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// What it is.
    pub name: String,
    /// Its price.
    pub price_cents: u64,
}

/// What this version understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Replies with the [`View`].
    Get,
    /// Replies why the instance was activated.
    Activation,
}

/// The cart as a client sees it.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct View {
    /// The items.
    pub items: Vec<Item>,
    /// Their total price.
    pub total_cents: u64,
}

/// The reply to every message.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// To `Get`.
    View(View),
    /// To `Activation`.
    Text(String),
}

/// A live cart.
pub struct Cart {
    activation: Activation,
}

/// Moves version-1 items to this schema, in `activate` (committed before the first message).
fn migrate(ctx: &mut Ctx) {
    if ctx.get::<u32>(SCHEMA_KEY) == Some(SCHEMA) {
        return;
    }
    let old: Vec<UnpricedItem> = ctx.get(ITEMS_KEY).unwrap_or_default();
    if old.iter().any(|item| item.name == UNPRICEABLE) {
        ctx.fail(Error::failed(format!(
            "migrating \"{ITEMS_KEY}\": item {UNPRICEABLE:?} has no price"
        )));
        return;
    }
    let items: Vec<Item> = old
        .into_iter()
        .map(|item| Item {
            name: item.name,
            price_cents: DEFAULT_PRICE_CENTS,
        })
        .collect();
    ctx.put(ITEMS_KEY, &items);
    ctx.put(SCHEMA_KEY, &SCHEMA);
}

impl Entity for Cart {
    type Msg = Msg;
    type Reply = Reply;

    fn activate(ctx: &mut Ctx, reason: Activation) -> Self {
        migrate(ctx);
        Cart { activation: reason }
    }

    fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<Reply, Error> {
        match msg {
            Msg::Get => {
                let items: Vec<Item> = ctx.get(ITEMS_KEY).unwrap_or_default();
                let total_cents = items.iter().map(|item| item.price_cents).sum();
                Ok(Reply::View(View { items, total_cents }))
            }
            Msg::Activation => Ok(Reply::Text(format!("{:?}", self.activation))),
        }
    }
}

export_entity!(Cart);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    #[derive(Serialize)]
    struct Unpriced {
        name: &'static str,
    }

    #[test]
    fn version_one_items_are_priced_before_the_first_message() {
        let mut cart = Harness::<Cart>::new(Address::new("cart", "c"));
        cart.set_state(ITEMS_KEY, &vec![Unpriced { name: "apple" }]);
        cart.try_activate(Activation::Upgraded { from_version: 1 })
            .unwrap();
        assert_eq!(cart.state::<u32>(SCHEMA_KEY), Some(SCHEMA));
        let Ok(Reply::View(view)) = cart.send(&Msg::Get) else {
            panic!("no view");
        };
        assert_eq!(view.total_cents, DEFAULT_PRICE_CENTS);
    }

    #[test]
    fn an_unpriceable_item_refuses_the_migration_and_keeps_the_old_items() {
        let mut cart = Harness::<Cart>::new(Address::new("cart", "c"));
        cart.set_state(ITEMS_KEY, &vec![Unpriced { name: UNPRICEABLE }]);
        let refused = cart.try_activate(Activation::Upgraded { from_version: 1 });
        assert!(matches!(refused, Err(Error::Failed(_))), "{refused:?}");
        assert_eq!(cart.state::<u32>(SCHEMA_KEY), None);
    }
}
