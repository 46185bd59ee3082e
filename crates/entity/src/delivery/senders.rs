//! The senders the delivery service is delivering now ([`Delivery`]), kept in the entity layer's
//! shared core so a cell's commit can wake its sender's delivery.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use tessera_contract::EntityAddress;

/// The senders being delivered now; `true` when one was woken again while delivering.
#[derive(Default)]
pub(crate) struct Delivery {
    active: Mutex<HashMap<EntityAddress, bool>>,
}

impl Delivery {
    pub(super) fn active(&self) -> MutexGuard<'_, HashMap<EntityAddress, bool>> {
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Senders being delivered now.
    pub(crate) fn active_senders(&self) -> usize {
        self.active().len()
    }
}
