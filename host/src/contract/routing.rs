//! How a running entity reaches other entities. The runtime calls a [`Router`] for a guest's
//! `tell` and `ask`; the sharding layer implements it (the region routes to the entity's home,
//! on this node or another), so a guest message enters the sharding layer exactly once.

use super::address::EntityAddress;
use super::envelope::Reply;
use super::error::{ErrorKind, MessageError};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A boxed future a trait object can return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Routes `tell` and `ask` made by a guest to their target entity.
pub trait Router: Send + Sync + 'static {
    /// Sends a one-way message; resolves once the message is routed (delivered to a mailbox,
    /// buffered or forwarded). `Err` means it was refused (unknown type, full mailbox, ...).
    fn tell(
        &self,
        from: &EntityAddress,
        to: EntityAddress,
        payload: Vec<u8>,
    ) -> BoxFuture<'static, Result<(), MessageError>>;

    /// Sends a message and waits for its reply, at most `timeout`.
    fn ask(
        &self,
        from: &EntityAddress,
        to: EntityAddress,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> BoxFuture<'static, Reply>;
}

/// A router that reaches nobody: for tools that run one entity alone (`tessera invoke`).
///
/// ```
/// use tessera_host::contract::{EntityAddress, NoRoutes, Router};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let from = EntityAddress::new("t", "a", "1");
/// assert!(NoRoutes.tell(&from, EntityAddress::new("t", "b", "2"), vec![]).await.is_err());
/// # });
/// ```
pub struct NoRoutes;

impl Router for NoRoutes {
    fn tell(
        &self,
        _from: &EntityAddress,
        to: EntityAddress,
        _payload: Vec<u8>,
    ) -> BoxFuture<'static, Result<(), MessageError>> {
        let error = unreachable_target(&to);
        Box::pin(async move { Err(error) })
    }

    fn ask(
        &self,
        _from: &EntityAddress,
        to: EntityAddress,
        _payload: Vec<u8>,
        _timeout: Duration,
    ) -> BoxFuture<'static, Reply> {
        let error = unreachable_target(&to);
        Box::pin(async move { Err(error) })
    }
}

fn unreachable_target(to: &EntityAddress) -> MessageError {
    MessageError::new(
        ErrorKind::Unavailable,
        format!("{to} is not reachable: this entity runs alone"),
    )
}
