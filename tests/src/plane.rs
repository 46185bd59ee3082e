//! A metadata plane on a transport of its own, for tests and benchmarks that run voters
//! without the rest of a node: the node itself shares one transport between the plane and
//! the sharding layer (the host's mesh).

use std::sync::Arc;
use tessera_cluster::{Inbound, Transport};
use tessera_consensus::group::{GROUP_INBOUND_MAX, GroupFrame, GroupInbound, GroupOutbox};
use tokio::sync::mpsc;

/// Sends the plane's frames on a transport that carries nothing else.
struct DedicatedOutbox(Arc<Transport<GroupFrame>>);

impl GroupOutbox for DedicatedOutbox {
    fn send(&self, to: &str, frame: GroupFrame) {
        // A refused send is counted by the transport; the protocol resends what matters.
        let _ = self.0.send(to, &frame);
    }
}

/// The outbox and inbound queue of a plane that has `transport` to itself. Spawns the task
/// that hands received messages to the plane; it ends when the transport closes.
///
/// ```no_run
/// # async fn example(
/// #     transport: std::sync::Arc<tessera_cluster::Transport<tessera_consensus::group::GroupFrame>>,
/// #     inbound: tessera_cluster::Inbound<tessera_consensus::group::GroupFrame>,
/// # ) {
/// let (outbox, inbound) = tessera_tests::plane::dedicated_transport(transport, inbound);
/// # let _ = (outbox, inbound);
/// # }
/// ```
pub fn dedicated_transport(
    transport: Arc<Transport<GroupFrame>>,
    mut inbound: Inbound<GroupFrame>,
) -> (Arc<dyn GroupOutbox>, GroupInbound) {
    let (to_plane, plane_inbound) = mpsc::channel(GROUP_INBOUND_MAX);
    tokio::spawn(async move {
        while let Some(incoming) = inbound.recv().await {
            // Full: the plane is behind, and the protocol resends what matters.
            let _ = to_plane.try_send((incoming.from, incoming.message));
        }
    });
    (Arc::new(DedicatedOutbox(transport)), plane_inbound)
}
