//! The region: one per node, one task. It takes messages for any entity, finds the shard's
//! home through the coordinator (buffering, bounded, while the answer is in flight), delivers
//! to the entities of its own node through [`LocalEntities`], forwards to other regions as
//! [`WireEnvelope`]s, keeps a table of asks waiting for remote replies, hands shards off when
//! the coordinator moves them, and records started entities for remember-entities.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;

use crate::envelope::{EntityAddress, Envelope, ErrorKind, MessageError, Reply, TypeKey};
use crate::sharding::allocation::{Allocation, ShardKey};
use crate::sharding::config::{ConfigError, ShardingConfig};
use crate::sharding::coordinator::{CoordinatorCommand, CoordinatorMessage};
use crate::sharding::extractor::{FnvExtractor, ShardExtractor};
use crate::sharding::handoff::{Buffered, BufferedBody, Handoff, ReplyRoute, ShardBuffer};
use crate::sharding::link::{
    FORWARD_HOPS_MAX, LinkMessage, NodeId, ReplyTo, Switchboard, WireBody, WireEnvelope, WireReply,
};
use crate::sharding::local::LocalEntities;
use crate::sharding::remember::write_behind::RememberWriter;
use crate::sharding::remember::{
    RememberEvent, RememberOp, RememberOperation, RememberStore, RememberedId, StoreError,
};

/// How often remember recovery hands out its budget of starts. The per-second rate from config
/// is spread over these slices so that recovery never bursts ahead of live traffic.
pub const RECOVERY_PACING_INTERVAL: Duration = Duration::from_millis(10);

/// An envelope the region could not take, with the reason (boxed: it travels by value).
type Refused = Box<(MessageError, Buffered)>;

/// How an entity type is sharded on this region.
#[derive(Clone, Debug)]
pub struct TypeSettings {
    /// Whether started entities are remembered and restarted.
    pub remember: bool,
    /// The shard function.
    pub extractor: Arc<dyn ShardExtractor>,
}

impl TypeSettings {
    /// The default settings: FNV-1a over `num_shards`, not remembered.
    ///
    /// ```
    /// use tessera_host::sharding::TypeSettings;
    /// let settings = TypeSettings::new(128).remembered();
    /// assert!(settings.remember);
    /// ```
    pub fn new(num_shards: u32) -> Self {
        TypeSettings {
            remember: false,
            extractor: Arc::new(FnvExtractor::new(num_shards)),
        }
    }

    /// The same settings with remember-entities on.
    pub fn remembered(mut self) -> Self {
        self.remember = true;
        self
    }

    /// The same settings with another shard function.
    pub fn with_extractor(mut self, extractor: Arc<dyn ShardExtractor>) -> Self {
        self.extractor = extractor;
        self
    }
}

/// State shared by the region task and its handles.
struct Shared {
    node: NodeId,
    config: ShardingConfig,
    types: RwLock<HashMap<TypeKey, TypeSettings>>,
    remember: Option<RememberWriter>,
    /// Shards this region owns; recovery checks it before every start.
    owned: Mutex<HashSet<ShardKey>>,
    /// Refused envelopes by error code, and tells that failed with no one to tell.
    counters: Mutex<RegionCounters>,
}

/// What a region refused or dropped, for the metrics layer to fold in when it renders.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegionCounters {
    /// Envelopes refused, by [`ErrorKind::code`].
    pub refused: std::collections::BTreeMap<&'static str, u64>,
    /// Tells that failed after they were accepted (no reply port to report on).
    pub tells_dropped: u64,
}

impl Shared {
    fn settings(&self, type_key: &TypeKey) -> Option<TypeSettings> {
        let types = self.types.read().unwrap_or_else(|p| p.into_inner());
        types.get(type_key).cloned()
    }

    fn owns(&self, key: &ShardKey) -> bool {
        let owned = self.owned.lock().unwrap_or_else(|p| p.into_inner());
        owned.contains(key)
    }

    fn set_owned(&self, key: &ShardKey, owned_now: bool) {
        let mut owned = self.owned.lock().unwrap_or_else(|p| p.into_inner());
        if owned_now {
            owned.insert(key.clone());
        } else {
            owned.remove(key);
        }
    }

    fn count_refused(&self, error: &MessageError, tell_dropped: bool) {
        let mut counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        *counters.refused.entry(error.kind.code()).or_default() += 1;
        if tell_dropped {
            counters.tells_dropped += 1;
        }
    }

    fn key_of(&self, address: &EntityAddress) -> Result<(ShardKey, TypeSettings), MessageError> {
        let type_key = address.type_key();
        let settings = self
            .settings(&type_key)
            .ok_or_else(|| not_registered(&type_key))?;
        let shard = settings.extractor.shard_of(&address.id);
        Ok((ShardKey::new(type_key, shard), settings))
    }
}

fn not_registered(type_key: &TypeKey) -> MessageError {
    MessageError::new(
        ErrorKind::EntityTypeNotRegistered,
        format!("entity type {type_key} is not registered on this region"),
    )
}

fn unavailable(message: impl Into<String>) -> MessageError {
    MessageError::new(ErrorKind::Unavailable, message)
}

/// A request from a handle to its region task (local only, never on the wire).
enum Request {
    Route {
        item: Buffered,
        accepted: oneshot::Sender<Result<(), MessageError>>,
    },
    RecoverType(TypeKey),
    Shutdown(oneshot::Sender<()>),
}

/// Work the region task sends itself when a spawned step finishes.
enum Internal {
    HandoffStopped(ShardKey),
    RememberedShards(TypeKey, Vec<crate::sharding::extractor::ShardId>),
}

/// A handle to a region; clones share the region. The region task stops when every handle is
/// dropped or [`RegionHandle::shutdown`] is called.
#[derive(Clone)]
pub struct RegionHandle {
    shared: Arc<Shared>,
    requests: mpsc::Sender<Request>,
}

impl std::fmt::Debug for RegionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionHandle")
            .field("node", &self.shared.node)
            .finish_non_exhaustive()
    }
}

/// An ask forwarded to another region, waiting for its reply message.
struct PendingAsk {
    port: crate::envelope::ReplyPort,
    deadline: Instant,
}

/// An allocation request in flight.
struct Inflight {
    since: Instant,
    buffer: ShardBuffer,
}

/// The region task's state.
pub struct Region {
    shared: Arc<Shared>,
    local: Arc<dyn LocalEntities>,
    switchboard: Arc<Switchboard>,
    link_inbox: mpsc::Sender<LinkMessage>,
    internal: mpsc::Sender<Internal>,
    recovery: Option<mpsc::Sender<ShardKey>>,
    allocations: HashMap<ShardKey, Allocation>,
    inflight: HashMap<ShardKey, Inflight>,
    handoffs: HashMap<ShardKey, Handoff>,
    pending_asks: HashMap<u64, PendingAsk>,
    next_request_id: u64,
}

impl Region {
    /// Validates `config`, starts the region of `node` and connects it to `switchboard`.
    /// `remember_store` enables remember-entities for types registered with `remember`.
    /// Must be called inside a Tokio runtime (it spawns the region's tasks).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use tessera_host::envelope::{EntityAddress, Envelope, TypeKey};
    /// use tessera_host::sharding::{
    ///     Coordinator, LocalEntities, Membership, Region, ShardId, ShardingConfig, Switchboard,
    ///     TypeSettings, local::BoxFuture,
    /// };
    /// struct Echo;
    /// impl LocalEntities for Echo {
    ///     fn deliver(&self, _to: EntityAddress, _shard: ShardId, envelope: Envelope) {
    ///         let payload = envelope.payload.clone();
    ///         envelope.answer(Ok(payload));
    ///     }
    ///     fn start(&self, _to: EntityAddress, _shard: ShardId) {}
    ///     fn passivate(&self, _to: &EntityAddress) {}
    ///     fn stop_shard(&self, _: &TypeKey, _: ShardId) -> BoxFuture { Box::pin(async {}) }
    ///     fn live_in_shard(&self, _: &TypeKey, _: ShardId) -> usize { 0 }
    /// }
    /// let config = ShardingConfig::default();
    /// let switchboard = Arc::new(Switchboard::new());
    /// let membership = Membership::new();
    /// let region =
    ///     Region::start("node-1".into(), config.clone(), Arc::new(Echo), switchboard.clone(), None)
    ///         .unwrap();
    /// membership.join("node-1", Vec::<String>::new());
    /// let _coordinator = Coordinator::start(config, membership.subscribe(), switchboard).unwrap();
    /// let counter = TypeKey::new("acme", "counter");
    /// region.register_type(counter.clone(), TypeSettings::new(128)).await.unwrap();
    /// let reply = region.ask(counter.entity("c-1"), b"hi".to_vec(), None).await;
    /// assert_eq!(reply.unwrap(), b"hi");
    /// # }
    /// ```
    pub fn start(
        node: NodeId,
        config: ShardingConfig,
        local: Arc<dyn LocalEntities>,
        switchboard: Arc<Switchboard>,
        remember_store: Option<Arc<dyn RememberStore>>,
    ) -> Result<RegionHandle, ConfigError> {
        config.validate()?;
        let capacity = config.command_buffer;
        let (requests, request_receiver) = mpsc::channel(capacity);
        let (link_inbox, link_receiver) = mpsc::channel(capacity);
        let (internal, internal_receiver) = mpsc::channel(capacity);
        let remember = remember_store.map(|store| RememberWriter::start(store, &config.remember));
        let shared = Arc::new(Shared {
            node: node.clone(),
            config,
            types: RwLock::default(),
            remember,
            owned: Mutex::default(),
            counters: Mutex::default(),
        });
        let recovery = shared.remember.as_ref().map(|writer| {
            let (sender, receiver) = mpsc::channel(capacity);
            tokio::spawn(recover(
                Arc::clone(&shared),
                Arc::clone(&local),
                writer.clone(),
                receiver,
            ));
            sender
        });
        switchboard.connect_region(node, link_inbox.clone());
        let region = Region {
            shared: Arc::clone(&shared),
            local,
            switchboard,
            link_inbox,
            internal,
            recovery,
            allocations: HashMap::new(),
            inflight: HashMap::new(),
            handoffs: HashMap::new(),
            pending_asks: HashMap::new(),
            next_request_id: 1,
        };
        tokio::spawn(region.run(request_receiver, link_receiver, internal_receiver));
        Ok(RegionHandle { shared, requests })
    }

    async fn run(
        mut self,
        mut requests: mpsc::Receiver<Request>,
        mut links: mpsc::Receiver<LinkMessage>,
        mut internal: mpsc::Receiver<Internal>,
    ) {
        let mut tick = tokio::time::interval(self.shared.config.coordinator_tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown_reply = None;
        loop {
            // Biased: peer messages first, so that anything a peer sent before a handoff
            // finished is buffered and drained with it rather than chasing it later.
            tokio::select! {
                biased;
                Some(message) = links.recv() => self.on_link(message),
                request = requests.recv() => match request {
                    Some(Request::Route { item, accepted }) => {
                        let result = self.route(item).map_err(|refused| {
                            self.shared.count_refused(&refused.0, false);
                            refused.0
                        });
                        let _ = accepted.send(result);
                    }
                    Some(Request::RecoverType(type_key)) => self.recover_type(type_key),
                    Some(Request::Shutdown(reply)) => {
                        shutdown_reply = Some(reply);
                        break;
                    }
                    None => break,
                },
                Some(message) = internal.recv() => self.on_internal(message),
                _ = tick.tick() => self.on_tick(),
            }
        }
        self.switchboard
            .disconnect_region_if(&self.shared.node, &self.link_inbox);
        if let Some(writer) = &self.shared.remember
            && let Err(error) = writer.flush().await
        {
            tracing::warn!(%error, "remember flush at region shutdown failed");
        }
        if let Some(reply) = shutdown_reply {
            let _ = reply.send(());
        }
    }

    fn node(&self) -> &str {
        &self.shared.node
    }

    /// Routes one envelope: to the handoff buffer, to a local entity, to its owner, or to the
    /// allocation buffer. On error the envelope is given back with the reason.
    fn route(&mut self, item: Buffered) -> Result<(), Refused> {
        let key = item.key.clone();
        if self.shared.settings(&key.type_key).is_none() {
            return Err(Box::new((not_registered(&key.type_key), item)));
        }
        if let Some(handoff) = self.handoffs.get_mut(&key) {
            return handoff
                .buffer
                .push(item)
                .map_err(|item| Box::new((overflow(&key, "handoff"), *item)));
        }
        match self.allocations.get(&key).cloned() {
            Some(allocation) if allocation.node == self.shared.node => self.deliver_local(item),
            Some(allocation) => self.forward(item, allocation),
            None => self.buffer_for_allocation(item),
        }
    }

    fn buffer_for_allocation(&mut self, item: Buffered) -> Result<(), Refused> {
        let key = item.key.clone();
        if !self.inflight.contains_key(&key)
            && let Err(error) = self.request_allocation(&key)
        {
            return Err(Box::new((error, item)));
        }
        let inflight = self
            .inflight
            .get_mut(&key)
            .expect("request_allocation registers the in-flight entry it succeeded for");
        inflight
            .buffer
            .push(item)
            .map_err(|item| Box::new((overflow(&key, "allocation"), *item)))
    }

    fn request_allocation(&mut self, key: &ShardKey) -> Result<(), MessageError> {
        let command = CoordinatorCommand::Allocate {
            key: key.clone(),
            requester: self.shared.node.clone(),
        };
        self.switchboard
            .send_to_coordinator(CoordinatorMessage::Command(command))
            .map_err(|error| unavailable(format!("cannot resolve shard {key}: {error}")))?;
        self.inflight.insert(
            key.clone(),
            Inflight {
                since: Instant::now(),
                buffer: ShardBuffer::new(self.shared.config.allocation_buffer),
            },
        );
        Ok(())
    }

    fn deliver_local(&mut self, item: Buffered) -> Result<(), Refused> {
        let settings = self.shared.settings(&item.key.type_key);
        if settings.is_some_and(|settings| settings.remember)
            && let Some(reason) = self
                .shared
                .remember
                .as_ref()
                .and_then(|writer| writer.failure_of(&item.key))
        {
            let message = format!(
                "shard {} is failed (remember-entities fail-closed) after a store error: {reason}",
                item.key
            );
            return Err(Box::new((unavailable(message), item)));
        }
        let Buffered {
            address, key, body, ..
        } = item;
        match body {
            BufferedBody::Passivate => self.local.passivate(&address),
            BufferedBody::Message { payload, reply } => {
                let port = match reply {
                    ReplyRoute::None => None,
                    ReplyRoute::Local { port, .. } => Some(port),
                    ReplyRoute::Remote(reply_to) => Some(self.remote_reply_port(reply_to)),
                };
                let envelope = Envelope {
                    payload,
                    reply: port,
                };
                self.local.deliver(address, key.shard, envelope);
            }
        }
        Ok(())
    }

    /// A reply port whose answer travels back to the asking region as a message.
    fn remote_reply_port(&self, reply_to: ReplyTo) -> crate::envelope::ReplyPort {
        let (port, receiver) = oneshot::channel::<Reply>();
        let switchboard = Arc::clone(&self.switchboard);
        tokio::spawn(async move {
            let timeout = Duration::from_millis(reply_to.timeout_ms);
            let reply = match tokio::time::timeout(timeout, receiver).await {
                Ok(Ok(reply)) => reply,
                Ok(Err(_)) => Err(unavailable(
                    "the entity dropped the message without replying",
                )),
                // The asker has given up by now; it will not read this reply.
                Err(_) => return,
            };
            let message = LinkMessage::AskReply {
                request_id: reply_to.request_id,
                reply: WireReply::from(reply),
            };
            if let Err(error) = switchboard.send_to_region(&reply_to.node, message) {
                tracing::warn!(node = %reply_to.node, %error, "ask reply could not be sent");
            }
        });
        port
    }

    fn forward(&mut self, item: Buffered, allocation: Allocation) -> Result<(), Refused> {
        if item.hops >= FORWARD_HOPS_MAX {
            let message = format!(
                "shard {} was forwarded {} times without reaching its owner",
                item.key, item.hops
            );
            return Err(Box::new((unavailable(message), item)));
        }
        if self.pending_asks.len() >= self.shared.config.command_buffer
            && matches!(
                &item.body,
                BufferedBody::Message {
                    reply: ReplyRoute::Local { .. },
                    ..
                }
            )
        {
            let message = format!(
                "{} asks already wait for remote replies (command_buffer)",
                self.pending_asks.len()
            );
            return Err(Box::new((unavailable(message), item)));
        }
        let Buffered {
            address,
            key,
            hops,
            body,
        } = item;
        let request_id = self.next_request_id;
        let (wire_body, local_port) = match body {
            BufferedBody::Passivate => (WireBody::Passivate, None),
            BufferedBody::Message { payload, reply } => {
                let (reply_to, local_port) = match reply {
                    ReplyRoute::None => (None, None),
                    ReplyRoute::Remote(reply_to) => (Some(reply_to), None),
                    ReplyRoute::Local { port, deadline } => {
                        let remaining = deadline.saturating_duration_since(Instant::now());
                        let reply_to = ReplyTo {
                            node: self.shared.node.clone(),
                            request_id,
                            timeout_ms: u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
                        };
                        (Some(reply_to), Some((port, deadline)))
                    }
                };
                (WireBody::Message { payload, reply_to }, local_port)
            }
        };
        let envelope = WireEnvelope {
            address,
            key,
            allocation: allocation.clone(),
            hops: hops + 1,
            body: wire_body,
        };
        match self
            .switchboard
            .try_send_to_region(&allocation.node, LinkMessage::Deliver(envelope))
        {
            Ok(()) => {
                if let Some((port, deadline)) = local_port {
                    self.next_request_id += 1;
                    self.pending_asks
                        .insert(request_id, PendingAsk { port, deadline });
                }
                Ok(())
            }
            Err(refused) => {
                let (error, LinkMessage::Deliver(envelope)) = *refused else {
                    unreachable!("the switchboard hands back the very message it was given")
                };
                let message = format!("cannot forward to {}: {error}", allocation.node);
                let body = match envelope.body {
                    WireBody::Passivate => BufferedBody::Passivate,
                    WireBody::Message { payload, reply_to } => {
                        let reply = match (local_port, reply_to) {
                            (Some((port, deadline)), _) => ReplyRoute::Local { port, deadline },
                            (None, Some(reply_to)) => ReplyRoute::Remote(reply_to),
                            (None, None) => ReplyRoute::None,
                        };
                        BufferedBody::Message { payload, reply }
                    }
                };
                let item = Buffered {
                    address: envelope.address,
                    key: envelope.key,
                    hops,
                    body,
                };
                Err(Box::new((unavailable(message), item)))
            }
        }
    }

    fn on_link(&mut self, message: LinkMessage) {
        match message {
            LinkMessage::Deliver(envelope) => self.on_forwarded(envelope),
            LinkMessage::AskReply { request_id, reply } => {
                if let Some(pending) = self.pending_asks.remove(&request_id) {
                    let _ = pending.port.send(Reply::from(reply));
                }
            }
            LinkMessage::Allocated { key, allocation } => {
                self.learn(&key, allocation);
            }
            LinkMessage::AllocationFailed { key, reason } => {
                if let Some(mut inflight) = self.inflight.remove(&key) {
                    let error = unavailable(format!("shard {key} has no home: {reason}"));
                    for item in inflight.buffer.drain() {
                        self.fail(item, error.clone());
                    }
                }
            }
            LinkMessage::HandOff { key, to } => self.begin_handoff(key, to),
        }
    }

    fn on_forwarded(&mut self, envelope: WireEnvelope) {
        let WireEnvelope {
            address,
            key,
            allocation,
            hops,
            body,
        } = envelope;
        let newer = self
            .allocations
            .get(&key)
            .is_none_or(|known| allocation.supersedes(known));
        if newer && !self.handoffs.contains_key(&key) {
            self.learn(&key, allocation);
        }
        let body = match body {
            WireBody::Passivate => BufferedBody::Passivate,
            WireBody::Message { payload, reply_to } => BufferedBody::Message {
                payload,
                reply: reply_to.map_or(ReplyRoute::None, ReplyRoute::Remote),
            },
        };
        let item = Buffered {
            address,
            key,
            hops,
            body,
        };
        if let Err(refused) = self.route(item) {
            let (error, item) = *refused;
            self.fail(item, error);
        }
    }

    /// Records where `key` lives, starts recovery if it just became ours, and drains any
    /// envelopes that waited for the answer, in order.
    fn learn(&mut self, key: &ShardKey, allocation: Allocation) {
        if self
            .allocations
            .get(key)
            .is_some_and(|known| known.supersedes(&allocation))
        {
            return;
        }
        let was_ours = self
            .allocations
            .get(key)
            .is_some_and(|known| known.node == self.shared.node);
        let ours = allocation.node == self.shared.node;
        self.allocations.insert(key.clone(), allocation);
        self.shared.set_owned(key, ours);
        if ours && !was_ours {
            self.on_acquired(key);
        }
        if let Some(mut inflight) = self.inflight.remove(key) {
            let items: Vec<Buffered> = inflight.buffer.drain().collect();
            for item in items {
                if let Err(refused) = self.route(item) {
                    let (error, item) = *refused;
                    self.fail(item, error);
                }
            }
        }
    }

    fn on_acquired(&mut self, key: &ShardKey) {
        let remembers = self
            .shared
            .settings(&key.type_key)
            .is_some_and(|settings| settings.remember);
        let (Some(recovery), Some(writer), true) =
            (&self.recovery, &self.shared.remember, remembers)
        else {
            return;
        };
        if recovery.try_send(key.clone()).is_err() {
            let message = "recovery queue full (command_buffer shards)".to_string();
            writer.report(RememberOperation::Recover, key, message);
        }
    }

    fn begin_handoff(&mut self, key: ShardKey, to: Allocation) {
        if self.handoffs.contains_key(&key) {
            return;
        }
        let mut buffer = ShardBuffer::new(self.shared.config.allocation_buffer);
        // Envelopes that waited for an allocation came first; keep them first.
        if let Some(mut inflight) = self.inflight.remove(&key) {
            let items: Vec<Buffered> = inflight.buffer.drain().collect();
            for item in items {
                if let Err(item) = buffer.push(item) {
                    self.fail(*item, overflow(&key, "handoff"));
                }
            }
        }
        self.shared.set_owned(&key, false);
        let stopping = self.local.stop_shard(&key.type_key, key.shard);
        let internal = self.internal.clone();
        let drain_delay = self.shared.config.handoff_drain_delay;
        let stopped_key = key.clone();
        tokio::spawn(async move {
            stopping.await;
            if !drain_delay.is_zero() {
                tokio::time::sleep(drain_delay).await;
            }
            let _ = internal.send(Internal::HandoffStopped(stopped_key)).await;
        });
        self.handoffs
            .insert(key.clone(), Handoff { key, to, buffer });
    }

    fn on_internal(&mut self, message: Internal) {
        match message {
            Internal::HandoffStopped(key) => self.finish_handoff(key),
            Internal::RememberedShards(type_key, shards) => {
                for shard in shards {
                    let key = ShardKey::new(type_key.clone(), shard);
                    match self.allocations.get(&key) {
                        Some(allocation) if allocation.node == self.shared.node => {
                            self.on_acquired(&key)
                        }
                        Some(_) => {}
                        None if self.inflight.contains_key(&key) => {}
                        None => {
                            if let Err(error) = self.request_allocation(&key) {
                                tracing::warn!(%key, %error, "remembered shard not resolved");
                            }
                        }
                    }
                }
            }
        }
    }

    fn finish_handoff(&mut self, key: ShardKey) {
        let Some(mut handoff) = self.handoffs.remove(&key) else {
            return;
        };
        let generation = handoff.to.generation;
        self.learn(&key, handoff.to.clone());
        let items: Vec<Buffered> = handoff.buffer.drain().collect();
        for item in items {
            if let Err(refused) = self.route(item) {
                let (error, item) = *refused;
                self.fail(item, error);
            }
        }
        let command = CoordinatorCommand::HandoffComplete {
            key: key.clone(),
            generation,
        };
        if let Err(error) = self
            .switchboard
            .send_to_coordinator(CoordinatorMessage::Command(command))
        {
            tracing::warn!(%key, %error, "handoff completion not delivered to the coordinator");
        }
    }

    fn recover_type(&mut self, type_key: TypeKey) {
        let Some(writer) = self.shared.remember.clone() else {
            return;
        };
        let internal = self.internal.clone();
        tokio::spawn(async move {
            let store = writer.store();
            let listed_type = type_key.clone();
            let listed = tokio::task::spawn_blocking(move || store.list_shards(&listed_type)).await;
            match listed {
                Ok(Ok(shards)) => {
                    let _ = internal
                        .send(Internal::RememberedShards(type_key, shards))
                        .await;
                }
                Ok(Err(error)) => report_type_failure(&writer, type_key, error),
                Err(join) => {
                    report_type_failure(&writer, type_key, StoreError::new(join.to_string()))
                }
            }
        });
    }

    fn on_tick(&mut self) {
        let now = Instant::now();
        self.pending_asks
            .retain(|_, pending| pending.deadline > now);
        let timeout = self.shared.config.request_timeout;
        let stale: Vec<ShardKey> = self
            .inflight
            .iter()
            .filter(|(_, inflight)| now.duration_since(inflight.since) >= timeout)
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            if let Some(mut inflight) = self.inflight.remove(&key) {
                let error = unavailable(format!(
                    "no allocation for shard {key} within {} ms",
                    timeout.as_millis()
                ));
                for item in inflight.buffer.drain() {
                    self.fail(item, error.clone());
                }
            }
        }
    }

    /// Answers a failed envelope where its reply goes; a failed tell can only be logged.
    fn fail(&self, item: Buffered, error: MessageError) {
        let tell = matches!(
            &item.body,
            BufferedBody::Message {
                reply: ReplyRoute::None,
                ..
            } | BufferedBody::Passivate
        );
        self.shared.count_refused(&error, tell);
        match item.body {
            BufferedBody::Message {
                reply: ReplyRoute::Local { port, .. },
                ..
            } => {
                let _ = port.send(Err(error));
            }
            BufferedBody::Message {
                reply: ReplyRoute::Remote(reply_to),
                ..
            } => {
                let message = LinkMessage::AskReply {
                    request_id: reply_to.request_id,
                    reply: WireReply::Err(error),
                };
                if let Err(link_error) = self.switchboard.send_to_region(&reply_to.node, message) {
                    tracing::warn!(node = %reply_to.node, %link_error, "failure reply lost");
                }
            }
            _ => {
                tracing::warn!(node = %self.node(), address = %item.address, %error, "tell dropped");
            }
        }
    }
}

fn overflow(key: &ShardKey, phase: &str) -> MessageError {
    MessageError::new(
        ErrorKind::BufferOverflow,
        format!("shard {key}: {phase} buffer full (allocation_buffer)"),
    )
}

fn report_type_failure(writer: &RememberWriter, type_key: TypeKey, error: StoreError) {
    writer.report_type(RememberOperation::Recover, &type_key, error.message);
}

/// Restarts remembered entities of acquired shards, paced by `recovery_rate_per_second`.
async fn recover(
    shared: Arc<Shared>,
    local: Arc<dyn LocalEntities>,
    writer: RememberWriter,
    mut shards: mpsc::Receiver<ShardKey>,
) {
    let slices_per_second = (1000 / RECOVERY_PACING_INTERVAL.as_millis()).max(1) as u32;
    let per_slice = shared
        .config
        .recovery_rate_per_second
        .div_ceil(slices_per_second)
        .max(1) as usize;
    let mut pacing = tokio::time::interval(RECOVERY_PACING_INTERVAL);
    pacing.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while let Some(key) = shards.recv().await {
        let store = writer.store();
        let (type_key, shard) = (key.type_key.clone(), key.shard);
        let listed = tokio::task::spawn_blocking(move || store.list_ids(&type_key, shard)).await;
        let ids = match listed {
            Ok(Ok(ids)) => ids,
            Ok(Err(error)) => {
                writer.report(RememberOperation::Recover, &key, error.message);
                continue;
            }
            Err(join) => {
                writer.report(RememberOperation::Recover, &key, join.to_string());
                continue;
            }
        };
        for chunk in ids.chunks(per_slice) {
            pacing.tick().await;
            if !shared.owns(&key) {
                break;
            }
            for id in chunk {
                local.start(key.type_key.entity(id.clone()), key.shard);
            }
        }
    }
}

impl RegionHandle {
    /// The node this region runs on.
    pub fn node(&self) -> &str {
        &self.shared.node
    }

    /// Registers (or re-registers) an entity type. For a remembered type with a store, the
    /// shards remembered for it are resolved and their entities restarted where they land.
    pub async fn register_type(
        &self,
        type_key: TypeKey,
        settings: TypeSettings,
    ) -> Result<(), MessageError> {
        let remember = settings.remember && self.shared.remember.is_some();
        {
            let mut types = self.shared.types.write().unwrap_or_else(|p| p.into_inner());
            types.insert(type_key.clone(), settings);
        }
        if remember {
            self.requests
                .send(Request::RecoverType(type_key))
                .await
                .map_err(|_| stopped())?;
        }
        Ok(())
    }

    /// Unregisters a type; its messages then fail with `EntityTypeNotRegistered`.
    pub fn unregister_type(&self, type_key: &TypeKey) {
        let mut types = self.shared.types.write().unwrap_or_else(|p| p.into_inner());
        types.remove(type_key);
    }

    async fn submit(&self, item: Buffered) -> Result<(), MessageError> {
        let (accepted, receiver) = oneshot::channel();
        let wait = self.shared.config.request_timeout;
        match tokio::time::timeout(wait, self.requests.send(Request::Route { item, accepted }))
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(stopped()),
            Err(_) => {
                return Err(unavailable(format!(
                    "region inbox stayed full for {} ms",
                    wait.as_millis()
                )));
            }
        }
        receiver.await.map_err(|_| stopped())?
    }

    fn item(&self, address: EntityAddress, body: BufferedBody) -> Result<Buffered, MessageError> {
        let (key, _) = self.shared.key_of(&address)?;
        Ok(Buffered {
            address,
            key,
            hops: 0,
            body,
        })
    }

    /// Sends a one-way message. Returns once the region has routed or buffered it; an error
    /// means it was not accepted (unregistered type, buffer full, shard failed, ...).
    ///
    /// See [`Region::start`] for a complete setup.
    pub async fn tell(&self, address: EntityAddress, payload: Vec<u8>) -> Result<(), MessageError> {
        let body = BufferedBody::Message {
            payload,
            reply: ReplyRoute::None,
        };
        self.submit(self.item(address, body)?).await
    }

    /// Sends a one-way message without waiting for the region to take it (for callers that
    /// cannot wait, such as a guest's `tell`). `Err` when the region's inbox is full or the
    /// type is unknown; a later refusal (buffer full, shard failed) is counted, not returned.
    pub fn try_tell(&self, address: EntityAddress, payload: Vec<u8>) -> Result<(), MessageError> {
        let body = BufferedBody::Message {
            payload,
            reply: ReplyRoute::None,
        };
        let item = self.item(address, body)?;
        let (accepted, _outcome) = oneshot::channel();
        self.requests
            .try_send(Request::Route { item, accepted })
            .map_err(|error| match error {
                mpsc::error::TrySendError::Full(_) => {
                    unavailable("the region inbox is full; retry later".to_string())
                }
                mpsc::error::TrySendError::Closed(_) => stopped(),
            })
    }

    /// Sends a message and waits for the reply until `timeout` (default: `request_timeout`).
    ///
    /// See [`Region::start`] for a complete setup.
    pub async fn ask(
        &self,
        address: EntityAddress,
        payload: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Reply {
        let timeout = timeout.unwrap_or(self.shared.config.request_timeout);
        let deadline = Instant::now() + timeout;
        let (port, receiver) = oneshot::channel();
        let body = BufferedBody::Message {
            payload,
            reply: ReplyRoute::Local { port, deadline },
        };
        let item = self.item(address, body)?;
        let timed_out = || {
            MessageError::new(
                ErrorKind::Timeout,
                format!("no reply within {} ms", timeout.as_millis()),
            )
        };
        match tokio::time::timeout_at(deadline, self.submit(item)).await {
            Ok(result) => result?,
            Err(_) => return Err(timed_out()),
        }
        match tokio::time::timeout_at(deadline, receiver).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(unavailable("the message was dropped without a reply")),
            Err(_) => Err(timed_out()),
        }
    }

    /// Asks the entity's owner to passivate it after the messages already sent to it.
    pub async fn passivate(&self, address: EntityAddress) -> Result<(), MessageError> {
        self.submit(self.item(address, BufferedBody::Passivate)?)
            .await
    }

    /// Called by the entity layer when an entity starts: remembers it (remembered types only).
    pub fn entity_started(&self, address: &EntityAddress) {
        self.record(address, RememberOp::Started);
    }

    /// Called by the entity layer when an entity is passivated (explicitly, when idle, or
    /// evicted): forgets it. Not called for a handoff stop.
    pub fn entity_passivated(&self, address: &EntityAddress) {
        self.record(address, RememberOp::Forgotten);
    }

    fn record(&self, address: &EntityAddress, make: fn(RememberedId) -> RememberOp) {
        let Some(writer) = &self.shared.remember else {
            return;
        };
        let Ok((key, settings)) = self.shared.key_of(address) else {
            return;
        };
        if settings.remember {
            writer.record(make(RememberedId::new(address, key.shard)));
        }
    }

    /// What this region refused or dropped so far.
    pub fn counters(&self) -> RegionCounters {
        let counters = self
            .shared
            .counters
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        counters.clone()
    }

    /// Waits until every remember record queued before this call is durable.
    pub async fn flush_remembered(&self) -> Result<(), StoreError> {
        match &self.shared.remember {
            Some(writer) => writer.flush().await,
            None => Ok(()),
        }
    }

    /// The remember event feed, if remember-entities is enabled.
    pub fn remember_events(&self) -> Option<broadcast::Receiver<RememberEvent>> {
        self.shared.remember.as_ref().map(RememberWriter::subscribe)
    }

    /// Stops the region: disconnects it and flushes remembered ids. Other handles then fail.
    pub async fn shutdown(&self) {
        let (reply, receiver) = oneshot::channel();
        if self.requests.send(Request::Shutdown(reply)).await.is_ok() {
            let _ = receiver.await;
        }
    }
}

fn stopped() -> MessageError {
    unavailable("the sharding region has stopped")
}
