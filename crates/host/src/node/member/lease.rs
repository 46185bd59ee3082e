//! The node's lease on its shards ([`NodeLease`]), kept alive by a committed
//! [`Command::RenewLease`] every [`LeaseConfig::renew_every_ms`]. Each renewal is stamped with
//! the moment it was sent; only a commit — which needs a majority of the voters — extends the
//! lease, and a refusal (this member was declared down, or removed) ends it at once. A node
//! cut off from the majority therefore stops serving its shards within one lease duration,
//! before the coordinator may give them to anyone else (see `tessera_sharding::lease`).

use std::sync::{Arc, Weak};
use std::time::Duration;
use tessera_metadata::{Command, MetadataError, MetadataPlane};
use tessera_sharding::lease::{LeaseConfig, NodeLease};

/// Renews `lease` once: granted → extended from the send time; refused → revoked.
pub(in crate::node) async fn renew(
    node: &str,
    plane: &dyn MetadataPlane,
    lease: &NodeLease,
) -> Result<(), MetadataError> {
    let renewal = lease.lease().renewal_sent(lease.now_ms());
    let command = Command::RenewLease {
        node: node.to_string(),
    };
    match plane.submit(command).await {
        Ok(_) => {
            lease.lease().renewal_committed(renewal);
            Ok(())
        }
        Err(error @ (MetadataError::LeaseRefused { .. } | MetadataError::NoMember(_))) => {
            tracing::warn!(%node, %error, "lease refused: this node stops serving its shards");
            lease.lease().revoke();
            Err(error)
        }
        Err(error) => Err(error),
    }
}

/// Renews `lease` every `config.renew_every_ms` until the plane is dropped. Each renewal runs
/// on its own (bounded by the lease duration), so one stuck without a quorum does not delay
/// the next.
pub(in crate::node) fn keep(
    node: String,
    plane: Weak<dyn MetadataPlane>,
    lease: Arc<NodeLease>,
    config: LeaseConfig,
) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(config.renew_every_ms));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let bound = Duration::from_millis(config.duration_ms);
        loop {
            every.tick().await;
            let Some(plane) = plane.upgrade() else {
                return;
            };
            let (node, lease) = (node.clone(), lease.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(bound, renew(&node, plane.as_ref(), &lease)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => tracing::debug!(%node, %error, "lease not renewed"),
                    Err(_) => tracing::debug!(%node, "lease renewal timed out"),
                }
            });
        }
    });
}
