//! How a running entity reaches other entities. The runtime calls a [`Router`] for a guest's
//! `ask`, and the entity layer's delivery service calls it for every outbox tell and due
//! reminder; the sharding layer implements it (the region routes to the entity's home, on this
//! node or another), so a message enters the sharding layer exactly once.

use super::address::EntityAddress;
use super::envelope::{MessageMeta, Reply};
use super::error::{ErrorKind, MessageError};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A boxed future a trait object can return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Routes messages made by entities to their target entity.
pub trait Router: Send + Sync + 'static {
    /// Sends `payload` to `to` with `meta` (origin, call chain) and waits for the reply, at most
    /// `timeout`. For a message with an origin the reply is the receiver's acknowledgement of
    /// its own commit.
    fn ask(
        &self,
        to: EntityAddress,
        payload: Vec<u8>,
        meta: MessageMeta,
        timeout: Duration,
    ) -> BoxFuture<'static, Reply>;
}

/// A router that reaches nobody: for tools that run one entity alone (`tessera invoke`).
///
/// ```
/// use std::time::Duration;
/// use tessera_contract::{EntityAddress, MessageMeta, NoRoutes, Router};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let to = EntityAddress::new("t", "b", "2");
/// let reply = NoRoutes.ask(to, vec![], MessageMeta::default(), Duration::from_secs(1));
/// assert!(reply.await.is_err());
/// # });
/// ```
pub struct NoRoutes;

impl Router for NoRoutes {
    fn ask(
        &self,
        to: EntityAddress,
        _payload: Vec<u8>,
        _meta: MessageMeta,
        _timeout: Duration,
    ) -> BoxFuture<'static, Reply> {
        let error = MessageError::new(
            ErrorKind::Unavailable,
            format!("{to} is not reachable: this entity runs alone"),
        );
        Box::pin(async move { Err(error) })
    }
}
