//! How the fake host runs a message: [`FakeBackend`], the `Backend` behind every [`Ctx`] a
//! [`TestHost`] hands out, and the hooks the [`Harness`](super::Harness) uses around each
//! message and lifecycle call. It owns the host's rules as a test sees them: a message's
//! writes are pending until it commits and are dropped when it fails, reads see the message's
//! own writes, state writes in `deactivate` and messages in `activate` or `deactivate` panic as the
//! host traps on them, asks are answered by the scripts on [`TestHost`], and timers fire earliest first.

use core::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use super::host::{FakeState, TestHost};
use super::records::{Scheduled, SentAsk, SentTell};
use crate::ctx::Backend;
use crate::{Address, Ctx, Error, Level, TimerId};

impl TestHost {
    pub(super) fn ctx(&self) -> Ctx {
        Ctx::new(Box::new(FakeBackend {
            state: Rc::clone(&self.state),
        }))
    }

    pub(super) fn commit(&self) {
        let mut state = self.state.borrow_mut();
        let pending = core::mem::take(&mut state.pending);
        for (key, value) in pending {
            match value {
                Some(bytes) => state.committed.insert(key, bytes),
                None => state.committed.remove(&key),
            };
        }
    }

    pub(super) fn discard(&self) {
        self.state.borrow_mut().pending.clear();
    }

    pub(super) fn begin_activation(&self) {
        self.state.borrow_mut().passivation_requested = false;
    }

    pub(super) fn set_lifecycle_call(&self, call: Option<&'static str>) {
        self.state.borrow_mut().lifecycle_call = call;
    }

    /// Marks the earliest due live timer fired and returns its id and payload.
    pub(super) fn take_due_timer(&self) -> Option<(TimerId, Vec<u8>)> {
        let mut state = self.state.borrow_mut();
        let now_ms = state.now_ms;
        let timer = state
            .timers
            .iter_mut()
            .filter(|timer| timer.is_live() && timer.due_ms <= now_ms)
            .min_by_key(|timer| (timer.due_ms, timer.id))?;
        timer.fired = true;
        Some((timer.id, timer.payload.clone()))
    }
}

struct FakeBackend {
    state: Rc<RefCell<FakeState>>,
}

impl FakeBackend {
    /// Panics like the host traps: state writes only while handling a message or in
    /// `activate` (a migration).
    fn require_writes(&self, what: &str) {
        if self.state.borrow().lifecycle_call == Some("activate") {
            return;
        }
        self.require_message(what);
    }

    /// Panics like the host traps: messages only while handling a message.
    fn require_message(&self, what: &str) {
        if let Some(call) = self.state.borrow().lifecycle_call {
            panic!(
                "`{what}` is only allowed while handling a message, not in {call} (the host traps)"
            );
        }
    }
}

impl Backend for FakeBackend {
    fn self_address(&self) -> Address {
        self.state.borrow().address.clone()
    }

    fn get(&self, key: &str) -> Option<Vec<u8>> {
        let state = self.state.borrow();
        match state.pending.get(key) {
            Some(pending) => pending.clone(),
            None => state.committed.get(key).cloned(),
        }
    }

    fn put(&self, key: &str, value: &[u8]) {
        self.require_writes("put");
        self.state
            .borrow_mut()
            .pending
            .insert(key.to_string(), Some(value.to_vec()));
    }

    fn delete(&self, key: &str) {
        self.require_writes("delete");
        self.state
            .borrow_mut()
            .pending
            .insert(key.to_string(), None);
    }

    fn tell(&self, to: &Address, payload: &[u8]) -> Result<(), Error> {
        self.require_message("tell");
        self.state.borrow_mut().tells.push(SentTell {
            to: to.clone(),
            payload: payload.to_vec(),
        });
        Ok(())
    }

    fn ask(&self, to: &Address, payload: &[u8], timeout_ms: u32) -> Result<Vec<u8>, Error> {
        self.require_message("ask");
        let is_self = *to == self.state.borrow().address;
        // The handler is taken out while it runs so that it may use the `TestHost` itself.
        let handler = self.state.borrow_mut().ask_handlers.remove(to);
        let reply = match (is_self, handler) {
            (true, _) => Err(Error::failed("an entity may not ask itself")),
            (false, None) => Err(Error::failed(format!(
                "no scripted reply for an ask to {to}"
            ))),
            (false, Some(mut handler)) => {
                let reply = handler(payload);
                self.state
                    .borrow_mut()
                    .ask_handlers
                    .entry(to.clone())
                    .or_insert(handler);
                reply
            }
        };
        self.state.borrow_mut().asks.push(SentAsk {
            to: to.clone(),
            payload: payload.to_vec(),
            timeout: Duration::from_millis(u64::from(timeout_ms)),
            reply: reply.clone(),
        });
        reply
    }

    fn schedule(&self, delay_ms: u64, payload: &[u8]) -> u64 {
        self.require_message("schedule");
        let mut state = self.state.borrow_mut();
        let id = state.next_timer;
        state.next_timer += 1;
        let due_ms = state.now_ms.saturating_add(delay_ms);
        state.timers.push(Scheduled {
            id: TimerId::from_raw(id),
            delay: Duration::from_millis(delay_ms),
            due_ms,
            payload: payload.to_vec(),
            cancelled: false,
            fired: false,
        });
        id
    }

    fn cancel(&self, timer: u64) {
        let mut state = self.state.borrow_mut();
        if let Some(timer) = state
            .timers
            .iter_mut()
            .find(|t| t.id.as_raw() == timer && t.is_live())
        {
            timer.cancelled = true;
        }
    }

    fn passivate(&self) {
        self.state.borrow_mut().passivation_requested = true;
    }

    fn log(&self, level: Level, message: &str) {
        self.state
            .borrow_mut()
            .logs
            .push((level, message.to_string()));
    }

    fn now_ms(&self) -> u64 {
        self.state.borrow().now_ms
    }
}
