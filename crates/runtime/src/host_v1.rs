//! The 0.1.0 `host` interface, for components built against `tessera:entity@0.1.0`: every
//! call is the 0.2.0 one (`host`), with its types converted at the boundary. The two differ
//! only in what `activate` may do, which the instance decides, not the imports.

use super::bindings::v1::tessera::entity::{host, types};
use super::bindings::{self, GuestError};
use super::host::HostState;

impl types::Host for HostState {}

fn address_from_v1(address: types::Address) -> bindings::Address {
    bindings::Address {
        entity_type: address.entity_type,
        id: address.id,
    }
}

fn address_to_v1(address: bindings::Address) -> types::Address {
    types::Address {
        entity_type: address.entity_type,
        id: address.id,
    }
}

fn error_to_v1(error: GuestError) -> types::Error {
    match error {
        GuestError::BadMessage(message) => types::Error::BadMessage(message),
        GuestError::Rejected(message) => types::Error::Rejected(message),
        GuestError::Failed(message) => types::Error::Failed(message),
    }
}

fn level_from_v1(level: types::LogLevel) -> bindings::LogLevel {
    match level {
        types::LogLevel::Trace => bindings::LogLevel::Trace,
        types::LogLevel::Debug => bindings::LogLevel::Debug,
        types::LogLevel::Info => bindings::LogLevel::Info,
        types::LogLevel::Warn => bindings::LogLevel::Warn,
        types::LogLevel::Error => bindings::LogLevel::Error,
    }
}

/// A 0.1 guest's error, as the entity layer classifies them.
pub(crate) fn error_from_v1(error: types::Error) -> GuestError {
    match error {
        types::Error::BadMessage(message) => GuestError::BadMessage(message),
        types::Error::Rejected(message) => GuestError::Rejected(message),
        types::Error::Failed(message) => GuestError::Failed(message),
    }
}

impl host::Host for HostState {
    async fn self_address(&mut self) -> wasmtime::Result<types::Address> {
        bindings::tessera::entity::host::Host::self_address(self)
            .await
            .map(address_to_v1)
    }

    async fn get(&mut self, key: String) -> wasmtime::Result<Option<Vec<u8>>> {
        bindings::tessera::entity::host::Host::get(self, key).await
    }

    async fn put(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<()> {
        bindings::tessera::entity::host::Host::put(self, key, value).await
    }

    async fn delete(&mut self, key: String) -> wasmtime::Result<()> {
        bindings::tessera::entity::host::Host::delete(self, key).await
    }

    async fn tell(
        &mut self,
        to: types::Address,
        payload: Vec<u8>,
    ) -> wasmtime::Result<Result<(), types::Error>> {
        let told = bindings::tessera::entity::host::Host::tell(self, address_from_v1(to), payload);
        Ok(told.await?.map_err(error_to_v1))
    }

    async fn ask(
        &mut self,
        to: types::Address,
        payload: Vec<u8>,
        timeout_ms: u32,
    ) -> wasmtime::Result<Result<Vec<u8>, types::Error>> {
        let to = address_from_v1(to);
        let asked = bindings::tessera::entity::host::Host::ask(self, to, payload, timeout_ms);
        Ok(asked.await?.map_err(error_to_v1))
    }

    async fn schedule(&mut self, delay_ms: u64, payload: Vec<u8>) -> wasmtime::Result<u64> {
        bindings::tessera::entity::host::Host::schedule(self, delay_ms, payload).await
    }

    async fn cancel(&mut self, timer: u64) -> wasmtime::Result<()> {
        bindings::tessera::entity::host::Host::cancel(self, timer).await
    }

    async fn passivate(&mut self) -> wasmtime::Result<()> {
        bindings::tessera::entity::host::Host::passivate(self).await
    }

    async fn log(&mut self, level: types::LogLevel, message: String) -> wasmtime::Result<()> {
        bindings::tessera::entity::host::Host::log(self, level_from_v1(level), message).await
    }

    async fn now_ms(&mut self) -> wasmtime::Result<u64> {
        bindings::tessera::entity::host::Host::now_ms(self).await
    }
}
