//! What the reminder clock keeps between its ticks ([`ReminderClock`]): the reminders it is
//! firing or will retry, and the bell a commit rings when it stored one. It lives in the entity
//! layer's shared core, where a cell's commit finds the bell.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tessera_contract::EntityAddress;
use tessera_state::DueReminder;
use tokio::sync::Notify;

/// Reminders in flight or waiting for a retry, and the bell a commit rings when it stored one.
#[derive(Default)]
pub(crate) struct ReminderClock {
    /// `(entity, timer)` being fired, or waiting until the given ms to be fired again.
    pub(super) busy: Mutex<HashMap<(EntityAddress, u64), Busy>>,
    pub(super) bell: Arc<Notify>,
    /// Where the next scan of due reminders goes on: the last row a full page ended with.
    pub(super) cursor: Mutex<Option<DueReminder>>,
}

#[derive(Clone, Copy)]
pub(super) enum Busy {
    Firing,
    RetryAt { ms: u64, wait: Duration },
}

impl ReminderClock {
    pub(super) fn cursor(&self) -> MutexGuard<'_, Option<DueReminder>> {
        self.cursor.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn busy(&self) -> MutexGuard<'_, HashMap<(EntityAddress, u64), Busy>> {
        self.busy.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the clock a reminder was stored (it may be due sooner than it is sleeping).
    pub(crate) fn ring(&self) {
        self.bell.notify_one();
    }
}
