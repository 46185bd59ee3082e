//! A cart whose checkout reserves it until its own reminder expires it, and that says who sent
//! each message. Version 1 of the `cart` type in the migration and rollback tests
//! (`cart-priced` and `cart-broken` are its later versions).
//!
//! - `{"Add": "apple"}` adds an item; `"Get"` replies `{"items": [{"name": …}], "reserved":
//!   bool, "expired": n}`.
//! - `{"Checkout": {"expire_ms": n}}` reserves the cart and schedules `"Expire"` to itself.
//! - `"Expire"` releases the reservation and counts it, **only from the cart's own reminder**:
//!   from anyone else it is rejected (a client cannot expire a cart).
//! - `"Activation"` replies why the live instance was activated (`"upgraded from 1"`,
//!   `"rolled back from 2"`, …).
//! - `"Whoami"` replies who sent it: `"client"`, `"entity <type>/<id>"` or `"reminder <timer>"`.
//! - `{"AskWhoami": address}` asks another entity `"Whoami"` and replies its answer;
//!   `{"TellRecord": address}` tells it `"Record"`; `"RemindRecord"` schedules `"Record"` to
//!   itself; `"Record"` keeps who sent it, which `"LastSender"` replies.

use tessera_sdk::prelude::*;

/// The state key of the items.
pub const ITEMS_KEY: &str = "items";

/// An item, as version 1 stores it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// What it is.
    pub name: String,
}

/// What a cart understands.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Adds an item.
    Add(String),
    /// Reserves the cart until its reminder expires it.
    Checkout {
        /// Delay before the reminder.
        expire_ms: u64,
    },
    /// Releases the reservation (only from the cart's own reminder).
    Expire,
    /// Replies with the [`View`].
    Get,
    /// Replies why the instance was activated.
    Activation,
    /// Replies who sent it.
    Whoami,
    /// Asks another entity `Whoami`.
    AskWhoami(Address),
    /// Tells another entity `Record`.
    TellRecord(Address),
    /// Schedules `Record` to itself.
    RemindRecord,
    /// Keeps who sent it.
    Record,
    /// Replies who sent the last `Record`.
    LastSender,
}

/// The cart as a client sees it.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct View {
    /// The items.
    pub items: Vec<Item>,
    /// Whether a checkout holds it.
    pub reserved: bool,
    /// How many reservations its reminders expired.
    pub expired: u64,
}

/// The reply to every message.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Reply {
    /// To `Get`.
    View(View),
    /// To `Activation`, `Whoami`, `AskWhoami` and `LastSender` (`None`: nothing recorded).
    Text(Option<String>),
}

/// Says who sent a message, in the words `Whoami` replies.
pub fn describe(sender: &Sender) -> String {
    match sender {
        Sender::Client => "client".into(),
        Sender::Entity(address) => format!("entity {address}"),
        Sender::Reminder(timer) => format!("reminder {}", timer.as_raw()),
    }
}

/// Says why an instance was activated, in the words `Activation` replies.
pub fn describe_activation(reason: Activation) -> String {
    match reason {
        Activation::FirstStart => "first start".into(),
        Activation::Restarted => "restarted".into(),
        Activation::Upgraded { from_version } => format!("upgraded from {from_version}"),
        Activation::RolledBack { from_version } => format!("rolled back from {from_version}"),
    }
}

/// A live cart.
pub struct Cart {
    activation: String,
}

impl Entity for Cart {
    type Msg = Msg;
    type Reply = Reply;

    fn activate(_: &mut Ctx, reason: Activation) -> Self {
        Cart {
            activation: describe_activation(reason),
        }
    }

    fn handle(&mut self, ctx: &mut Ctx, msg: Msg) -> Result<Reply, Error> {
        let text = |text: String| Ok(Reply::Text(Some(text)));
        match msg {
            Msg::Add(name) => {
                let mut items: Vec<Item> = ctx.get(ITEMS_KEY).unwrap_or_default();
                items.push(Item { name });
                ctx.put(ITEMS_KEY, &items);
            }
            Msg::Checkout { expire_ms } => {
                ctx.put("reserved", &true);
                ctx.schedule(Duration::from_millis(expire_ms), &Msg::Expire);
            }
            Msg::Expire => {
                if !ctx.sender().is_reminder() {
                    return Err(Error::rejected(format!(
                        "only the cart's own reminder expires it, not a {}",
                        describe(ctx.sender())
                    )));
                }
                let expired: u64 = ctx.get("expired").unwrap_or(0);
                ctx.put("reserved", &false);
                ctx.put("expired", &(expired + 1));
            }
            Msg::Get => {}
            Msg::Activation => return text(self.activation.clone()),
            Msg::Whoami => return text(describe(ctx.sender())),
            Msg::AskWhoami(to) => {
                let reply = ctx.ask(&to, &Msg::Whoami, Duration::from_secs(5));
                return reply.map(Reply::Text);
            }
            Msg::TellRecord(to) => ctx.tell(&to, &Msg::Record)?,
            Msg::RemindRecord => {
                ctx.schedule(Duration::ZERO, &Msg::Record);
            }
            Msg::Record => {
                let sender = describe(ctx.sender());
                ctx.put("last_sender", &sender);
            }
            Msg::LastSender => return Ok(Reply::Text(ctx.get("last_sender"))),
        }
        Ok(Reply::View(View {
            items: ctx.get(ITEMS_KEY).unwrap_or_default(),
            reserved: ctx.get("reserved").unwrap_or(false),
            expired: ctx.get("expired").unwrap_or(0),
        }))
    }
}

export_entity!(Cart);

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_sdk::testing::Harness;

    #[test]
    fn only_its_own_reminder_expires_a_cart() {
        let mut cart = Harness::<Cart>::new(Address::new("cart", "c"));
        cart.send(&Msg::Checkout { expire_ms: 10 }).unwrap();
        assert!(matches!(cart.send(&Msg::Expire), Err(Error::Rejected(_))));
        cart.advance(Duration::from_millis(10));
        assert_eq!(cart.fire_due().len(), 1);
        assert_eq!(cart.state::<bool>("reserved"), Some(false));
        assert_eq!(cart.state::<u64>("expired"), Some(1));
    }
}
