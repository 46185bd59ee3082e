//! The reminder clock: fires each durable reminder when it is due, effectively once.
//!
//! Reminders live in the state store, indexed by due time, so the clock holds nothing but the
//! reminders it is firing right now (at most [`REMINDERS_IN_FLIGHT_MAX`]). A firing is a message
//! to the entity whose origin names the timer: the entity activates if needed, handles it, and
//! its commit deletes the reminder in the same transaction — so a reminder fired twice (a lost
//! acknowledgement, a crash before the reply) runs once. A firing that fails for a reason that
//! may pass (busy, unavailable) is retried with backoff; one the entity answers with an error
//! is given up, counted and its reminder deleted.
//!
//! The clock fires only reminders of entities this node serves (`Router::serves_here`): rows
//! it still holds for a shard served elsewhere (an earlier ownership whose discard was lost, a
//! shard not yet resolved after a restart) are stale here and are skipped, never sent to the
//! owner, which fires its own. So that stale rows cannot starve the rest, each tick scans at
//! most [`REMINDER_SCAN_ROWS_MAX`] due rows and the next goes on after them.

pub(crate) mod clock;

use super::core::Core;
use super::delivery::config::is_retryable;
use super::warnings::EntityWarning;
use crate::trace::links::LinkKey;
use clock::Busy;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tessera_contract::{EntityAddress, ErrorKind, MessageError, MessageMeta, MessageTrace, Origin};
use tessera_state::WriteSet;

/// Reminders being fired at once.
pub const REMINDERS_IN_FLIGHT_MAX: usize = 256;

/// Due reminder rows one tick looks at (fired, busy or skipped as served elsewhere); the next
/// tick goes on after the last of them, so rows skipped every time cannot starve the others.
pub const REMINDER_SCAN_ROWS_MAX: usize = 4 * REMINDERS_IN_FLIGHT_MAX;

/// The shortest sleep between ticks while a scan of due rows is under way.
const CLOCK_SCAN_PAUSE: Duration = Duration::from_millis(5);

/// The longest the clock sleeps before looking at the table again.
const CLOCK_IDLE_CHECK: Duration = Duration::from_secs(1);

/// Starts the clock. It ends when the directory is dropped.
pub(crate) fn start(core: &Arc<Core>) {
    let weak = Arc::downgrade(core);
    let bell = core.reminders.bell.clone();
    tokio::spawn(async move {
        loop {
            let notified = bell.notified();
            let Some(core) = weak.upgrade() else { return };
            let sleep = tick(&core);
            drop(core);
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = notified => {}
            }
        }
    });
}

/// Fires what is due and returns how long to sleep.
fn tick(core: &Arc<Core>) -> Duration {
    let now = core.now_ms();
    let cursor = core.reminders.cursor().take();
    let due = match core
        .state
        .due_reminders(now, cursor.as_ref(), REMINDER_SCAN_ROWS_MAX)
    {
        Ok(due) => due,
        Err(error) => {
            tracing::warn!(%error, "reading due reminders failed");
            return CLOCK_IDLE_CHECK;
        }
    };
    // A full page: the next tick goes on after its last row; otherwise it starts over.
    let page_full = due.len() == REMINDER_SCAN_ROWS_MAX;
    if page_full {
        *core.reminders.cursor() = due.last().cloned();
    }
    let mut stale = 0_usize;
    let mut firing = {
        let mut busy = core.reminders.busy();
        // A retry entry for a reminder cancelled meanwhile is never looked up again.
        busy.retain(|_, state| match state {
            Busy::RetryAt { ms, .. } => ms.saturating_add(60_000) > now,
            Busy::Firing => true,
        });
        busy.values().filter(|b| matches!(b, Busy::Firing)).count()
    };
    for reminder in due {
        if !core.router.serves_here(&reminder.entity) {
            stale += 1;
            continue;
        }
        let key = (reminder.entity.clone(), reminder.timer);
        {
            let mut busy = core.reminders.busy();
            if firing >= REMINDERS_IN_FLIGHT_MAX {
                // The rest of this page waits for a slot: start over from the earliest.
                *core.reminders.cursor() = None;
                break;
            }
            match busy.get(&key) {
                Some(Busy::Firing) => continue,
                Some(Busy::RetryAt { ms, .. }) if *ms > now => continue,
                _ => {}
            }
            let wait = match busy.get(&key) {
                Some(Busy::RetryAt { wait, .. }) => Some(*wait),
                _ => None,
            };
            busy.insert(key.clone(), Busy::Firing);
            firing += 1;
            tokio::spawn(fire(Arc::downgrade(core), key, wait));
        }
    }
    if page_full {
        return CLOCK_SCAN_PAUSE;
    }
    let next = match core.state.next_due() {
        // Overdue rows that were all skipped as served elsewhere are looked at again only
        // after the idle check (or when a commit rings), not every few milliseconds.
        Ok(Some(due)) if due <= now && stale > 0 && firing == 0 => CLOCK_IDLE_CHECK,
        Ok(Some(due)) => Duration::from_millis(due.saturating_sub(now)),
        Ok(None) => CLOCK_IDLE_CHECK,
        Err(_) => CLOCK_IDLE_CHECK,
    };
    let retry_soonest = core
        .reminders
        .busy()
        .values()
        .filter_map(|busy| match busy {
            Busy::RetryAt { ms, .. } => Some(Duration::from_millis(ms.saturating_sub(now))),
            Busy::Firing => None,
        })
        .min();
    // Never spin: something due now but busy is looked at again shortly.
    next.min(retry_soonest.unwrap_or(CLOCK_IDLE_CHECK))
        .clamp(CLOCK_SCAN_PAUSE, CLOCK_IDLE_CHECK)
}

async fn fire(weak: Weak<Core>, key: (EntityAddress, u64), wait: Option<Duration>) {
    let (entity, timer) = &key;
    let Some(attempt) = fire_once(&weak, entity, *timer).await else {
        return;
    };
    let Some(core) = weak.upgrade() else { return };
    match attempt {
        ReminderAttempt::Retry(error) => {
            tracing::debug!(%entity, timer, %error, "reminder not acknowledged; retrying");
            core.stats.redeliveries.fetch_add(1, Ordering::Relaxed);
            retry_later(&core, key, wait);
        }
        ReminderAttempt::Fired | ReminderAttempt::Gone | ReminderAttempt::GivenUp(_) => {
            core.reminders.busy().remove(&key);
        }
    }
    core.reminders.ring();
}

/// What one attempt to fire a reminder came to.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReminderAttempt {
    /// The entity handled it and committed (its commit deleted the reminder).
    Fired,
    /// The reminder was no longer held (cancelled or fired meanwhile).
    Gone,
    /// It may succeed later (the entity was busy, absent or its store unreadable): fire again.
    Retry(MessageError),
    /// The entity answered it with an error: it was given up (a dead letter) and deleted.
    GivenUp(MessageError),
}

/// One attempt to fire reminder `timer` of `entity`: sends its payload to the entity as a
/// message whose origin names the timer, and carries out the outcome (counted as fired, or
/// given up and deleted). A retry is left to the caller. `None` if the directory is gone.
pub(crate) async fn fire_once(
    weak: &Weak<Core>,
    entity: &EntityAddress,
    timer: u64,
) -> Option<ReminderAttempt> {
    let core = weak.upgrade()?;
    let reminder = match core.state.reminder(entity, timer) {
        Ok(Some(reminder)) => reminder,
        Ok(None) => return Some(ReminderAttempt::Gone),
        Err(error) => {
            tracing::warn!(%entity, timer, %error, "reading a reminder failed");
            return Some(ReminderAttempt::Retry(MessageError::new(
                ErrorKind::Internal,
                error.to_string(),
            )));
        }
    };
    let link = LinkKey::Reminder(entity.clone(), timer);
    let mut meta = MessageMeta::from_origin(Origin::Reminder { timer });
    if let Some(parent) = core.trace_links.get(&link) {
        meta.trace = Some(Box::new(MessageTrace::new(Some(parent))));
    }
    let timeout = Duration::from_millis(core.config.delivery.ack_timeout_ms);
    let router = core.router.clone();
    drop(core);
    let reply = router
        .ask(entity.clone(), reminder.payload, meta, timeout)
        .await;
    let core = weak.upgrade()?;
    Some(match reply {
        Ok(_) => {
            core.trace_links.forget(&link);
            core.stats.reminders_fired.fetch_add(1, Ordering::Relaxed);
            ReminderAttempt::Fired
        }
        Err(error) if is_retryable(error.kind) => ReminderAttempt::Retry(error),
        Err(error) => {
            core.stats.dead_letters.fetch_add(1, Ordering::Relaxed);
            let warning = EntityWarning::ReminderGivenUp {
                entity_type: entity.type_key(),
                kind: error.kind,
            };
            if core.warnings.first_in_window(&warning) {
                tracing::warn!(%entity, timer, %error, "reminder given up (dead letter)");
            }
            let mut writes = WriteSet::new(entity.clone());
            writes.messaging_mut().cancels.push(timer);
            if let Err(error) = core.state.commit(writes).await {
                tracing::warn!(%entity, timer, %error, "deleting a given-up reminder failed");
            }
            core.trace_links.forget(&link);
            ReminderAttempt::GivenUp(error)
        }
    })
}

fn retry_later(core: &Arc<Core>, key: (EntityAddress, u64), wait: Option<Duration>) {
    let config = &core.config.delivery;
    let wait = wait.map_or(Duration::from_millis(config.retry_min_ms), |wait| {
        (wait * 2).min(Duration::from_millis(config.retry_max_ms))
    });
    let ms = core.now_ms() + wait.as_millis() as u64;
    core.reminders
        .busy()
        .insert(key, Busy::RetryAt { ms, wait });
}
