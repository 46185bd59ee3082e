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
//! [`RETIRE_OFF_WORKER_GROWTH_BYTES`] is therefore dropped here, on a thread of its own at a
//! lower priority ([`RETIRING_NICE`]), so the requests queued on a worker no longer wait for
//! it. Not in the idle scheduling class the guest pool uses: the unmapping holds the process's
//! address-space lock, and a thread that the scheduler starves while holding it stalls every
//! thread that maps memory (measured: an I/O worker waited 328 ms to instantiate). Its pool
//! slot stays taken until then: it is given back only once wasmtime may reuse it.
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

/// The retiring thread's nice value: below the I/O workers (0), so a woken worker mostly wins
/// the core, but in the ordinary scheduling class, so the thread is never starved for long —
/// while it unmaps a memory it holds the process's address-space lock, which every thread that
/// maps or protects memory (an instantiation, a growing guest, a large allocation) waits on.
pub const RETIRING_NICE: i32 = 10;

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

/// The retiring thread: drops what it receives, at a lower priority than the I/O workers.
fn retire_all(receiver: &Receiver<Retired>, retired: &AtomicU64) {
    lower_priority();
    for dropped in receiver {
        drop(dropped);
        retired.fetch_add(1, Ordering::Relaxed);
    }
}

/// Gives the calling thread the nice value [`RETIRING_NICE`].
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `gettid` and `setpriority` take and return plain integers; with the calling
    // thread's id, `setpriority` acts on that thread only.
    unsafe {
        let thread = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, thread as libc::id_t, RETIRING_NICE);
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
