//! The region's counters: what it refused, dropped, forwarded and moved, read by the metrics
//! layer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use tessera_contract::ErrorKind;
use tessera_contract::error::ERROR_KIND_COUNT;

/// What a region refused or dropped, for the metrics layer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegionCounters {
    /// Envelopes refused, by [`ErrorKind::code`] (every kind, zero included).
    pub refused: BTreeMap<&'static str, u64>,
    /// Tells that failed after they were accepted (no reply port to report on).
    pub tells_dropped: u64,
    /// Envelopes forwarded to another region.
    pub forwarded: u64,
    /// Forwarded envelopes the receiving region refused (its per-envelope batch result).
    pub forwards_refused: u64,
    /// Forwarded asks ended with a timeout (outcome unknown) because the connection to their
    /// owner was lost for `LOST_OWNER_GRACE` and did not come back.
    pub asks_orphaned: u64,
    /// Parts of shard state sent to a shard's new owner.
    pub shard_parts_sent: u64,
    /// Parts of shard state installed here (this node became a shard's owner).
    pub shard_parts_installed: u64,
    /// Parts of shard state refused (a peer sent state for a shard this node serves, for a
    /// type it does not know, or naming entities outside the shard).
    pub shard_parts_refused: u64,
    /// Times a shard transfer from here could not progress: a part refused, unanswered or not
    /// sent `TRANSFER_STALL_ATTEMPTS` (8) times in a row.
    pub shard_transfer_stalls: u64,
}

#[derive(Default)]
pub(crate) struct RegionStats {
    refused: [AtomicU64; ERROR_KIND_COUNT],
    tells_dropped: AtomicU64,
    forwarded: AtomicU64,
    forwards_refused: AtomicU64,
    asks_orphaned: AtomicU64,
    pub(crate) shard_parts_sent: AtomicU64,
    pub(crate) shard_parts_installed: AtomicU64,
    pub(crate) shard_parts_refused: AtomicU64,
    pub(crate) shard_transfer_stalls: AtomicU64,
}

impl RegionStats {
    pub(crate) fn count_refused(&self, kind: ErrorKind, tell: bool) {
        self.refused[kind.index()].fetch_add(1, Ordering::Relaxed);
        if tell {
            self.tells_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn count_forwards_refused(&self, count: u64) {
        self.forwards_refused.fetch_add(count, Ordering::Relaxed);
    }

    pub(crate) fn count_asks_orphaned(&self, count: u64) {
        self.asks_orphaned.fetch_add(count, Ordering::Relaxed);
    }

    pub(crate) fn count_forwarded(&self, count: u64) {
        self.forwarded.fetch_add(count, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RegionCounters {
        let refused = ErrorKind::all()
            .map(|kind| {
                (
                    kind.code(),
                    self.refused[kind.index()].load(Ordering::Relaxed),
                )
            })
            .filter(|(_, count)| *count > 0)
            .collect();
        RegionCounters {
            refused,
            tells_dropped: self.tells_dropped.load(Ordering::Relaxed),
            forwarded: self.forwarded.load(Ordering::Relaxed),
            forwards_refused: self.forwards_refused.load(Ordering::Relaxed),
            asks_orphaned: self.asks_orphaned.load(Ordering::Relaxed),
            shard_parts_sent: self.shard_parts_sent.load(Ordering::Relaxed),
            shard_parts_installed: self.shard_parts_installed.load(Ordering::Relaxed),
            shard_parts_refused: self.shard_parts_refused.load(Ordering::Relaxed),
            shard_transfer_stalls: self.shard_transfer_stalls.load(Ordering::Relaxed),
        }
    }
}
