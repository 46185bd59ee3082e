//! One live entity: its state (the instance and what a message needs, [`state`]) behind a lock,
//! a bounded [`Mailbox`], and the task that works through the mailbox one message at a time and
//! passivates the entity when asked, idle or evicted.
//!
//! A message may also run on its sender's task, without the hop through the cell's task: when
//! nothing is waiting in the mailbox (so no earlier message of that sender can be overtaken) and
//! the state lock is free, the sender claims the lock and runs the message itself
//! ([`CellShared::claim`], [`ClaimedRun`]), as far as it goes without waiting. What is left of
//! it then (its tenant's gate, a guest call that yields, a commit) is handed to the cell's
//! task, counted as unfinished: the task finishes it the next time it takes the lock, before
//! anything else. Whoever holds the lock runs one message at a time, so the entity still sees
//! its messages one by one; the task takes the lock for each message it runs and for
//! passivation, so a passivation never overlaps a message.

mod mailbox;
mod state;

pub(crate) use mailbox::{CellMessage, Mailbox};

use super::core::Core;
use futures_util::lock::{Mutex, MutexGuard, OwnedMutexGuard};
use state::{CellState, PausedMessage};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tessera_contract::{EntityAddress, Envelope, ShardId};
use tessera_state::remember::RememberOp;
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

/// A cell's hold on a slot of the instance pool, shared by the cell and the directory's
/// table: whether the cell holds an instance, and the request to give it back, which a cell
/// waiting at its tenant's gate answers at once (the `Release` in its mailbox may wait behind
/// its backlog). So one tenant's backlog waiting to run never keeps the pool's slots from
/// another tenant's entities that need them.
#[derive(Debug, Default)]
pub(crate) struct InstanceHold {
    held: AtomicBool,
    wanted: Notify,
}

impl InstanceHold {
    /// Whether the cell holds an instance now.
    pub(crate) fn is_held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    /// Notes whether the cell holds an instance (the cell's own bookkeeping).
    fn set_held(&self, held: bool) {
        self.held.store(held, Ordering::Relaxed);
    }

    /// A cell that needs a slot asks for this one (its `Release` is posted): the cell is no
    /// longer counted a holder, and gives the instance back now if it waits at its gate.
    pub(crate) fn want_back(&self) {
        self.set_held(false);
        self.wanted.notify_waiters();
    }

    /// Resolves at the next [`want_back`](Self::want_back) after it was made.
    fn wanted(&self) -> tokio::sync::futures::Notified<'_> {
        self.wanted.notified()
    }
}

/// What a cell's task and the senders that run its messages share.
pub(crate) struct CellShared {
    /// The entity's working state; whoever runs a message holds it. An async mutex whose
    /// unlock is one atomic while nobody waits (only the cell's task ever waits for it; a
    /// sender only tries it), where Tokio's takes its waiter list's lock on every unlock.
    state: Arc<Mutex<CellState>>,
    /// Messages posted to the mailbox and not finished yet: waiting, or taken by the task and
    /// running. Only while it is zero may a sender run a message itself.
    unfinished: AtomicUsize,
    /// Messages started so far (by the task or by senders), for idle passivation: the task's
    /// idle check sees whether it moved, so a message reads no clock for it.
    started: AtomicU64,
    /// Wakes the task when a message run by a sender asked for passivation.
    wake: Notify,
    /// The use-clock tick of the last message sent to the cell, for least-recently-used
    /// eviction and instance release.
    last_used: AtomicU64,
    /// Set (under the directory's lock, by the cell's task holding the state lock) when the
    /// cell leaves the directory: a sender holding the cell directly must go through the
    /// directory again.
    gone: AtomicBool,
}

impl CellShared {
    /// Counts a message starting. Called with the state lock held (one message at a time), so
    /// a load and a store suffice.
    fn touch(&self) {
        let started = self.started.load(Ordering::Relaxed);
        self.started
            .store(started.wrapping_add(1), Ordering::Relaxed);
    }

    /// Messages started so far.
    fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// The use-clock tick of the last message sent to the cell.
    pub(crate) fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }

    /// Notes a message sent to the cell at use-clock tick `tick`.
    pub(crate) fn used_at(&self, tick: u64) {
        self.last_used.store(tick, Ordering::Relaxed);
    }

    /// Notes that the cell has left the directory.
    pub(crate) fn mark_gone(&self) {
        self.gone.store(true, Ordering::Release);
    }

    /// Whether the cell has left the directory (it ends, or has ended).
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Claims the cell to run `envelope` on the caller's task: possible when no message is
    /// waiting or running, the entity's instance is up on the active version, and its calls
    /// have been short. The claim holds the cell until the message is done; it must be run
    /// ([`ClaimedRun::run`]). Gives the envelope back when the cell cannot be claimed: post it
    /// to the mailbox instead.
    ///
    /// The claim borrows the cell (no reference count moves): for a sender that holds the cell
    /// ([`LiveCell`](super::LiveCell)). [`claim_owned`](Self::claim_owned) is for one that
    /// found it under the directory's lock.
    pub(crate) fn claim(&self, envelope: Envelope) -> Result<ClaimedRun<'_>, Envelope> {
        match self.lock_to_run_here(|| self.state.try_lock()) {
            Some(state) => Ok(ClaimedRun {
                claim: Claim::Borrowed(self, state),
                envelope,
            }),
            None => Err(envelope),
        }
    }

    /// [`claim`](Self::claim), holding the cell by reference count: the claim outlives the
    /// directory's lock it was made under.
    pub(crate) fn claim_owned(
        self: &Arc<Self>,
        envelope: Envelope,
    ) -> Result<ClaimedRun<'static>, Envelope> {
        match self.lock_to_run_here(|| self.state.try_lock_owned()) {
            Some(state) => Ok(ClaimedRun {
                claim: Claim::Owned(self.clone(), state),
                envelope,
            }),
            None => Err(envelope),
        }
    }

    /// The state lock, taken by `try_lock` (borrowed or owned), when a message may run on its
    /// sender's task now; `None` otherwise.
    fn lock_to_run_here<G: std::ops::DerefMut<Target = CellState>>(
        &self,
        try_lock: impl FnOnce() -> Option<G>,
    ) -> Option<G> {
        if self.unfinished.load(Ordering::Acquire) != 0 {
            return None;
        }
        let mut state = try_lock()?;
        // Read again under the lock: a message taken by the task since is counted until done,
        // and a cell leaves the directory only under this lock, so one not gone now stays (and
        // its task, which ends only after it left, will take the lock again).
        let runs =
            self.unfinished.load(Ordering::Acquire) == 0 && !self.is_gone() && state.can_run_here();
        runs.then_some(state)
    }

    /// After a message run by a sender: hand what is left of it to the task (counted as
    /// unfinished, so no sender runs a message before it), and wake the task for it or for
    /// a passivation the message asked for. Called with the lock held.
    fn ran_here(&self, state: &mut CellState, paused: Option<PausedMessage>) {
        let woken = paused.is_some() || state.passivate_requested;
        if let Some(paused) = paused {
            self.unfinished.fetch_add(1, Ordering::AcqRel);
            state.leave_paused(paused);
        }
        if woken {
            self.wake.notify_one();
        }
    }
}

/// How a claim holds its cell: borrowed from a sender that holds the cell, or by reference
/// count.
enum Claim<'cell> {
    Borrowed(&'cell CellShared, MutexGuard<'cell, CellState>),
    Owned(Arc<CellShared>, OwnedMutexGuard<CellState>),
}

/// A message claimed to run on its sender's task, holding its cell
/// ([`Entities::deliver_here`](super::Entities::deliver_here),
/// [`LiveCell::run_here`](super::LiveCell::run_here)). It must be run: dropping it unrun drops
/// the message (an ask's asker sees the entity gone).
pub struct ClaimedRun<'cell> {
    claim: Claim<'cell>,
    envelope: Envelope,
}

impl ClaimedRun<'_> {
    /// Runs the message on the caller's thread as far as it goes without waiting — most
    /// messages finish there (a short guest call with nothing to commit), with no future made
    /// for them. What has to wait (its tenant's gate, a guest call that yields, a commit) is
    /// handed to the cell's task, which polls it again with its own waker, so the sender never
    /// waits for the entity and a message is never dropped half-way.
    pub fn run(self) {
        let ClaimedRun { claim, envelope } = self;
        match claim {
            Claim::Borrowed(shared, mut state) => run_claimed(shared, &mut state, envelope),
            Claim::Owned(shared, mut state) => run_claimed(&shared, &mut state, envelope),
        }
    }
}

/// Runs `envelope` with the cell's lock held (see [`ClaimedRun::run`]). The guest call's first
/// poll needs no waker of the sender's: whatever is left is polled again by the cell's task,
/// which a future checks its readiness at. Polled by hand like this, a message that does not
/// wait is no future at all: one ~1 KiB allocation and its copy fewer per message, 9,516 ->
/// 9,191 instructions through `EntityRef` (`benches/instructions.sh`, 2026-12-04).
fn run_claimed(shared: &CellShared, state: &mut CellState, envelope: Envelope) {
    shared.touch();
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let paused = state.start_here(envelope, &mut context);
    shared.ran_here(state, paused);
}

enum Next {
    Message(CellMessage),
    Idle,
    /// A sender left its message paused, or a message it ran asked for passivation.
    Woken,
    Closed,
}

/// The task of one cell.
pub(crate) struct Cell {
    shared: Arc<CellShared>,
    receiver: mpsc::Receiver<CellMessage>,
    generation: u64,
    /// The type's idle timeout, as of the last message.
    idle: Option<Duration>,
    /// The idle timer, made once (see [`Cell::receive`]).
    idle_timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// What the idle timer saw: the started-message count at its last check, and how many
    /// checks in a row found it unchanged.
    idle_seen: u64,
    quiet_checks: u8,
    stop_waiters: Vec<oneshot::Sender<()>>,
}

impl Cell {
    /// Starts the cell of `address` and returns its mailbox (of `capacity` messages).
    pub(crate) fn spawn(
        core: Arc<Core>,
        address: EntityAddress,
        shard: ShardId,
        generation: u64,
        capacity: usize,
        hold: Arc<InstanceHold>,
        tick: u64,
    ) -> Mailbox {
        let (sender, receiver) = mpsc::channel(capacity);
        let state = CellState::new(core, address, shard, hold);
        let shared = Arc::new(CellShared {
            state: Arc::new(Mutex::new(state)),
            unfinished: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            wake: Notify::new(),
            last_used: AtomicU64::new(tick),
            gone: AtomicBool::new(false),
        });
        let cell = Cell {
            shared: shared.clone(),
            receiver,
            generation,
            idle: None,
            idle_timer: None,
            idle_seen: 0,
            quiet_checks: 0,
            stop_waiters: Vec::new(),
        };
        tokio::spawn(cell.run());
        Mailbox::new(sender, shared)
    }

    async fn run(mut self) {
        let cell_state = self.shared.state.clone();
        {
            let mut state = cell_state.lock().await;
            state.remember(RememberOp::Started);
            self.idle = state.idle_timeout();
        }
        loop {
            let next = self.receive().await;
            let mut state = cell_state.lock().await;
            // What a sender left of its message goes before anything posted since.
            if state.finish_paused().await {
                let unfinished = self.shared.unfinished.fetch_sub(1, Ordering::AcqRel);
                debug_assert!(
                    unfinished > 0,
                    "a paused message was counted when a sender left it"
                );
            }
            let passivate = match next {
                Next::Message(message) => {
                    self.shared.touch();
                    let passivate = self.handle(&mut state, message).await;
                    let unfinished = self.shared.unfinished.fetch_sub(1, Ordering::AcqRel);
                    debug_assert!(
                        unfinished > 0,
                        "a message the cell takes was counted when it was posted"
                    );
                    passivate
                }
                // A message may have started on a sender's task since the timer fired.
                Next::Idle => self.shared.started() == self.idle_seen,
                // Its paused message is finished above; a passivation asked for is seen below.
                Next::Woken => false,
                Next::Closed => true,
            };
            let passivate = passivate || state.passivate_requested || !self.stop_waiters.is_empty();
            if passivate
                && state
                    .passivate(
                        &mut self.receiver,
                        self.generation,
                        !self.stop_waiters.is_empty(),
                    )
                    .await
            {
                break;
            }
            self.idle = state.idle_timeout();
        }
        // Report a stop only once this cell (and everything it holds: the instance, the
        // directory handle) is gone, so a waiter may reopen what it used.
        let waiters = std::mem::take(&mut self.stop_waiters);
        drop(self);
        drop(cell_state);
        for waiter in waiters {
            let _ = waiter.send(());
        }
    }

    /// Handles one message from the mailbox; true when it asks for passivation.
    async fn handle(&mut self, state: &mut CellState, message: CellMessage) -> bool {
        match message {
            CellMessage::Deliver(envelope) => {
                state.process(envelope).await;
                false
            }
            CellMessage::Activate => {
                if let Err(error) = state.respawn().await {
                    tracing::warn!(entity = %state.address(), %error, "respawn failed");
                }
                false
            }
            CellMessage::Passivate => true,
            CellMessage::Release => {
                state.release_instance().await;
                false
            }
            CellMessage::Stop(done) => {
                self.stop_waiters.push(done);
                true
            }
        }
    }

    /// The next message, or `Idle` once none started for the type's idle timeout. The idle
    /// timer is one per cell and fires every half timeout (as Akka checks idle entities), not
    /// re-armed per message: two checks in a row that find no message started mean the entity
    /// has been idle for at least the timeout, so it is passivated between one and one and a
    /// half timeouts after its last message started — and a message reads no clock for it.
    async fn receive(&mut self) -> Next {
        match self.receiver.try_recv() {
            Ok(message) => return Next::Message(message),
            Err(mpsc::error::TryRecvError::Disconnected) => return Next::Closed,
            Err(mpsc::error::TryRecvError::Empty) => {}
        }
        let (shared, receiver) = (&self.shared, &mut self.receiver);
        let Some(idle) = self.idle else {
            tokio::select! {
                received = receiver.recv() => return received.map_or(Next::Closed, Next::Message),
                () = shared.wake.notified() => return Next::Woken,
            }
        };
        let check_every = (idle / 2).max(Duration::from_millis(1));
        let timer = self
            .idle_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(check_every)));
        loop {
            tokio::select! {
                received = receiver.recv() => {
                    return received.map_or(Next::Closed, Next::Message);
                }
                () = shared.wake.notified() => return Next::Woken,
                () = timer.as_mut() => {
                    timer.as_mut().reset(Instant::now() + check_every);
                    let started = shared.started();
                    if started == self.idle_seen {
                        self.quiet_checks = self.quiet_checks.saturating_add(1);
                    } else {
                        self.idle_seen = started;
                        self.quiet_checks = 0;
                    }
                    if self.quiet_checks >= 2 {
                        self.quiet_checks = 0;
                        return Next::Idle;
                    }
                }
            }
        }
    }
}
