//! The sending side of a shard's state transfer: one task per shard handed off. It opens an
//! export — a snapshot of the shard's rows, read part by part ([`ShardStates::export`]) — and
//! sends one part at a time, reading the next only once the new owner acknowledged the last
//! (made it durable), so a transfer holds at most one part ([`TRANSFER_BYTES_IN_FLIGHT_MAX`])
//! whatever the shard's size. A part not acknowledged within the request timeout, refused, or
//! not sent is sent again after that timeout; after [`TRANSFER_STALL_ATTEMPTS`] such attempts
//! in a row the transfer cannot progress: that is counted (`shard_transfer_stalls`), logged as
//! an error (the first per peer and error in a window, [`RegionWarning`]), and the transfer
//! starts over from part 0 of a new snapshot, which lets go of the old one.
//!
//! [`TRANSFER_BYTES_IN_FLIGHT_MAX`]: tessera_state::TRANSFER_BYTES_IN_FLIGHT_MAX

use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::link::LinkMessage;
use crate::region::Shared;
use crate::region::warnings::RegionWarning;
use tessera_contract::{Allocation, ShardKey};
use tessera_state::{ShardPart, ShardScope, ShardStates, StoreError};

/// Failed attempts in a row (each one request timeout) after which a transfer is counted and
/// logged as unable to progress, and started over.
pub const TRANSFER_STALL_ATTEMPTS: u32 = 8;

/// The new owner's answer to one part.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) generation: u64,
    pub(crate) index: u32,
    pub(crate) error: Option<String>,
}

/// One shard's transfer: what it sends, where, and how its failures are counted.
pub(super) struct Sending {
    pub(super) shared: Arc<Shared>,
    pub(super) states: Arc<dyn ShardStates>,
    pub(super) scope: ShardScope,
    pub(super) key: ShardKey,
    pub(super) to: Allocation,
    pub(super) answers: mpsc::Receiver<Answer>,
    /// Failed attempts since the last acknowledged part.
    pub(super) failed: u32,
}

impl Sending {
    /// Sends the shard's state until the new owner holds every part.
    pub(super) async fn run(mut self) {
        if let Some(writer) = self.shared.remember.clone()
            && let Err(error) = writer.flush().await
        {
            tracing::warn!(key = %self.key, %error, "remembered ids not flushed before a handoff");
        }
        while !self.send_snapshot().await {}
    }

    /// Sends every part of a new snapshot; false if the transfer must start over.
    async fn send_snapshot(&mut self) -> bool {
        let (states, scope) = (self.states.clone(), self.scope.clone());
        let opened = tokio::task::spawn_blocking(move || states.export(&scope)).await;
        let mut parts = match opened.unwrap_or_else(|error| Err(task_failed(error))) {
            Ok(parts) => parts,
            Err(error) => return self.export_failed(&error).await,
        };
        loop {
            let read = tokio::task::spawn_blocking(move || {
                let next = parts.next();
                (parts, next)
            })
            .await;
            let next: Option<Result<ShardPart, StoreError>>;
            (parts, next) = match read {
                Ok(read) => read,
                Err(error) => return self.export_failed(&task_failed(error)).await,
            };
            let part = match next {
                Some(Ok(part)) => part,
                Some(Err(error)) => return self.export_failed(&error).await,
                // The last part ends an export; one that ends without it was cut short.
                None => {
                    let error = StoreError::Io("the export ended before its last part".into());
                    return self.export_failed(&error).await;
                }
            };
            let last = part.last;
            if !self.deliver(part).await {
                return false;
            }
            if last {
                return true;
            }
        }
    }

    /// Sends `part` until it is acknowledged (true), or the transfer stalls (false, start
    /// over; part 0 is sent again and again instead, as starting over would not help it).
    async fn deliver(&mut self, part: ShardPart) -> bool {
        let wait = self.shared.config.request_timeout;
        loop {
            let deadline = Instant::now() + wait;
            let outcome = match self.send(&part) {
                Ok(()) => self.answer(part.index, deadline).await,
                Err(error) => Err(error),
            };
            let error = match outcome {
                Ok(()) => {
                    self.failed = 0;
                    return true;
                }
                Err(error) => error,
            };
            tokio::time::sleep_until(deadline).await;
            if !self.failed_at(part.index, &error) && part.index > 0 {
                return false;
            }
        }
    }

    fn send(&self, part: &ShardPart) -> Result<(), String> {
        let message = LinkMessage::ShardState {
            key: self.key.clone(),
            generation: self.to.generation,
            from: self.shared.node.clone(),
            part: part.clone(),
        };
        match self
            .shared
            .switchboard
            .send_to_region(&self.to.node, message)
        {
            Ok(()) => {
                let sent = &self.shared.stats.shard_parts_sent;
                sent.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(error) => Err(format!("not sent: {error}")),
        }
    }

    /// Waits until `deadline` for the answer to part `index` of this move.
    async fn answer(&mut self, index: u32, deadline: Instant) -> Result<(), String> {
        loop {
            match tokio::time::timeout_at(deadline, self.answers.recv()).await {
                Err(_) => return Err("not acknowledged within the request timeout".into()),
                Ok(None) => return Err("the transfer was cancelled".into()),
                Ok(Some(answer))
                    if answer.generation == self.to.generation && answer.index == index =>
                {
                    return answer
                        .error
                        .map_or(Ok(()), |error| Err(format!("refused: {error}")));
                }
                Ok(Some(_)) => {}
            }
        }
    }

    /// The shard's state could not be read: counted as a failed attempt; the transfer starts
    /// over after a request timeout (false).
    async fn export_failed(&mut self, error: &StoreError) -> bool {
        self.failed_at(0, &error.to_string());
        tokio::time::sleep(self.shared.config.request_timeout).await;
        false
    }

    /// Counts a failed attempt at part `index`; answers false when the transfer has now failed
    /// [`TRANSFER_STALL_ATTEMPTS`] times in a row (counted and logged as stalled).
    fn failed_at(&mut self, index: u32, error: &str) -> bool {
        self.failed += 1;
        let (key, node) = (&self.key, &self.to.node);
        if !self.failed.is_multiple_of(TRANSFER_STALL_ATTEMPTS) {
            tracing::debug!(%key, to = %node, index, %error, "shard state part failed; sending again");
            return true;
        }
        let stalls = &self.shared.stats.shard_transfer_stalls;
        stalls.fetch_add(1, Ordering::Relaxed);
        let kind = RegionWarning::TransferStalled {
            node: node.clone(),
            error: RegionWarning::error_kind(&error),
        };
        if self.shared.warnings.first_in_window(&kind) {
            tracing::error!(
                %key,
                to = %node,
                index,
                attempts = self.failed,
                %error,
                "shard state transfer cannot progress"
            );
        }
        false
    }
}

fn task_failed(error: tokio::task::JoinError) -> StoreError {
    StoreError::Io(format!("the export task failed: {error}"))
}
