//! The [`Backend`] of a real instance: the `tessera:entity/host` imports, plus the conversions
//! between the generated WIT types and the SDK's own.

use crate::ctx::Backend;
use crate::wit::tessera::entity::host;
use crate::wit::tessera::entity::types as wit;
use crate::{Activation, Address, Error, Level, Sender, TimerId};

/// Forwards every [`Ctx`](crate::Ctx) operation to the host imports.
pub(crate) struct WasmHost;

impl Backend for WasmHost {
    fn self_address(&self) -> Address {
        address_from_wit(host::self_address())
    }

    fn get(&self, key: &str) -> Option<Vec<u8>> {
        host::get(key)
    }

    fn put(&self, key: &str, value: &[u8]) {
        host::put(key, value);
    }

    fn delete(&self, key: &str) {
        host::delete(key);
    }

    fn tell(&self, to: &Address, payload: &[u8]) -> Result<(), Error> {
        host::tell(&address_to_wit(to), payload).map_err(error_from_wit)
    }

    fn ask(&self, to: &Address, payload: &[u8], timeout_ms: u32) -> Result<Vec<u8>, Error> {
        host::ask(&address_to_wit(to), payload, timeout_ms).map_err(error_from_wit)
    }

    fn schedule(&self, delay_ms: u64, payload: &[u8]) -> u64 {
        host::schedule(delay_ms, payload)
    }

    fn cancel(&self, timer: u64) {
        host::cancel(timer);
    }

    fn passivate(&self) {
        host::passivate();
    }

    fn log(&self, level: Level, message: &str) {
        host::log(level_to_wit(level), message);
    }

    fn now_ms(&self) -> u64 {
        host::now_ms()
    }
}

fn address_from_wit(address: wit::Address) -> Address {
    Address {
        entity_type: address.entity_type,
        id: address.id,
    }
}

fn address_to_wit(address: &Address) -> wit::Address {
    wit::Address {
        entity_type: address.entity_type.clone(),
        id: address.id.clone(),
    }
}

fn level_to_wit(level: Level) -> wit::LogLevel {
    match level {
        Level::Trace => wit::LogLevel::Trace,
        Level::Debug => wit::LogLevel::Debug,
        Level::Info => wit::LogLevel::Info,
        Level::Warn => wit::LogLevel::Warn,
        Level::Error => wit::LogLevel::Error,
    }
}

pub(crate) fn error_from_wit(error: wit::Error) -> Error {
    match error {
        wit::Error::BadMessage(reason) => Error::BadMessage(reason),
        wit::Error::Rejected(reason) => Error::Rejected(reason),
        wit::Error::Failed(reason) => Error::Failed(reason),
    }
}

pub(crate) fn error_to_wit(error: Error) -> wit::Error {
    match error {
        Error::BadMessage(reason) => wit::Error::BadMessage(reason),
        Error::Rejected(reason) => wit::Error::Rejected(reason),
        Error::Failed(reason) => wit::Error::Failed(reason),
    }
}

pub(crate) fn activation_from_wit(reason: wit::Activation) -> Activation {
    match reason {
        wit::Activation::FirstStart => Activation::FirstStart,
        wit::Activation::Restarted => Activation::Restarted,
        wit::Activation::Upgraded(from_version) => Activation::Upgraded { from_version },
        wit::Activation::RolledBack(from_version) => Activation::RolledBack { from_version },
    }
}

pub(crate) fn sender_from_wit(sender: wit::Sender) -> Sender {
    match sender {
        wit::Sender::Client => Sender::Client,
        wit::Sender::Entity(address) => Sender::Entity(address_from_wit(address)),
        wit::Sender::Reminder(timer) => Sender::Reminder(TimerId::from_raw(timer)),
    }
}
