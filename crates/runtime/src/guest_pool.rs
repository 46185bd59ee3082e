//! Where long guest calls run: threads of their own, off the workers that serve I/O.
//!
//! A guest call runs first on the worker that delivered its message, where almost every call
//! finishes (no hop, no allocation beyond the boxed call); a call waiting on a host call (a
//! state read, an ask) stays there too, since waiting costs the worker nothing. A call whose
//! polls have taken one epoch tick of the worker's time in all — a CPU-heavy message — is
//! moved to the guest pool and finished there, and the caller may send the entity's next call
//! there at once (the entity layer does for an entity whose last call was heavy). Time is
//! measured per poll, so a call that merely waited in a busy run queue does not count as
//! heavy; the first poll is not measured at all — a guest yields at the first epoch tick it
//! runs into, so a call that finishes in its first poll ran for less than a tick, and one that
//! does not is judged by the polls after it (a CPU-heavy call moves after its second tick, not
//! its first), which spares almost every call two clock reads. A caller may make that first poll
//! itself and hand the call over afterwards ([`GuestPool::run_polled`]): the entity layer
//! does, on a message's sender's task, so a message that finishes there needs no future.
//! So however many guests burn CPU, the node's I/O workers keep answering sockets and
//! running short calls: a tenant's heavy calls queue on the pool (where the tenant gate decides
//! who runs), never in front of another tenant's requests. The pool's threads are in the OS's
//! idle scheduling class where it has one (Linux `SCHED_IDLE`), so a woken I/O worker takes a
//! core from a spinning guest at once instead of after its time slice. The price: while the
//! host's own threads keep every core busy, heavy guest calls wait (their wall-clock bound
//! still ends them); short calls, which run on the I/O workers, do not.

use std::task::Poll;
use std::time::{Duration, Instant};
use tessera_contract::{BoxFuture, ErrorKind, MessageError};

/// Threads that finish guest calls which turn out CPU-heavy.
pub(crate) struct GuestPool {
    /// `Some` until drop, which shuts it down without waiting (dropping a Tokio runtime
    /// inside another one would panic).
    runtime: Option<tokio::runtime::Runtime>,
    /// Poll time after which a call counts as heavy and moves here.
    heavy_after: Duration,
}

impl GuestPool {
    /// A pool of `threads` threads taking calls whose polls add up to `heavy_after`.
    pub(crate) fn new(threads: usize, heavy_after: Duration) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("tessera-guest")
            .on_thread_start(lower_priority)
            .enable_all()
            .build()?;
        Ok(GuestPool {
            runtime: Some(runtime),
            heavy_after,
        })
    }

    /// Runs `call`. If `start_here`, it runs on the caller's thread until it finishes or its
    /// polls add up to the heavy threshold, and only then moves to the pool; otherwise it goes
    /// to the pool at once. Says whether it was heavy (its polls, here and on the pool, took
    /// the threshold or more). An error only if the pool lost the call (it panicked, or the
    /// pool is shutting down) — whatever the call owned is gone with it.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        mut call: BoxFuture<'static, T>,
        start_here: bool,
    ) -> Result<(T, Weight), MessageError> {
        let mut busy = Duration::ZERO;
        // The first poll is not timed: a guest yields at the first epoch tick it runs into, so
        // a call that finishes in its first poll (most do) ran less than a tick.
        if start_here && let Some(output) = self.poll_here(&mut call, &mut busy, true).await {
            return Ok((output, Weight::of(busy, self.heavy_after)));
        }
        self.finish_on_pool(call, busy).await
    }

    /// [`run`](Self::run) with `start_here`, for a call whose first poll its caller made (on
    /// this task or another; the entity layer makes it on a message's sender's task): its
    /// later polls are timed here until it finishes or turns heavy.
    pub(crate) async fn run_polled<T: Send + 'static>(
        &self,
        mut call: BoxFuture<'static, T>,
    ) -> Result<(T, Weight), MessageError> {
        let mut busy = Duration::ZERO;
        if let Some(output) = self.poll_here(&mut call, &mut busy, false).await {
            return Ok((output, Weight::of(busy, self.heavy_after)));
        }
        self.finish_on_pool(call, busy).await
    }

    /// Polls `call` on the caller's thread, each poll when woken, until it finishes (`Some`)
    /// or its timed polls add up to the heavy threshold (`None`: it has not finished). With
    /// `untimed_first`, the first poll is not timed.
    async fn poll_here<T>(
        &self,
        call: &mut BoxFuture<'static, T>,
        busy: &mut Duration,
        mut untimed_first: bool,
    ) -> Option<T> {
        std::future::poll_fn(|context| {
            let polled = if std::mem::take(&mut untimed_first) {
                call.as_mut().poll(context)
            } else {
                poll_timed(call, context, busy)
            };
            match polled {
                Poll::Ready(output) => Poll::Ready(Some(output)),
                Poll::Pending if *busy >= self.heavy_after => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }

    /// Finishes `call` on the pool (on the caller, if the pool is gone), adding its polls
    /// there to the `busy` time it took so far.
    async fn finish_on_pool<T: Send + 'static>(
        &self,
        mut call: BoxFuture<'static, T>,
        mut busy: Duration,
    ) -> Result<(T, Weight), MessageError> {
        let Some(runtime) = &self.runtime else {
            return Ok((call.await, Weight::Heavy));
        };
        let heavy_after = self.heavy_after;
        let on_pool = async move {
            let output =
                std::future::poll_fn(|context| poll_timed(&mut call, context, &mut busy)).await;
            (output, Weight::of(busy, heavy_after))
        };
        runtime.spawn(on_pool).await.map_err(|error| {
            MessageError::new(
                ErrorKind::Internal,
                format!("the guest call was lost on the guest pool: {error}"),
            )
        })
    }
}

/// Polls `call` once, adding the time the poll took (the guest's CPU time: host calls never
/// block the thread) to `busy`.
fn poll_timed<T>(
    call: &mut BoxFuture<'static, T>,
    context: &mut std::task::Context<'_>,
    busy: &mut Duration,
) -> Poll<T> {
    let started = Instant::now();
    let polled = call.as_mut().poll(context);
    *busy += started.elapsed();
    polled
}

/// How much worker time a guest call took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    /// Less than one epoch tick in all its polls.
    Light,
    /// One epoch tick or more: a CPU-heavy call.
    Heavy,
}

impl Weight {
    fn of(busy: Duration, heavy_after: Duration) -> Self {
        if busy >= heavy_after {
            Weight::Heavy
        } else {
            Weight::Light
        }
    }
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
pub(crate) fn lower_priority() {
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

    const TICK: Duration = Duration::from_millis(10);

    /// Busy for `duration` on the calling thread (a guest running between epoch checks).
    fn spin_for(duration: Duration) {
        let started = Instant::now();
        while started.elapsed() < duration {
            std::hint::spin_loop();
        }
    }

    #[tokio::test]
    async fn a_short_call_stays_on_the_caller_even_when_it_waits() {
        let pool = GuestPool::new(1, TICK).expect("pool");
        let caller = std::thread::current().id();
        let ((started_on, finished_on), weight) = pool
            .run(
                Box::pin(async {
                    let started = std::thread::current().id();
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    (started, std::thread::current().id())
                }),
                true,
            )
            .await
            .expect("ran");
        assert_eq!((started_on, finished_on), (caller, caller));
        assert_eq!(weight, Weight::Light, "waiting is not work");
    }

    /// A guest busy for three ticks, yielding at each (as the epoch callback makes it): its
    /// first tick is not timed, its second makes it heavy, its third runs on the pool.
    #[tokio::test]
    async fn a_heavy_call_finishes_on_the_pool() {
        let pool = GuestPool::new(1, TICK).expect("pool");
        let caller = std::thread::current().id();
        let ((started_on, finished_on), weight) = pool
            .run(
                Box::pin(async {
                    let started = std::thread::current().id();
                    for _ in 0..2 {
                        spin_for(TICK);
                        tokio::task::yield_now().await;
                    }
                    spin_for(TICK);
                    (started, std::thread::current().id())
                }),
                true,
            )
            .await
            .expect("ran");
        assert_eq!(started_on, caller);
        assert_ne!(finished_on, caller, "the rest ran on the pool");
        assert_eq!(weight, Weight::Heavy);
    }

    /// A call that yields (as a guest does at an epoch tick) goes back to the executor: it is
    /// not polled again until woken, so other tasks of the worker run in between.
    #[tokio::test]
    async fn a_call_that_yields_is_not_polled_again_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let pool = GuestPool::new(1, TICK).expect("pool");
        let polls = std::sync::Arc::new(AtomicUsize::new(0));
        let counted = polls.clone();
        let call: BoxFuture<'static, ()> = Box::pin(std::future::poll_fn(move |context| {
            if counted.fetch_add(1, Ordering::Relaxed) == 0 {
                context.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        }));
        let mut run = Box::pin(pool.run(call, true));
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(run.as_mut().poll(&mut context).is_pending());
        assert_eq!(
            polls.load(Ordering::Relaxed),
            1,
            "the call was polled again without being woken"
        );
        assert!(matches!(
            run.as_mut().poll(&mut context),
            Poll::Ready(Ok(((), Weight::Light)))
        ));
    }

    #[tokio::test]
    async fn a_call_sent_to_the_pool_never_runs_on_the_caller() {
        let pool = GuestPool::new(1, TICK).expect("pool");
        let caller = std::thread::current().id();
        let (ran_on, weight) = pool
            .run(Box::pin(async { std::thread::current().id() }), false)
            .await
            .expect("ran");
        assert_ne!(ran_on, caller);
        assert_eq!(
            weight,
            Weight::Light,
            "a light call on the pool is still light"
        );
    }

    #[tokio::test]
    async fn a_call_that_panics_on_the_pool_is_an_error() {
        let pool = GuestPool::new(1, TICK).expect("pool");
        let lost = pool
            .run(
                Box::pin(async {
                    tokio::task::yield_now().await;
                    panic!("a host call bug");
                }),
                false,
            )
            .await;
        let error: MessageError = match lost {
            Ok(((), _)) => panic!("a lost call reported success"),
            Err(error) => error,
        };
        assert_eq!(error.kind, ErrorKind::Internal);
    }
}
