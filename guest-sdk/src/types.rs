//! Small value types shared by [`Entity`](crate::Entity) and [`Ctx`](crate::Ctx).

use core::fmt;
use serde::{Deserialize, Serialize};

/// Where an entity lives: its entity type (as deployed by the tenant) and its id.
///
/// An address is always inside the caller's own tenant. It is also serde-friendly, so it can be
/// carried inside messages.
///
/// ```
/// use tessera_sdk::Address;
///
/// let to = Address::new("bank-account", "alice");
/// assert_eq!(to.entity_type, "bank-account");
/// assert_eq!(to.id, "alice");
/// assert_eq!(to.to_string(), "bank-account/alice");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Address {
    /// The entity type, as deployed by the tenant (for example `counter`).
    pub entity_type: String,
    /// The entity id within that type (any UTF-8 string).
    pub id: String,
}

impl Address {
    /// An address from an entity type and an id.
    ///
    /// ```
    /// use tessera_sdk::Address;
    /// let a = Address::new("counter", "c-1");
    /// assert_eq!(a, Address { entity_type: "counter".into(), id: "c-1".into() });
    /// ```
    pub fn new(entity_type: impl Into<String>, id: impl Into<String>) -> Self {
        Address {
            entity_type: entity_type.into(),
            id: id.into(),
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.entity_type, self.id)
    }
}

/// Why [`Entity::activate`](crate::Entity::activate) is called.
///
/// ```
/// use tessera_sdk::Activation;
///
/// fn describe(reason: Activation) -> String {
///     match reason {
///         Activation::FirstStart => "new".to_string(),
///         Activation::Restarted => "back".to_string(),
///         Activation::Upgraded { from_version } => format!("upgraded from v{from_version}"),
///         Activation::RolledBack { from_version } => format!("rolled back from v{from_version}"),
///     }
/// }
/// assert_eq!(describe(Activation::Upgraded { from_version: 3 }), "upgraded from v3");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    /// The entity has never had durable state written before (as far as the host knows).
    FirstStart,
    /// The entity ran before on this plugin version: after passivation, a trap or a restart.
    Restarted,
    /// The entity ran before on an older plugin version: migrate its state here if its
    /// schema changed (writes in `activate` are committed before the first message).
    Upgraded {
        /// The plugin version the entity ran on before.
        from_version: u32,
    },
    /// The entity ran before on a newer plugin version, and its type was rolled back to this
    /// one: state written by the newer version may be there.
    RolledBack {
        /// The newer plugin version the entity ran on before.
        from_version: u32,
    },
}

/// Who sent the message being handled, as the host knows it ([`Ctx::sender`]): a payload
/// cannot pretend to come from a reminder.
///
/// [`Ctx::sender`]: crate::Ctx::sender
///
/// ```
/// use tessera_sdk::{Address, Sender, TimerId};
/// let from = Sender::Entity(Address::new("order", "o-1"));
/// assert!(!from.is_client());
/// assert!(Sender::Reminder(TimerId::from_raw(3)).is_reminder());
/// assert!(Sender::Client.is_client());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Sender {
    /// A client of the tenant, through the API or the CLI.
    #[default]
    Client,
    /// An entity of the same tenant, by a tell or an ask.
    Entity(Address),
    /// This entity's own reminder, made by [`Ctx::schedule`](crate::Ctx::schedule).
    Reminder(TimerId),
}

impl Sender {
    /// Whether a client sent the message.
    pub fn is_client(&self) -> bool {
        matches!(self, Sender::Client)
    }

    /// Whether the message is one of this entity's own reminders.
    pub fn is_reminder(&self) -> bool {
        matches!(self, Sender::Reminder(_))
    }
}

/// Severity of a log line written with [`Ctx::log`](crate::Ctx::log).
///
/// ```
/// use tessera_sdk::Level;
/// assert!(Level::Warn > Level::Info);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the entity handled.
    Warn,
    /// Something failed.
    Error,
}

/// A timer made by [`Ctx::schedule`](crate::Ctx::schedule), to pass to
/// [`Ctx::cancel`](crate::Ctx::cancel).
///
/// ```
/// use tessera_sdk::TimerId;
/// let id = TimerId::from_raw(7);
/// assert_eq!(id.as_raw(), 7);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TimerId(u64);

impl TimerId {
    /// A timer id from the host's raw number (for example one kept in state).
    ///
    /// ```
    /// use tessera_sdk::TimerId;
    /// assert_eq!(TimerId::from_raw(1), TimerId::from_raw(1));
    /// ```
    pub const fn from_raw(raw: u64) -> Self {
        TimerId(raw)
    }

    /// The host's raw number for this timer.
    ///
    /// ```
    /// use tessera_sdk::TimerId;
    /// assert_eq!(TimerId::from_raw(42).as_raw(), 42);
    /// ```
    pub const fn as_raw(self) -> u64 {
        self.0
    }
}
