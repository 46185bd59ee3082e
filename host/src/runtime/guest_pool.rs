//! Where long guest calls run: threads of their own, off the workers that serve I/O.
//!
//! Most guest calls finish in their first poll, on the worker that started them (no hop, no
//! allocation beyond the boxed call). A call still running at its first epoch tick — a
//! CPU-heavy message, or one waiting on an ask — is moved to the guest pool and finished
//! there; the caller may also send a call to the pool straight away (the entity layer does
//! for an entity whose last call needed the pool, so a CPU-heavy entity does not spend a tick
//! on an I/O worker at every message). So however many guests burn CPU, the node's I/O workers keep answering sockets and
//! running short calls: a tenant's long calls queue on the pool (where the tenant gate decides
//! who runs), never in front of another tenant's requests. The pool's threads are in the OS's
//! idle scheduling class where it has one (Linux `SCHED_IDLE`), so a woken I/O worker takes a
//! core from a spinning guest at once instead of after its time slice. The price: while the
//! host's own threads keep every core busy, long guest calls wait (their wall-clock bound
//! still ends them); short calls, which run on the I/O workers, do not.

use crate::contract::{BoxFuture, ErrorKind, MessageError};
use std::task::Poll;

/// Threads that finish guest calls which outlast their first poll.
pub(crate) struct GuestPool {
    /// `Some` until drop, which shuts it down without waiting (dropping a Tokio runtime
    /// inside another one would panic).
    runtime: Option<tokio::runtime::Runtime>,
}

impl GuestPool {
    /// A pool of `threads` threads.
    pub(crate) fn new(threads: usize) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("tessera-guest")
            .on_thread_start(lower_priority)
            .enable_all()
            .build()?;
        Ok(GuestPool {
            runtime: Some(runtime),
        })
    }

    /// Runs `call`: if `first_poll_here`, polled once here first; what is left of it is
    /// finished on the pool. Says where it finished. An error only if the pool lost the call
    /// (it panicked, or the pool is shutting down) — whatever the call owned is gone with it.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        mut call: BoxFuture<'static, T>,
        first_poll_here: bool,
    ) -> Result<(T, RanOn), MessageError> {
        if first_poll_here {
            let first =
                std::future::poll_fn(|context| Poll::Ready(call.as_mut().poll(context))).await;
            if let Poll::Ready(output) = first {
                return Ok((output, RanOn::Caller));
            }
        }
        let Some(runtime) = &self.runtime else {
            return Ok((call.await, RanOn::Caller));
        };
        let output = runtime.spawn(call).await.map_err(|error| {
            MessageError::new(
                ErrorKind::Internal,
                format!("the guest call was lost on the guest pool: {error}"),
            )
        })?;
        Ok((output, RanOn::Pool))
    }
}

/// Where a guest call finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RanOn {
    /// In its first poll, on the caller's thread.
    Caller,
    /// On the guest pool.
    Pool,
}

impl Drop for GuestPool {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Puts the calling thread in the idle scheduling class (Linux `SCHED_IDLE`): it runs when no
/// ordinary thread of the host wants the core, and a woken I/O worker preempts it at once
/// rather than after its time slice. Falls back to the lowest `nice` if that is refused.
/// Best effort: neither needs privilege on Linux; elsewhere threads keep the default.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `sched_setscheduler` reads the `sched_param` we pass by pointer and keeps no
    // reference to it; `setpriority` takes plain integers. With pid 0 / thread id both act on
    // the calling thread only.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        if libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 {
            let thread = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, thread as libc::id_t, 19);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_finished_in_its_first_poll_stays_on_the_caller() {
        let pool = GuestPool::new(1).expect("pool");
        let caller = std::thread::current().id();
        let (ran_on, place) = pool
            .run(Box::pin(async { std::thread::current().id() }), true)
            .await
            .expect("ran");
        assert_eq!(ran_on, caller);
        assert_eq!(place, RanOn::Caller);
    }

    #[tokio::test]
    async fn a_call_that_yields_finishes_on_the_pool() {
        let pool = GuestPool::new(1).expect("pool");
        let caller = std::thread::current().id();
        let ((started_on, finished_on), place) = pool
            .run(
                Box::pin(async {
                    let started = std::thread::current().id();
                    tokio::task::yield_now().await;
                    (started, std::thread::current().id())
                }),
                true,
            )
            .await
            .expect("ran");
        assert_eq!(started_on, caller);
        assert_ne!(finished_on, caller, "the rest ran on the pool");
        assert_eq!(place, RanOn::Pool);
    }

    #[tokio::test]
    async fn a_call_sent_to_the_pool_never_runs_on_the_caller() {
        let pool = GuestPool::new(1).expect("pool");
        let caller = std::thread::current().id();
        let (ran_on, place) = pool
            .run(Box::pin(async { std::thread::current().id() }), false)
            .await
            .expect("ran");
        assert_ne!(ran_on, caller);
        assert_eq!(place, RanOn::Pool);
    }

    #[tokio::test]
    async fn a_call_that_panics_on_the_pool_is_an_error() {
        let pool = GuestPool::new(1).expect("pool");
        let lost = pool
            .run(
                Box::pin(async {
                    tokio::task::yield_now().await;
                    panic!("a host call bug");
                }),
                true,
            )
            .await;
        let error: MessageError = match lost {
            Ok(((), _)) => panic!("a lost call reported success"),
            Err(error) => error,
        };
        assert_eq!(error.kind, ErrorKind::Internal);
    }
}
