//! The entity layer's warnings that come once per message — a tell or a reminder given up (a
//! dead letter), an instance discarded after a trap, a deadline or a memory cap — counted per
//! kind (`tessera_logs`), so that a fault failing thousands of messages, or a guest that traps
//! on every one, writes a few lines: the first of a kind in a window, then one count. A kind is
//! the entity type and the error's kind; never the entity, nor the error's message, which can
//! hold a guest's own words. The delivery sweep writes the counts of closed windows.

use std::time::Duration;
use tessera_contract::{ErrorKind, TypeKey};
use tessera_logs::{RepeatedWarnings, WarningKey};

/// How long warnings like a logged one are counted before they are summarised.
const REPEATED_WARNING_WINDOW: Duration = Duration::from_secs(10);

/// Kinds of warning counted apart within a window; warnings of other kinds share one count.
const WARNING_KINDS_MAX: usize = 256;

/// The layer's repeated warnings, counted per kind.
pub(crate) type EntityWarnings = RepeatedWarnings<EntityWarning>;

/// A new, empty set of counts.
pub(crate) fn entity_warnings() -> EntityWarnings {
    RepeatedWarnings::new(
        "entity warnings",
        REPEATED_WARNING_WINDOW,
        WARNING_KINDS_MAX,
    )
}

/// A kind of per-message warning of the entity layer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum EntityWarning {
    /// A committed tell to an entity of `receiver` given up.
    DeadLetter { receiver: TypeKey, kind: ErrorKind },
    /// A reminder of an entity of `entity_type` given up.
    ReminderGivenUp {
        entity_type: TypeKey,
        kind: ErrorKind,
    },
    /// An instance of `entity_type` discarded.
    InstanceDiscarded {
        entity_type: TypeKey,
        kind: ErrorKind,
    },
    /// An entity of `entity_type` could not activate (its `activate` failed or trapped).
    ActivationRefused {
        entity_type: TypeKey,
        kind: ErrorKind,
    },
}

impl WarningKey for EntityWarning {
    fn warn_summary(&self, suppressed: u64, over: Duration) {
        match self {
            EntityWarning::DeadLetter { receiver, kind } => tracing::warn!(
                %receiver,
                kind = kind.code(),
                suppressed,
                "tell given up (dead letter) … and {suppressed} more in {over:.1?}"
            ),
            EntityWarning::ReminderGivenUp { entity_type, kind } => tracing::warn!(
                %entity_type,
                kind = kind.code(),
                suppressed,
                "reminder given up (dead letter) … and {suppressed} more in {over:.1?}"
            ),
            EntityWarning::InstanceDiscarded { entity_type, kind } => tracing::warn!(
                %entity_type,
                kind = kind.code(),
                suppressed,
                "instance discarded … and {suppressed} more in {over:.1?}"
            ),
            EntityWarning::ActivationRefused { entity_type, kind } => tracing::warn!(
                %entity_type,
                kind = kind.code(),
                suppressed,
                "activation refused … and {suppressed} more in {over:.1?}"
            ),
        }
    }
}
