//! Messaging one step at a time, for a caller that drives it instead of the background
//! services (the deterministic simulation of `tessera-testkit`). Each step is the very code the
//! delivery service and the reminder clock run — one attempt to deliver an outbox tell, the
//! acknowledgement that removes delivered tells from the outbox, one attempt to fire a
//! reminder — so a simulation exercises the host's delivery and dedup rules, not a copy of
//! them. What the background services add (which sender goes next, when to retry, when a due
//! reminder is looked at) is the caller's to decide; a directory driven this way must not also
//! [`start_messaging`](Entities::start_messaging). A simulated crash ends with
//! [`forget_all`](Entities::forget_all).

use super::delivery::{self, TellAttempt};
use super::directory::Entities;
use super::reminders::{self, ReminderAttempt};
use tessera_contract::{EntityAddress, MessageError};
use tessera_state::{CommitError, OutboxEntry};

impl Entities {
    /// Now, in milliseconds since the Unix epoch, on this directory's clock
    /// ([`standalone_with_clock`](Entities::standalone_with_clock)).
    pub fn now_ms(&self) -> u64 {
        self.core.now_ms()
    }

    /// One attempt to deliver `entry` of `sender`'s outbox (read it with
    /// [`EntityState::outbox`](tessera_state::EntityState::outbox)), as the delivery service
    /// makes it: with its origin, so a receiver that already committed it acknowledges it
    /// without running it again. A dead letter is counted; the entry stays in the outbox until
    /// [`acknowledge_tells`](Self::acknowledge_tells).
    ///
    /// ```no_run
    /// # async fn demo(entities: tessera_entity::Entities, sender: tessera_contract::EntityAddress) {
    /// use tessera_entity::TellAttempt;
    /// let entries = entities.state().outbox(&sender, 16).unwrap();
    /// let mut delivered = Vec::new();
    /// for entry in entries {
    ///     match entities.deliver_tell(&sender, &entry).await {
    ///         TellAttempt::Retry(_) => break,
    ///         _ => delivered.push(entry.seq),
    ///     }
    /// }
    /// entities.acknowledge_tells(&sender, delivered).await.unwrap();
    /// # }
    /// ```
    pub async fn deliver_tell(&self, sender: &EntityAddress, entry: &OutboxEntry) -> TellAttempt {
        let weak = std::sync::Arc::downgrade(&self.core);
        let Some(attempt) = delivery::attempt(&weak, sender, entry).await else {
            return TellAttempt::Retry(MessageError::unavailable("the directory is gone"));
        };
        if let TellAttempt::DeadLetter(error) = &attempt {
            delivery::dead_letter(&self.core, sender, entry, error);
        }
        attempt
    }

    /// Removes the delivered entries `seqs` from `sender`'s outbox, as the delivery service
    /// does after a batch.
    pub async fn acknowledge_tells(
        &self,
        sender: &EntityAddress,
        seqs: Vec<u64>,
    ) -> Result<(), CommitError> {
        delivery::acknowledge(&self.core, sender, seqs).await
    }

    /// One attempt to fire reminder `timer` of `entity` (find due ones with
    /// [`EntityState::due_reminders`](tessera_state::EntityState::due_reminders) and
    /// [`now_ms`](Self::now_ms)), as the reminder clock makes it: fired reminders are deleted
    /// by the entity's commit, reminders the entity refuses are given up and deleted, and a
    /// [`ReminderAttempt::Retry`] is left held for a later attempt.
    ///
    /// ```no_run
    /// # async fn demo(entities: tessera_entity::Entities) {
    /// let now = entities.now_ms();
    /// for due in entities.state().due_reminders(now, None, 64).unwrap() {
    ///     entities.fire_reminder(&due.entity, due.timer).await;
    /// }
    /// # }
    /// ```
    pub async fn fire_reminder(&self, entity: &EntityAddress, timer: u64) -> ReminderAttempt {
        let weak = std::sync::Arc::downgrade(&self.core);
        reminders::fire_once(&weak, entity, timer)
            .await
            .unwrap_or_else(|| {
                ReminderAttempt::Retry(MessageError::unavailable("the directory is gone"))
            })
    }

    /// Forgets every live cell at once, running nothing in them: what a crash does to a node's
    /// memory. For a simulation that has already dropped the cells' tasks (with their Tokio
    /// runtime) and is about to drop this directory; without it the table and its cells would
    /// keep each other, and their instances, alive.
    ///
    /// ```no_run
    /// # fn demo(runtime: tokio::runtime::Runtime, entities: tessera_entity::Entities) {
    /// drop(runtime);
    /// entities.forget_all();
    /// # }
    /// ```
    pub fn forget_all(&self) {
        let forgotten = {
            let mut cells = self.cells.lock();
            cells.tenants.clear();
            cells.evicting = 0;
            std::mem::take(&mut cells.live)
        };
        // Dropped outside the lock: a cell's state drops its instance and its hold on the core.
        drop(forgotten);
    }
}
