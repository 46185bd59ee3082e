//! Where messages sent from inside an entity go. The runtime only knows this trait; the entity
//! layer (one node) or the sharding region (a cluster) implements it.

use crate::envelope::{EntityAddress, ErrorKind, MessageError, Reply};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// Routes `tell` and `ask` made by a guest to their target entity.
pub trait Router: Send + Sync + 'static {
    /// Delivers a one-way message. `Err` means the target refused it (unknown type, full
    /// mailbox, ...).
    fn tell(
        &self,
        from: &EntityAddress,
        to: EntityAddress,
        payload: Vec<u8>,
    ) -> Result<(), MessageError>;

    /// Sends a message and waits for its reply, at most `timeout`.
    fn ask(
        &self,
        from: &EntityAddress,
        to: EntityAddress,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Reply> + Send>>;
}

/// A router that reaches nobody: for tools that run one entity alone (`tessera invoke`).
///
/// ```
/// use tessera_host::envelope::EntityAddress;
/// use tessera_host::runtime::{NoRoutes, Router};
/// let from = EntityAddress::new("t", "a", "1");
/// assert!(NoRoutes.tell(&from, EntityAddress::new("t", "b", "2"), vec![]).is_err());
/// ```
pub struct NoRoutes;

impl Router for NoRoutes {
    fn tell(
        &self,
        _from: &EntityAddress,
        to: EntityAddress,
        _payload: Vec<u8>,
    ) -> Result<(), MessageError> {
        Err(unreachable_target(&to))
    }

    fn ask(
        &self,
        _from: &EntityAddress,
        to: EntityAddress,
        _payload: Vec<u8>,
        _timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Reply> + Send>> {
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
