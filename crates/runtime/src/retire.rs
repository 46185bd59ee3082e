//! Where large instances are dropped: a thread of their own in the OS's idle scheduling class,
//! off the I/O workers.
//!
//! Dropping an instance gives its pool slot back, and wasmtime resets the slot's linear memory
//! then: every page the guest touched is unmapped and freed (`madvise(MADV_DONTNEED)`), which
//! for a memory grown to tens of MiB holds the dropping thread in the kernel for milliseconds,
//! and holds the process's address-space lock meanwhile. Done on the I/O worker that dropped
//! the instance (after a trap, a swap, a passivation), that time is taken from every request
//! that worker would have served next: a tenant flooding entities that grow their memory to
//! the cap and trap (issue 33, finding 11) put 2–4 ms of unmapping in front of other tenants'
//! requests about twenty times a second. An instance whose memory grew past
//! [`RETIRE_OFF_WORKER_GROWTH_BYTES`] is therefore dropped here, on a thread of its own in the
//! OS's idle scheduling class (Linux `SCHED_IDLE`, as the guest pool's threads), so the
//! requests queued on a worker no longer wait for it, and a woken I/O worker takes the core
//! from it at once. The price, as for the guest pool: while it unmaps it holds the
//! address-space lock, and if ordinary threads keep every core busy meanwhile, a thread that
//! maps or protects memory (an instantiation, a large allocation) waits for it — in a memory
//! flood traced on 2 cores, one instantiation waited 328 ms. An ordinary low priority (nice 10)
//! bounded that better (46 ms) but left the other tenants' requests waiting behind the
//! unmapping often enough to miss the fairness target (`docs/performance.md`, fairness). Its
//! pool slot stays taken until it is dropped: it is given back only once wasmtime may reuse
//! it.
//!
//! The queue is bounded ([`RETIRING_MAX`]): while the host's own threads keep every core busy
//! this thread may not run, and instances waiting here hold memory and slots; past the bound,
//! or once the thread is gone, an instance is dropped where it is, as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

/// Instances whose memory grew past this many bytes are dropped on the retiring thread;
/// smaller ones (most: a counter's instance has about 1 MiB) cost little to drop in place.
pub const RETIRE_OFF_WORKER_GROWTH_BYTES: usize = 4 << 20;

/// Instances waiting to be dropped on the retiring thread; past it, an instance is dropped in
/// place.
pub const RETIRING_MAX: usize = 32;

/// Something to drop off the I/O workers (an instance's store with its pool slot).
pub(crate) type Retired = Box<dyn Send>;

/// The sending side of the retiring thread, one per runtime, cloned into every instance.
#[derive(Clone)]
pub(crate) struct Retirement {
    sender: SyncSender<Retired>,
    /// Dropped on the retiring thread so far.
    retired: Arc<AtomicU64>,
}

impl Retirement {
    /// Starts the retiring thread. It ends once every [`Retirement`] (the runtime's and its
    /// instances') is dropped.
    pub(crate) fn start() -> std::io::Result<Self> {
        let (retirement, receiver) = Retirement::unstarted();
        let retired = retirement.retired.clone();
        std::thread::Builder::new()
            .name("tessera-retire".into())
            .spawn(move || retire_all(&receiver, &retired))?;
        Ok(retirement)
    }

    /// A retirement whose queue `receiver` takes, with no thread draining it.
    fn unstarted() -> (Self, Receiver<Retired>) {
        let (sender, receiver) = std::sync::mpsc::sync_channel(RETIRING_MAX);
        let retirement = Retirement {
            sender,
            retired: Arc::default(),
        };
        (retirement, receiver)
    }

    /// Drops `retired` on the retiring thread, or here if its queue is full or it is gone.
    pub(crate) fn retire(&self, retired: Retired) {
        match self.sender.try_send(retired) {
            Ok(()) => {}
            Err(TrySendError::Full(retired) | TrySendError::Disconnected(retired)) => {
                drop(retired);
            }
        }
    }

    /// Instances dropped on the retiring thread so far.
    pub(crate) fn retired(&self) -> u64 {
        self.retired.load(Ordering::Relaxed)
    }
}

/// The retiring thread: drops what it receives, in the idle scheduling class.
fn retire_all(receiver: &Receiver<Retired>, retired: &AtomicU64) {
    crate::guest_pool::lower_priority();
    for dropped in receiver {
        drop(dropped);
        retired.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts its drops.
    struct Counted(Arc<AtomicU64>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn past_the_bound_an_instance_is_dropped_in_place() {
        let (retirement, receiver) = Retirement::unstarted();
        let drops = Arc::new(AtomicU64::new(0));
        for _ in 0..RETIRING_MAX {
            retirement.retire(Box::new(Counted(drops.clone())));
        }
        assert_eq!(
            drops.load(Ordering::Relaxed),
            0,
            "the queue holds its bound"
        );
        retirement.retire(Box::new(Counted(drops.clone())));
        assert_eq!(
            drops.load(Ordering::Relaxed),
            1,
            "one past it is dropped here"
        );
        drop(receiver);
        assert_eq!(
            drops.load(Ordering::Relaxed),
            1 + RETIRING_MAX as u64,
            "the queue's own are dropped with it"
        );
        retirement.retire(Box::new(Counted(drops.clone())));
        assert_eq!(
            drops.load(Ordering::Relaxed),
            2 + RETIRING_MAX as u64,
            "with the thread gone, in place"
        );
    }

    #[test]
    fn the_retiring_thread_drops_what_it_is_given() {
        let retirement = Retirement::start().expect("the thread starts");
        let drops = Arc::new(AtomicU64::new(0));
        retirement.retire(Box::new(Counted(drops.clone())));
        let waited = std::time::Instant::now();
        while retirement.retired() < 1 {
            assert!(
                waited.elapsed() < std::time::Duration::from_secs(10),
                "not dropped within 10 s"
            );
            std::thread::yield_now();
        }
        assert_eq!(drops.load(Ordering::Relaxed), 1);
    }
}
