//! [`EntityRef`]: a client's reusable handle on one entity (Akka's `EntityRef`). Everything a
//! message by address looks up on every send — the tenant and its rate bucket, the type's
//! registration and the entity's shard, and, once the entity is live here, its cell — is
//! resolved once and looked up again only when it changed (the tenant's records or bucket, the
//! type's registration, the cell). The guarantees are [`Node::tell`]'s and [`Node::ask`]'s:
//! the same quota, routing, buffering and order. What a handle resolves, without the node it
//! came from, is a [`ResolvedRoute`]: the node keeps those too, for its senders by address
//! (`routes`).

use super::rate::TenantBucket;
use crate::node::{Node, NodeError};
use std::sync::Arc;
use std::time::Duration;
use tessera_contract::{EntityAddress, ErrorKind, MessageError};
use tessera_metadata::Tenant;
use tessera_sharding::EntityRoute;

/// A reusable handle on one entity, from [`Node::entity_ref`]. Sending takes `&mut self`: a
/// handle is one sender's; make another for another sender.
///
/// ```no_run
/// # async fn demo(node: std::sync::Arc<tessera_host::node::Node>) -> Result<(), tessera_host::node::NodeError> {
/// use std::time::Duration;
/// use tessera_contract::EntityAddress;
/// let mut counter = node.entity_ref(EntityAddress::new("default", "counter", "c-1"))?;
/// let add = rmp_serde::to_vec_named(&serde_json::json!({"Add": 5})).unwrap();
/// counter.tell(add).await?;
/// let get = rmp_serde::to_vec_named(&serde_json::json!("Get")).unwrap();
/// let reply = counter.ask(get, Duration::from_secs(1)).await?;
/// # Ok(()) }
/// ```
pub struct EntityRef {
    node: Arc<Node>,
    resolved: ResolvedRoute,
}

/// Everything a message by address looks up, resolved for one entity: the region's route to it
/// and its tenant's rate quota. Owned by a handle, or by a thread's sender routes.
pub(in crate::node) struct ResolvedRoute {
    pub(in crate::node) route: EntityRoute,
    tenant: TenantQuota,
}

/// The tenant's rate quota as of a generation of the tenant records.
struct TenantQuota {
    generation: u64,
    tenant: Arc<Tenant>,
    bucket: Arc<TenantBucket>,
}

impl std::fmt::Debug for EntityRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntityRef")
            .field("route", &self.resolved.route)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// A reusable handle on the entity at `to`: an error if its tenant does not exist or its
    /// type is not deployed.
    pub fn entity_ref(self: &Arc<Self>, to: EntityAddress) -> Result<EntityRef, NodeError> {
        Ok(EntityRef {
            node: self.clone(),
            resolved: self.resolve_route(to)?,
        })
    }

    /// The route to `to` and its tenant's quota, resolved now.
    pub(in crate::node) fn resolve_route(
        &self,
        to: EntityAddress,
    ) -> Result<ResolvedRoute, NodeError> {
        let tenant = self.tenant_quota(&to.tenant)?;
        let route = self.region.route_to(to)?;
        Ok(ResolvedRoute { route, tenant })
    }

    fn tenant_quota(&self, name: &str) -> Result<TenantQuota, NodeError> {
        // The generation first: a change after it moves it, so this record is looked up again.
        let generation = self.catalog.tenants_generation();
        let tenant = self
            .catalog
            .tenant(name)
            .ok_or_else(|| NodeError::NotFound(format!("no tenant {name}")))?;
        let bucket = self.rate.bucket(
            name,
            tenant.quotas.messages_per_second,
            tenant.quotas.messages_burst,
            generation,
        );
        Ok(TenantQuota {
            generation,
            tenant,
            bucket,
        })
    }
}

impl EntityRef {
    /// The entity this handle sends to.
    pub fn address(&self) -> &EntityAddress {
        self.resolved.route.address()
    }

    /// Sends a one-way message, as [`Node::tell`] does.
    pub async fn tell(&mut self, payload: Vec<u8>) -> Result<(), NodeError> {
        self.node.check_forwardable(self.address(), &payload)?;
        self.resolved.admit(&self.node)?;
        Ok(self.resolved.route.tell(payload).await?)
    }

    /// Sends a message and waits for its reply, as [`Node::ask`] does.
    pub async fn ask(&mut self, payload: Vec<u8>, timeout: Duration) -> Result<Vec<u8>, NodeError> {
        self.node.check_forwardable(self.address(), &payload)?;
        self.resolved.admit(&self.node)?;
        Ok(self.resolved.route.ask(payload, Some(timeout)).await?)
    }
}

impl ResolvedRoute {
    /// Admits a message by the tenant's rate quota (looking the tenant up again if its records
    /// or its bucket changed), as [`Node::tell`] admits one by address.
    pub(in crate::node) fn admit(&mut self, node: &Node) -> Result<(), NodeError> {
        let quota = &self.tenant;
        if quota.generation != node.catalog.tenants_generation() || quota.bucket.is_retired() {
            self.refresh_quota(node)?;
        }
        let quotas = &self.tenant.tenant.quotas;
        if self
            .tenant
            .bucket
            .try_take(quotas.messages_per_second, quotas.messages_burst)
        {
            return Ok(());
        }
        Err(self.over_rate(node))
    }

    /// Looks the tenant's quota up again (its records or its bucket changed).
    #[cold]
    fn refresh_quota(&mut self, node: &Node) -> Result<(), NodeError> {
        self.tenant = node.tenant_quota(&self.route.address().tenant)?;
        Ok(())
    }

    /// Counts and says that the tenant is over its message rate.
    #[cold]
    fn over_rate(&self, node: &Node) -> NodeError {
        let quotas = &self.tenant.tenant.quotas;
        let to = self.route.address();
        node.count_quota_rejection(&to.tenant, Some(&to.entity_type), "message_rate");
        NodeError::Message(MessageError::new(
            ErrorKind::QuotaExceeded,
            format!(
                "tenant {} is over its message rate of {} per second",
                to.tenant, quotas.messages_per_second
            ),
        ))
    }
}
