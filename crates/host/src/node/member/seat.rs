//! Where the shard coordinator runs. A single node runs it for its whole life. In a cluster it
//! runs on the metadata primary — allocations are catalog commands, and the primary orders
//! them — so the seat follows the plane's status: when this node becomes primary of a view it
//! starts a coordinator for that view (its epoch: it takes the catalog's coordinator seat
//! before it reads the committed allocation table), and when another node takes over, or a
//! later view begins, it detaches its own, whose task then ends. A detached coordinator that
//! has not noticed yet (a stalled process) is fenced by the catalog, which refuses decisions
//! of any epoch but the seated one. The mesh is told the primary each time, so
//! regions' commands reach whichever node holds the seat.

use super::mesh::Mesh;
use std::sync::Arc;
use tessera_metadata::{MetadataPlane, PlaneStatus};
use tessera_sharding::{
    Coordinator, CoordinatorError, CoordinatorHandle, MemberSet, ShardingConfig, Switchboard,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What a coordinator is started with, each time this node takes the seat.
#[derive(Clone)]
pub(crate) struct SeatParts {
    pub(crate) node: String,
    pub(crate) config: ShardingConfig,
    pub(crate) members: watch::Receiver<MemberSet>,
    pub(crate) switchboard: Arc<Switchboard>,
    pub(crate) plane: Arc<dyn MetadataPlane>,
}

/// The coordinator seat of this node.
pub(crate) enum CoordinatorSeat {
    /// A single node: the coordinator always runs here.
    Always {
        /// Kept so the coordinator's queries stay open for the node's life.
        _coordinator: CoordinatorHandle,
    },
    /// A cluster node: a task follows the metadata primary.
    Following(JoinHandle<()>),
}

impl CoordinatorSeat {
    /// A single node's seat: starts the coordinator now.
    pub(crate) fn always(parts: SeatParts) -> Result<CoordinatorSeat, CoordinatorError> {
        let handle =
            Coordinator::start(parts.config, parts.members, parts.switchboard, parts.plane)?;
        Ok(CoordinatorSeat::Always {
            _coordinator: handle,
        })
    }

    /// A cluster node's seat: runs the coordinator while `status` names this node primary.
    pub(crate) fn following(
        parts: SeatParts,
        mut status: watch::Receiver<PlaneStatus>,
        mesh: Arc<Mesh>,
    ) -> CoordinatorSeat {
        let task = tokio::spawn(async move {
            // The running coordinator and the view it was seated in.
            let mut seated: Option<(CoordinatorHandle, u64)> = None;
            loop {
                let (primary, view) = {
                    let status = status.borrow_and_update();
                    (status.primary.clone(), status.view)
                };
                mesh.set_primary(primary.clone());
                let here = primary.as_deref() == Some(parts.node.as_str());
                // A coordinator of an earlier view goes, even when this node is primary again:
                // the catalog takes decisions from the coordinator of the latest seat only.
                if let Some((handle, seated_view)) = &seated
                    && (!here || *seated_view != view)
                {
                    handle.disconnect(&parts.switchboard);
                    seated = None;
                    tracing::info!(node = %parts.node, ?primary, view, "the shard coordinator moved away");
                }
                if here && seated.is_none() {
                    match Coordinator::start_in_epoch(
                        parts.config.clone(),
                        view,
                        parts.members.clone(),
                        parts.switchboard.clone(),
                        parts.plane.clone(),
                    ) {
                        Ok(handle) => {
                            tracing::info!(node = %parts.node, view, "this node runs the shard coordinator");
                            seated = Some((handle, view));
                        }
                        Err(error) => {
                            tracing::error!(%error, "the shard coordinator could not start here");
                        }
                    }
                }
                if status.changed().await.is_err() {
                    break; // the plane stopped
                }
            }
            if let Some((handle, _)) = seated {
                handle.disconnect(&parts.switchboard);
            }
        });
        CoordinatorSeat::Following(task)
    }
}

impl Drop for CoordinatorSeat {
    fn drop(&mut self) {
        if let CoordinatorSeat::Following(task) = self {
            task.abort();
        }
    }
}
