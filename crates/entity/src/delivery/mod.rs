//! The delivery service: sends every committed outbox tell to its receiver and retries until
//! the receiver acknowledges its own commit of it, then removes it from the outbox.
//!
//! One task per sender with a non-empty outbox delivers its entries strictly in sequence
//! order, one at a time, so the order per sender–receiver pair is kept and the receiver can
//! drop duplicates by the highest sequence number it committed. Senders are woken by their
//! cell after a commit and, so nothing is left behind after a restart or a missed wake, by a
//! sweep that pages through the outbox table. At most [`DELIVERY_SENDERS_MAX`] senders deliver
//! at once; the rest wait for the next sweep.

pub(crate) mod config;
pub(crate) mod senders;

pub use config::{DELIVERY_BATCH_MAX, DELIVERY_SENDERS_MAX, DeliveryConfig};

use super::core::Core;
use super::warnings::EntityWarning;
use crate::trace::links::LinkKey;
use config::is_retryable;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tessera_contract::{EntityAddress, MessageError, MessageMeta, MessageTrace, Origin};
use tessera_state::{CommitError, OutboxEntry, WriteSet};

/// Starts delivering `sender`'s outbox, or notes that it has more if it is being delivered.
pub(crate) fn wake(core: &Arc<Core>, sender: &EntityAddress) {
    if !core.messaging_started.load(Ordering::Acquire) {
        // Delivery has not started; its first sweep finds this outbox.
        return;
    }
    {
        let mut active = core.delivery.active();
        if let Some(again) = active.get_mut(sender) {
            *again = true;
            return;
        }
        if active.len() >= DELIVERY_SENDERS_MAX {
            // The sweep finds it once a slot is free.
            return;
        }
        active.insert(sender.clone(), false);
    }
    tokio::spawn(deliver_sender(Arc::downgrade(core), sender.clone()));
}

/// Starts the sweep that finds outboxes nobody woke (after a restart, or while the service was
/// full). Ends when the directory is dropped.
pub(crate) fn start_sweep(core: &Arc<Core>) {
    let weak = Arc::downgrade(core);
    let interval = Duration::from_millis(core.config.delivery.sweep_interval_ms.max(1));
    tokio::spawn(async move {
        loop {
            let Some(core) = weak.upgrade() else { return };
            sweep(&core);
            core.warnings.flush();
            drop(core);
            tokio::time::sleep(interval).await;
        }
    });
}

fn sweep(core: &Arc<Core>) {
    let mut after = None;
    loop {
        if core.delivery.active_senders() >= DELIVERY_SENDERS_MAX {
            return;
        }
        let senders = match core.state.outbox_senders(after.as_ref(), 256) {
            Ok(senders) => senders,
            Err(error) => {
                tracing::warn!(%error, "outbox sweep failed");
                return;
            }
        };
        let Some(last) = senders.last().cloned() else {
            return;
        };
        for sender in &senders {
            wake(core, sender);
        }
        after = Some(last);
    }
}

async fn deliver_sender(weak: Weak<Core>, sender: EntityAddress) {
    loop {
        let Some(core) = weak.upgrade() else { return };
        if !core.router.serves_here(&sender) {
            // Rows of a sender served elsewhere (or not resolved here yet) are not sent from
            // here; the next sweep looks again.
            core.delivery.active().remove(&sender);
            return;
        }
        let entries = match core.state.outbox(&sender, DELIVERY_BATCH_MAX) {
            Ok(entries) => entries,
            Err(error) => {
                tracing::warn!(%sender, %error, "outbox read failed; the sweep retries");
                core.delivery.active().remove(&sender);
                return;
            }
        };
        if entries.is_empty() {
            let mut active = core.delivery.active();
            match active.get_mut(&sender) {
                Some(again) if *again => {
                    *again = false;
                    continue;
                }
                _ => {
                    active.remove(&sender);
                    return;
                }
            }
        }
        drop(core);
        let mut acked = Vec::with_capacity(entries.len());
        for entry in entries {
            let seq = entry.seq;
            if !deliver_one(&weak, &sender, entry).await {
                // The directory is gone: the outbox stays for the next start.
                break;
            }
            acked.push(seq);
        }
        let Some(core) = weak.upgrade() else { return };
        if acked.is_empty() {
            continue;
        }
        if let Err(error) = acknowledge(&core, &sender, acked).await {
            // The entries stay; they are sent again and dropped as duplicates.
            tracing::warn!(%sender, %error, "outbox acknowledgement failed");
            tokio::time::sleep(Duration::from_millis(core.config.delivery.retry_min_ms)).await;
        }
    }
}

/// Removes the entries `seqs` of `sender`'s outbox: their receivers committed them (or they
/// were given up).
pub(crate) async fn acknowledge(
    core: &Core,
    sender: &EntityAddress,
    seqs: Vec<u64>,
) -> Result<(), CommitError> {
    let mut writes = WriteSet::new(sender.clone());
    writes.messaging_mut().acked = seqs;
    core.state.commit(writes).await
}

/// Sends one entry until the receiver commits it (or it is given up). False if the directory
/// is gone.
async fn deliver_one(weak: &Weak<Core>, sender: &EntityAddress, entry: OutboxEntry) -> bool {
    let started = Instant::now();
    let mut wait: Option<Duration> = None;
    loop {
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
            let Some(core) = weak.upgrade() else {
                return false;
            };
            core.stats.redeliveries.fetch_add(1, Ordering::Relaxed);
        }
        let Some(attempt) = attempt(weak, sender, &entry).await else {
            return false;
        };
        let Some(core) = weak.upgrade() else {
            return false;
        };
        let config = &core.config.delivery;
        let give_up_after = Duration::from_millis(config.give_up_after_ms);
        match attempt {
            TellAttempt::Acknowledged => return true,
            TellAttempt::Retry(error) if started.elapsed() < give_up_after => {
                let (min, max) = (config.retry_min_ms, config.retry_max_ms);
                let next = wait.map_or(Duration::from_millis(min), |wait| {
                    (wait * 2).min(Duration::from_millis(max))
                });
                wait = Some(next);
                tracing::debug!(from = %sender, to = %entry.to, seq = entry.seq, %error, "tell not acknowledged; retrying");
            }
            TellAttempt::Retry(error) | TellAttempt::DeadLetter(error) => {
                dead_letter(&core, sender, &entry, &error);
                return true;
            }
        }
    }
}

/// What one attempt to deliver an outbox tell came to.
#[derive(Debug)]
#[non_exhaustive]
pub enum TellAttempt {
    /// The receiver committed it (now or before: a duplicate is acknowledged too).
    Acknowledged,
    /// It may succeed later (the receiver was busy, absent or unreachable): send it again.
    Retry(MessageError),
    /// The receiver answered the message itself with an error: it is given up (a dead letter).
    DeadLetter(MessageError),
}

/// One attempt to deliver `entry` of `sender`'s outbox: waits for the sender's tenant's message
/// rate, sends the tell with its origin (sender and sequence number, which the receiver's
/// dedup keys on) and waits for the receiver's acknowledgement. `None` if the directory is gone.
/// A dead letter is not counted here ([`dead_letter`]), since a retried one may be given up
/// later too.
pub(crate) async fn attempt(
    weak: &Weak<Core>,
    sender: &EntityAddress,
    entry: &OutboxEntry,
) -> Option<TellAttempt> {
    let mut core = weak.upgrade()?;
    // Tells leave at the sender's tenant's message rate: a fan-out waits in the durable
    // outbox instead of filling shared inboxes.
    if let Some(binding) = core.types.get(&sender.type_key()) {
        let limits = binding.limits;
        let gate = core
            .gates
            .gate(&sender.tenant, limits.concurrent_guests_max.max(1));
        drop(core);
        let waited = gate
            .take_message_token(limits.messages_per_second, limits.messages_burst)
            .await;
        let again = weak.upgrade()?;
        if waited {
            again.stats.throttled_tells.fetch_add(1, Ordering::Relaxed);
        }
        core = again;
    }
    let link = LinkKey::Tell(sender.clone(), entry.seq);
    let mut meta = MessageMeta::from_origin(Origin::Entity {
        sender: sender.clone(),
        seq: entry.seq,
    });
    if let Some(parent) = core.trace_links.get(&link) {
        meta.trace = Some(Box::new(MessageTrace::new(Some(parent))));
    }
    let timeout = Duration::from_millis(core.config.delivery.ack_timeout_ms);
    let router = core.router.clone();
    drop(core);
    let reply = router
        .ask(entry.to.clone(), entry.payload.clone(), meta, timeout)
        .await;
    Some(match reply {
        Ok(_) => {
            if let Some(core) = weak.upgrade() {
                core.trace_links.forget(&link);
            }
            TellAttempt::Acknowledged
        }
        Err(error) if is_retryable(error.kind) => TellAttempt::Retry(error),
        Err(error) => TellAttempt::DeadLetter(error),
    })
}

/// Gives up `entry`: counts it, warns (once per window and kind) and forgets its trace link.
pub(crate) fn dead_letter(
    core: &Core,
    sender: &EntityAddress,
    entry: &OutboxEntry,
    error: &MessageError,
) {
    core.stats.dead_letters.fetch_add(1, Ordering::Relaxed);
    let warning = EntityWarning::DeadLetter {
        receiver: entry.to.type_key(),
        kind: error.kind,
    };
    if core.warnings.first_in_window(&warning) {
        tracing::warn!(from = %sender, to = %entry.to, seq = entry.seq, %error, "tell given up (dead letter)");
    }
    core.trace_links
        .forget(&LinkKey::Tell(sender.clone(), entry.seq));
}
