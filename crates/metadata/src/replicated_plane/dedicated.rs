//! A metadata plane on a transport of its own, for tests and benchmarks that run voters
//! without the rest of a node: the node itself shares one transport between the plane and
//! the sharding layer (see `node::mesh`).

use super::{PLANE_INBOUND_MAX, PlaneInbound, PlaneMessage, PlaneOutbox};
use std::sync::Arc;
use tessera_cluster::{Inbound, Transport};
use tokio::sync::mpsc;

/// Sends plane messages on a transport that carries nothing else.
struct DedicatedOutbox(Arc<Transport<PlaneMessage>>);

impl PlaneOutbox for DedicatedOutbox {
    fn send(&self, to: &str, message: PlaneMessage) {
        // A refused send is counted by the transport; the protocol resends what matters.
        let _ = self.0.send(to, &message);
    }
}

/// The outbox and inbound queue of a plane that has `transport` to itself. Spawns the task
/// that hands received messages to the plane; it ends when the transport closes.
///
/// ```no_run
/// # async fn example(
/// #     transport: std::sync::Arc<tessera_cluster::Transport<tessera_metadata::replicated_plane::PlaneMessage>>,
/// #     inbound: tessera_cluster::Inbound<tessera_metadata::replicated_plane::PlaneMessage>,
/// # ) {
/// let (outbox, inbound) = tessera_metadata::replicated_plane::dedicated_transport(transport, inbound);
/// # let _ = (outbox, inbound);
/// # }
/// ```
pub fn dedicated_transport(
    transport: Arc<Transport<PlaneMessage>>,
    mut inbound: Inbound<PlaneMessage>,
) -> (Arc<dyn PlaneOutbox>, PlaneInbound) {
    let (to_plane, plane_inbound) = mpsc::channel(PLANE_INBOUND_MAX);
    tokio::spawn(async move {
        while let Some(incoming) = inbound.recv().await {
            // Full: the plane is behind, and the protocol resends what matters.
            let _ = to_plane.try_send((incoming.from, incoming.message));
        }
    });
    (Arc::new(DedicatedOutbox(transport)), plane_inbound)
}
