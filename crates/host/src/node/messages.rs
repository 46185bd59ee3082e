//! Messages to entities (admitted by the tenant's rate quota, then routed by the region),
//! passivation, state inspection (read where the entity's shard lives), per-type status, the
//! shard table, and shutdown.

use super::sending::routes::{ByRegion, Tried};
use super::{Node, NodeError};
use std::time::Duration;
use tessera_contract::{
    EntityAddress, ErrorKind, MessageError, MessageMeta, MessageTrace, Origin, TypeKey,
};
use tessera_sharding::FORWARD_PAYLOAD_BYTES_MAX;

/// The most keys one state inspection returns, so inspecting a huge entity cannot exhaust host
/// memory (the region's bound on a state read).
pub const ENTITY_ENTRIES_MAX: usize = tessera_sharding::STATE_READ_ENTRIES_MAX;

/// The state of one entity type, for `tessera status`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TypeStatus {
    /// Type name.
    pub entity_type: String,
    /// The active version.
    pub active_version: u32,
    /// Versions deployed.
    pub versions: usize,
    /// Whether started entities are remembered.
    pub remember: bool,
    /// Live entities on this node.
    pub live_entities: usize,
    /// Remembered entities.
    pub remembered_entities: usize,
    /// The version this node runs, once it has bound (compiled) it: in a cluster it trails
    /// `active_version` for as long as this node takes to apply and compile a deploy made
    /// through another node.
    pub bound_version: Option<u32>,
}

impl Node {
    /// Sends a one-way message, after the tenant's rate quota admits it. Returns once the
    /// message is in the entity's mailbox, buffered for its shard, forwarded, or started on
    /// this task (an idle local entity's message runs here as far as it can without waiting).
    ///
    /// An entity this thread sends to again soon is told through a route the node keeps for
    /// the thread (`sending::routes`), as through an [`EntityRef`](super::EntityRef): the same
    /// quota, routing and order, without the shared tables' lookups. [`ask`](Self::ask) does
    /// the same.
    ///
    /// The address is borrowed: a message run here never copies it, and one that goes on
    /// (queued, buffered, forwarded) takes its own copy. In a cluster, a payload over
    /// [`FORWARD_PAYLOAD_BYTES_MAX`] is refused (`payload_too_large`): it could not be
    /// forwarded to another node. [`ask`](Self::ask) and [`tell_once`](Self::tell_once) refuse
    /// it alike.
    ///
    /// ```no_run
    /// # async fn demo(node: &tessera_host::node::Node) -> Result<(), tessera_host::node::NodeError> {
    /// use tessera_contract::EntityAddress;
    /// let counter = EntityAddress::new("default", "counter", "c-1");
    /// let add = rmp_serde::to_vec_named(&serde_json::json!({"Add": 5})).unwrap();
    /// node.tell(&counter, add).await?;
    /// # Ok(()) }
    /// ```
    pub async fn tell(&self, to: &EntityAddress, payload: Vec<u8>) -> Result<(), NodeError> {
        self.check_forwardable(to, &payload)?;
        match self.sender_routes.tell_here(self, to, payload)? {
            Tried::Sent(()) => Ok(()),
            Tried::NotSent(payload, by_region) => {
                let tell = |to, payload| self.region.tell(to, payload);
                self.send_by_region(to, payload, by_region, tell).await
            }
        }
    }

    /// Sends a message by address that this thread's route did not run: admitted here unless
    /// the route admitted it, then through the region (`send`); afterwards, the route picks the
    /// entity's cell up, or one is kept for the entity.
    async fn send_by_region<T, Sending>(
        &self,
        to: &EntityAddress,
        payload: Vec<u8>,
        by_region: ByRegion,
        send: impl FnOnce(EntityAddress, Vec<u8>) -> Sending,
    ) -> Result<T, NodeError>
    where
        Sending: Future<Output = Result<T, MessageError>>,
    {
        match by_region {
            ByRegion::Admitted => {
                let sent = send(to.clone(), payload).await?;
                self.sender_routes.sent_by_region(to);
                Ok(sent)
            }
            ByRegion::Missed { keep } => {
                self.admit(to)?;
                let sent = send(to.clone(), payload).await?;
                if keep {
                    self.sender_routes.keep(self, to);
                }
                Ok(sent)
            }
        }
    }

    /// How many entities the calling thread keeps a resolved route to, for its messages by
    /// address (at most `sender_routes_per_thread`): for tests and diagnostics.
    pub fn sender_routes_here(&self) -> usize {
        self.sender_routes.kept_here()
    }

    /// Sends a one-way message effectively once: the entity runs it at most once per `key`
    /// (within [`CLIENT_KEY_HORIZON_MS`](tessera_state::messaging::CLIENT_KEY_HORIZON_MS)),
    /// and this returns once it is committed — or once an earlier send with the same key was.
    /// A retry after an error or a lost answer is safe.
    pub async fn tell_once(
        &self,
        to: &EntityAddress,
        payload: Vec<u8>,
        key: String,
        timeout: Duration,
        trace: Option<MessageTrace>,
    ) -> Result<(), NodeError> {
        self.check_forwardable(to, &payload)?;
        self.admit(to)?;
        let mut meta = MessageMeta::from_origin(Origin::Client { key });
        meta.trace = trace.map(Box::new);
        self.region
            .ask_with(to.clone(), payload, meta, Some(timeout))
            .await?;
        Ok(())
    }

    /// Sends a message and waits for its reply.
    pub async fn ask(
        &self,
        to: &EntityAddress,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, NodeError> {
        self.check_forwardable(to, &payload)?;
        match self.sender_routes.ask_here(self, to, payload, timeout)? {
            Tried::Sent(reply) => Ok(reply.wait().await?),
            Tried::NotSent(payload, by_region) => {
                let ask = |to, payload| self.region.ask(to, payload, Some(timeout));
                self.send_by_region(to, payload, by_region, ask).await
            }
        }
    }

    /// [`tell`](Self::tell) for a message that continues a trace (`trace`: the span of the
    /// request that sends it). It goes through the region, which carries it to wherever the
    /// entity runs.
    pub async fn tell_in_trace(
        &self,
        to: &EntityAddress,
        payload: Vec<u8>,
        trace: MessageTrace,
    ) -> Result<(), NodeError> {
        self.check_forwardable(to, &payload)?;
        self.admit(to)?;
        let meta = MessageMeta {
            trace: Some(Box::new(trace)),
            ..MessageMeta::default()
        };
        Ok(self.region.tell_with(to.clone(), payload, meta).await?)
    }

    /// [`ask`](Self::ask) for a message that continues a trace, as
    /// [`tell_in_trace`](Self::tell_in_trace).
    pub async fn ask_in_trace(
        &self,
        to: &EntityAddress,
        payload: Vec<u8>,
        timeout: Duration,
        trace: MessageTrace,
    ) -> Result<Vec<u8>, NodeError> {
        self.check_forwardable(to, &payload)?;
        self.admit(to)?;
        let meta = MessageMeta {
            trace: Some(Box::new(trace)),
            ..MessageMeta::default()
        };
        Ok(self
            .region
            .ask_with(to.clone(), payload, meta, Some(timeout))
            .await?)
    }

    /// Passivates an entity after its queued messages.
    pub async fn passivate(&self, entity: &EntityAddress) -> Result<(), NodeError> {
        self.require_type(entity)?;
        Ok(self.region.passivate(entity.clone()).await?)
    }

    /// The committed state of an entity (at most [`ENTITY_ENTRIES_MAX`] keys), as the owner of
    /// its shard holds it: in a cluster the read goes to that node, wherever it is, and fails as
    /// an ask would while the shard has no owner that can answer (retryable), or with
    /// `timeout` after `api.ask_timeout_ms_default`.
    pub async fn entity_state(
        &self,
        entity: &EntityAddress,
    ) -> Result<Vec<(String, Vec<u8>)>, NodeError> {
        self.require_type(entity)?;
        let timeout = Duration::from_millis(self.config.api.ask_timeout_ms_default);
        Ok(self
            .region
            .read_state(entity.clone(), Some(timeout))
            .await?)
    }

    /// Per type of `tenant`: active version, live and remembered entities.
    pub fn status(&self, tenant: &str) -> Result<Vec<TypeStatus>, NodeError> {
        let live = self.entities.live_by_type();
        Ok(self
            .types(tenant)?
            .into_iter()
            .map(|record| {
                let key = TypeKey::new(record.tenant.clone(), record.name.clone());
                TypeStatus {
                    bound_version: self.entities.types().get(&key).map(|bound| bound.version),
                    remember: record
                        .active()
                        .is_some_and(|version| version.options.remember),
                    live_entities: live.get(&key).copied().unwrap_or(0),
                    remembered_entities: self.remembered_count(&key),
                    active_version: record.active_version,
                    versions: record.versions.len(),
                    entity_type: record.name,
                }
            })
            .collect())
    }

    /// The shard allocation table: `(tenant/type, shard) -> (node, generation)`.
    pub async fn shards(&self) -> Result<Vec<(String, u32, String, u64)>, NodeError> {
        let table = self.plane.store().shard_table()?;
        Ok(table
            .into_iter()
            .map(|(key, allocation)| {
                (
                    key.type_key.to_string(),
                    key.shard,
                    allocation.node,
                    allocation.generation,
                )
            })
            .collect())
    }

    /// Shards being handed off now, as this node's catalog has it (committed moves whose
    /// completion is not committed yet).
    pub fn shards_moving(&self) -> Result<usize, NodeError> {
        Ok(self.plane.store().shard_handoffs()?.len())
    }

    /// Stops every entity (their commits complete first), flushes remembered ids and stops
    /// the region (graceful shutdown). Stopped entities stay remembered.
    pub async fn shutdown(&self) {
        self.entities.stop_all().await;
        if let Err(error) = self.region.flush_remembered().await {
            tracing::warn!(%error, "remembered ids could not be flushed");
        }
        self.region.shutdown().await;
        if let Some(mesh) = &self.mesh {
            mesh.close();
        }
        tracing::info!("node stopped");
    }

    fn remembered_count(&self, key: &TypeKey) -> usize {
        let store = self.state.store();
        let Ok(shards) = store.remembered_shards(key) else {
            return 0;
        };
        shards
            .into_iter()
            .filter_map(|shard| store.remembered_ids(key, shard).ok())
            .map(|ids| ids.len())
            .sum()
    }

    /// Admits a client message by the tenant's rate quota.
    /// The tenant's quota is read from the catalog only when the tenant records changed since
    /// its bucket last confirmed it (the generation is read first, so a change after it is
    /// seen by the next message).
    fn admit(&self, to: &EntityAddress) -> Result<(), NodeError> {
        let generation = self.catalog.tenants_generation();
        let taken = match self.rate.try_take_known(&to.tenant, generation) {
            Some(taken) => taken,
            None => {
                let (per_second, burst) = self
                    .catalog
                    .message_rate(&to.tenant)
                    .ok_or_else(|| NodeError::NotFound(format!("no tenant {}", to.tenant)))?;
                self.rate
                    .try_take_confirmed(&to.tenant, per_second, burst, generation)
            }
        };
        if !taken {
            self.count_quota_rejection(&to.tenant, Some(&to.entity_type), "message_rate");
            let per_second = self
                .catalog
                .message_rate(&to.tenant)
                .map_or(0, |(per_second, _)| per_second);
            return Err(NodeError::Message(MessageError::new(
                ErrorKind::QuotaExceeded,
                format!(
                    "tenant {} is over its message rate of {per_second} per second",
                    to.tenant
                ),
            )));
        }
        Ok(())
    }

    /// In a cluster, refuses a message too large to be forwarded to another node
    /// (`payload_too_large`), wherever its entity's shard lives now: it may live on another node
    /// or move there, and the same message is refused alike through every node.
    pub(in crate::node) fn check_forwardable(
        &self,
        to: &EntityAddress,
        payload: &[u8],
    ) -> Result<(), NodeError> {
        if payload.len() <= FORWARD_PAYLOAD_BYTES_MAX || self.mesh.is_none() {
            return Ok(());
        }
        Err(too_large_for_a_cluster(to, payload.len()))
    }

    fn require_type(&self, entity: &EntityAddress) -> Result<(), NodeError> {
        if self.entities.types().get(&entity.type_key()).is_none() {
            return Err(NodeError::NotFound(format!(
                "no entity type {} in tenant {}",
                entity.entity_type, entity.tenant
            )));
        }
        Ok(())
    }
}

/// The refusal of a message over [`FORWARD_PAYLOAD_BYTES_MAX`] in a cluster.
#[cold]
fn too_large_for_a_cluster(to: &EntityAddress, bytes: usize) -> NodeError {
    NodeError::Message(MessageError::new(
        ErrorKind::PayloadTooLarge,
        format!(
            "the message to {to} is {bytes} bytes; in a cluster a message carries at most \
             {FORWARD_PAYLOAD_BYTES_MAX}, so that it can be forwarded to its entity's node"
        ),
    ))
}
