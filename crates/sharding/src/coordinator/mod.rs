//! The coordinator: one task that decides where shards live. It answers allocation requests
//! with least-shards placement, runs a rebalance round on every tick and membership change
//! (dead-owner moves uncapped, spread moves capped), and drives each graceful move as a
//! handoff: the losing region stops the shard's entities and hands its buffered messages on
//! before the move is announced to everyone. The same round places the partition plane's
//! replicas (`partitions.rs`).
//!
//! Every allocation and move is a catalog command ([`Command::AssignShards`](tessera_metadata::Command::AssignShards),
//! [`Command::MoveShards`](tessera_metadata::Command::MoveShards)), committed through the [`MetadataPlane`] before any region hears of
//! it; generations come from the catalog. A coordinator first takes the seat for its epoch (in
//! a cluster, the view of the metadata primary it runs on; [`Command::SeatCoordinator`](tessera_metadata::Command::SeatCoordinator)) and
//! only then reads the committed table: that read follows everything committed before it, so a
//! new coordinator (a restart, or a new metadata primary) starts from the whole table, rebuilds
//! nothing and reuses no generation. Each decision carries the epoch and the generation it read
//! for each shard; once a later coordinator is seated, or the shard moved, the catalog refuses
//! it, and a coordinator told it is deposed stops.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::config::{ConfigError, ShardMoves, ShardingConfig};
use crate::lease::ReassignGuard;
use crate::link::{CoordinatorCommand, LinkMessage, Switchboard};
use crate::membership::{MemberSet, MemberStatus};
use crate::rebalance::{self, RebalanceHistory, RebalanceReason, RebalanceRound, ShardMovement};
use tessera_contract::{Allocation, AllocationTable, NodeId, ShardId, ShardKey};
use tessera_metadata::{MetadataError, MetadataPlane};

/// Allocation requests folded into one catalog commit.
pub const ALLOCATIONS_PER_COMMIT_MAX: usize = 1024;

/// A read-only query, answered on a local channel (an admin view; not part of the wire).
#[derive(Debug)]
enum CoordinatorQuery {
    Table(oneshot::Sender<AllocationTable>),
    Rounds(oneshot::Sender<Vec<RebalanceRound>>),
    Moving(oneshot::Sender<BTreeSet<ShardKey>>),
}

/// A graceful move waiting for the losing region.
#[derive(Debug)]
struct Handoff {
    from: NodeId,
    to: Allocation,
    waiting: BTreeSet<NodeId>,
    /// When the losing region was last told (it is told again if it restarts meanwhile).
    told: Instant,
    /// The losing region reported it done; the completion is being committed.
    completed: bool,
}

/// Whether a shard's owner can serve it, as far as the coordinator knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// Up or leaving, and reachable: it serves the shard (and hands it off when it moves).
    Serving,
    /// Down, cut off, or removed but maybe still holding a lease: the shard waits for it.
    Held,
    /// Gone for good: the shard may go elsewhere (with its state, when state is shared; else
    /// the state was declared lost by the operator who removed the owner).
    Lost,
}

/// Why the coordinator could not start or answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CoordinatorError {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The committed allocation table could not be read, or a decision was not committed.
    #[error("cannot read the shard table: {0}")]
    Catalog(#[from] MetadataError),
    /// The coordinator task has stopped.
    #[error("the shard coordinator has stopped")]
    Stopped,
}

/// The coordinator task's state.
pub struct Coordinator {
    config: ShardingConfig,
    /// The epoch this coordinator was seated in: every decision carries it.
    epoch: u64,
    /// The catalog refused a decision because a later coordinator holds the seat: this one
    /// stops.
    deposed: bool,
    table: AllocationTable,
    handoffs: BTreeMap<ShardKey, Handoff>,
    history: RebalanceHistory,
    members: watch::Receiver<MemberSet>,
    switchboard: Arc<Switchboard>,
    plane: Arc<dyn MetadataPlane>,
    /// When gone owners' leases have run out (state held by owners only).
    guard: Option<ReassignGuard>,
    /// The partitions' primaries as nodes report them (the partition plane serving).
    primaries: primaries::Primaries,
    /// The types that keep a replication factor of their own, from the catalog (the
    /// partition plane serving): their shards live in their factor's partitions.
    own_replication: BTreeMap<tessera_contract::TypeKey, u8>,
    started: Instant,
}

/// A handle to the coordinator task; clones share it. The task stops when every handle is
/// dropped.
#[derive(Clone, Debug)]
pub struct CoordinatorHandle {
    commands: mpsc::Sender<CoordinatorCommand>,
    queries: mpsc::Sender<CoordinatorQuery>,
}

mod fencing;
mod handle;
mod handoffs;
mod partitioned;
mod partitions;
mod primaries;

impl Coordinator {
    /// Validates `config`, reads the committed allocation table, starts the coordinator task
    /// and connects it to `switchboard`. Must be called inside a Tokio runtime.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use tessera_contract::BoxFuture;
    /// use tessera_metadata::{Applied, CatalogObserver, LocalPlane, MetadataStore};
    /// use tessera_sharding::{Coordinator, Membership, ShardingConfig, Switchboard};
    /// struct Quiet;
    /// impl CatalogObserver for Quiet {
    ///     fn applied<'a>(&'a self, _: &'a Applied) -> BoxFuture<'a, ()> { Box::pin(async {}) }
    /// }
    /// let dir = tempfile::tempdir().unwrap();
    /// let database = Arc::new(redb::Database::create(dir.path().join("m.redb")).unwrap());
    /// let plane = Arc::new(LocalPlane::new(MetadataStore::open(database).unwrap(), Arc::new(Quiet)));
    /// let membership = Membership::new();
    /// membership.join("node-1", Vec::<String>::new());
    /// let switchboard = Arc::new(Switchboard::new());
    /// let coordinator = Coordinator::start(
    ///     ShardingConfig::default(), membership.subscribe(), switchboard, plane,
    /// ).unwrap();
    /// assert!(coordinator.allocation_table().await.unwrap().is_empty());
    /// # }
    /// ```
    pub fn start(
        config: ShardingConfig,
        members: watch::Receiver<MemberSet>,
        switchboard: Arc<Switchboard>,
        plane: Arc<dyn MetadataPlane>,
    ) -> Result<CoordinatorHandle, CoordinatorError> {
        Coordinator::start_in_epoch(config, 0, members, switchboard, plane)
    }

    /// Like [`Coordinator::start`], for the coordinator of `epoch`: in a cluster, the view in
    /// which this node became the metadata primary. Its task takes the seat for `epoch` before
    /// it reads the table or answers anything, and ends if a later coordinator holds the seat.
    pub fn start_in_epoch(
        config: ShardingConfig,
        epoch: u64,
        members: watch::Receiver<MemberSet>,
        switchboard: Arc<Switchboard>,
        plane: Arc<dyn MetadataPlane>,
    ) -> Result<CoordinatorHandle, CoordinatorError> {
        config.validate()?;
        let (commands, command_receiver) = mpsc::channel(config.command_buffer);
        let (queries, query_receiver) = mpsc::channel(config.command_buffer);
        switchboard.connect_coordinator(commands.clone());
        let guard = match config.moves {
            ShardMoves::SharedState => None,
            ShardMoves::OwnerHoldsState(lease) => Some(ReassignGuard::new(lease, 0)),
        };
        let coordinator = Coordinator {
            config,
            epoch,
            deposed: false,
            table: AllocationTable::new(),
            handoffs: BTreeMap::new(),
            history: RebalanceHistory::default(),
            members,
            switchboard,
            plane,
            guard,
            primaries: primaries::Primaries::new(Instant::now()),
            own_replication: BTreeMap::new(),
            started: Instant::now(),
        };
        tokio::spawn(async move {
            if let Some(coordinator) = coordinator.take_seat(&command_receiver).await {
                coordinator.run(command_receiver, query_receiver).await;
            }
        });
        Ok(CoordinatorHandle { commands, queries })
    }

    async fn run(
        mut self,
        mut commands: mpsc::Receiver<CoordinatorCommand>,
        mut queries: mpsc::Receiver<CoordinatorQuery>,
    ) {
        let mut tick = tokio::time::interval(self.config.coordinator_tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.deposed {
            tokio::select! {
                command = commands.recv() => match command {
                    Some(command) => self.on_commands(command, &mut commands).await,
                    None => break,
                },
                Some(query) = queries.recv() => self.on_query(query),
                _ = tick.tick() => self.rebalance().await,
                changed = self.members.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    self.rebalance().await;
                }
            }
        }
    }

    fn eligible(&self) -> Vec<NodeId> {
        self.members
            .borrow()
            .eligible(self.config.role_constraint.as_deref())
    }

    /// Milliseconds since this coordinator started (the lease guard's clock).
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Brings the lease guard in step with the members: an owner is gone once the catalog
    /// removed it (its record goes, so an owner missing from the members is gone too); its
    /// wait starts the first time this coordinator sees it so.
    fn observe_members(&mut self) {
        let now = self.now_ms();
        let Some(guard) = &mut self.guard else {
            return;
        };
        let members = self.members.borrow();
        let owners: BTreeSet<&NodeId> = self.table.values().map(|a| &a.node).collect();
        for owner in owners {
            match members.get(owner) {
                Some(member) if member.status != MemberStatus::Removed => guard.owner_back(owner),
                _ => guard.owner_gone(owner, now),
            }
        }
    }

    /// Whether `node` can serve the shards it owns.
    fn owner(&self, node: &str) -> Owner {
        let Some(guard) = &self.guard else {
            let members = self.members.borrow();
            return if members.is_eligible(node, self.config.role_constraint.as_deref()) {
                Owner::Serving
            } else {
                Owner::Lost
            };
        };
        let members = self.members.borrow();
        match members.get(node) {
            Some(member) if member.is_serving() => Owner::Serving,
            Some(member) if member.status != MemberStatus::Removed => Owner::Held,
            _ if guard.may_reassign(node, self.now_ms()) => Owner::Lost,
            _ => Owner::Held,
        }
    }

    /// Handles `first` and whatever else is queued, folding allocation requests into one
    /// catalog commit.
    async fn on_commands(
        &mut self,
        first: CoordinatorCommand,
        commands: &mut mpsc::Receiver<CoordinatorCommand>,
    ) {
        let mut requests = Vec::new();
        let mut primaries_changed = false;
        let mut next = Some(first);
        while let Some(command) = next.take() {
            match command {
                CoordinatorCommand::PartitionPrimaries { node, led } => {
                    primaries_changed |= self.on_primaries(&node, &led);
                }
                CoordinatorCommand::Allocate { key, requester } => requests.push((key, requester)),
                CoordinatorCommand::HandoffComplete { key, generation } => {
                    if self
                        .handoffs
                        .get(&key)
                        .is_some_and(|handoff| handoff.to.generation == generation)
                    {
                        self.finish_handoff(&key).await;
                    }
                }
                CoordinatorCommand::MoveShard { key, to } => self.move_shard(key, to).await,
            }
            if requests.len() < ALLOCATIONS_PER_COMMIT_MAX {
                next = commands.try_recv().ok();
            }
        }
        if !requests.is_empty() {
            self.allocate(requests).await;
        }
        if primaries_changed {
            self.rebalance().await;
        }
    }

    fn on_query(&self, query: CoordinatorQuery) {
        match query {
            CoordinatorQuery::Table(reply) => {
                let _ = reply.send(self.table.clone());
            }
            CoordinatorQuery::Rounds(reply) => {
                let _ = reply.send(self.history.rounds());
            }
            CoordinatorQuery::Moving(reply) => {
                let _ = reply.send(self.handoffs.keys().cloned().collect());
            }
        }
    }

    fn send(&self, node: &str, message: LinkMessage) {
        if let Err(error) = self.switchboard.send_to_region(node, message) {
            // The region re-requests after its request timeout; nothing is lost for good.
            tracing::warn!(%node, %error, "coordinator could not reach region");
        }
    }

    /// Answers allocation requests: known homes at once, new ones after one catalog commit.
    async fn allocate(&mut self, requests: Vec<(ShardKey, NodeId)>) {
        self.read_replication();
        let eligible = self.eligible();
        let mut replicas = self.partition_replicas();
        // A type of a replication factor no partition is placed at yet (its first deploy):
        // its family is placed now rather than at the next round.
        let unplaced = requests.iter().any(|(key, _)| {
            self.partition_of(key)
                .is_some_and(|partition| !replicas.contains_key(&partition))
        });
        if unplaced {
            self.place_partitions(&eligible).await;
            replicas = self.partition_replicas();
        }
        let mut new: BTreeMap<ShardKey, (NodeId, Vec<NodeId>)> = BTreeMap::new();
        for (key, requester) in requests {
            if let Some(handoff) = self.handoffs.get_mut(&key) {
                handoff.waiting.insert(requester);
                continue;
            }
            if let Some((_, requesters)) = new.get_mut(&key) {
                requesters.push(requester);
                continue;
            }
            let owner = self
                .table
                .get(&key)
                .map(|allocation| (allocation.clone(), self.owner_of(&key, &allocation.node)));
            match owner {
                Some((allocation, Owner::Serving)) => {
                    self.send(&requester, LinkMessage::Allocated { key, allocation });
                }
                Some((allocation, Owner::Held)) => {
                    let reason = format!(
                        "its owner {} is down or cut off, and the shard's state is there",
                        allocation.node
                    );
                    let message = LinkMessage::AllocationFailed {
                        key,
                        reason,
                        state_unavailable: true,
                    };
                    self.send(&requester, message);
                }
                _ => match self.place(&key, &self.candidates(&key, &eligible, &replicas), &new) {
                    Some(node) => {
                        debug_assert!(
                            eligible.contains(&node),
                            "a shard is placed only on an eligible member"
                        );
                        new.insert(key, (node, vec![requester]));
                    }
                    None => self.refuse(key, &requester, &replicas),
                },
            }
        }
        if new.is_empty() {
            return;
        }
        let assignments = new
            .iter()
            .map(|(key, (node, _))| (key.clone(), node.clone()))
            .collect();
        match self.commit(assignments).await {
            Ok(assigned) => {
                for (key, allocation) in assigned {
                    self.table.insert(key.clone(), allocation.clone());
                    let requesters = new.remove(&key).map(|(_, r)| r).unwrap_or_default();
                    let mut targets: BTreeSet<NodeId> = requesters.into_iter().collect();
                    targets.insert(allocation.node.clone());
                    for node in targets {
                        let message = LinkMessage::Allocated {
                            key: key.clone(),
                            allocation: allocation.clone(),
                        };
                        self.send(&node, message);
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "shard allocations not committed");
                for (key, (_, requesters)) in new {
                    for requester in requesters {
                        let reason = format!("the allocation could not be committed: {error}");
                        let message = LinkMessage::AllocationFailed {
                            key: key.clone(),
                            reason,
                            state_unavailable: false,
                        };
                        self.send(&requester, message);
                    }
                }
            }
        }
    }

    /// The least-loaded eligible node for `key` (ties to the smallest id), counting the
    /// placements of this batch: the shards of its type, and with the partition plane serving
    /// those of its partition only, as its rebalance evens them out (else a shard placed by
    /// the type's count would be moved right away by its partition's).
    fn place(
        &self,
        key: &ShardKey,
        eligible: &[NodeId],
        batch: &BTreeMap<ShardKey, (NodeId, Vec<NodeId>)>,
    ) -> Option<NodeId> {
        let partition = self.partition_of(key);
        let alike = |other: &ShardKey| {
            other.type_key == key.type_key && self.partition_of(other) == partition
        };
        let mut counts: BTreeMap<NodeId, usize> =
            eligible.iter().map(|node| (node.clone(), 0)).collect();
        let first = ShardKey::new(key.type_key.clone(), 0);
        let last = ShardKey::new(key.type_key.clone(), ShardId::MAX);
        let placed = self.table.range(first..=last).map(|(k, a)| (k, &a.node));
        let batched = batch.iter().map(|(k, (node, _))| (k, node));
        for (other, node) in placed.chain(batched) {
            if alike(other)
                && let Some(count) = counts.get_mut(node)
            {
                *count += 1;
            }
        }
        counts
            .into_iter()
            .min_by(|(left_node, left), (right_node, right)| {
                left.cmp(right).then_with(|| left_node.cmp(right_node))
            })
            .map(|(node, _)| node)
    }

    fn refuse(&self, key: ShardKey, requester: &str, replicas: &BTreeMap<u32, Vec<NodeId>>) {
        let unplaced = self
            .partition_of(&key)
            .filter(|partition| !replicas.contains_key(partition));
        let reason = match (unplaced, &self.config.role_constraint) {
            (Some(partition), _) => format!(
                "its partition {partition} is not placed yet (a first placement waits for \
                 as many members as its replication factor asks)"
            ),
            (None, Some(role)) => format!("no reachable member with role `{role}`"),
            (None, None) => "no reachable member".to_string(),
        };
        let message = LinkMessage::AllocationFailed {
            key,
            reason,
            state_unavailable: false,
        };
        self.send(requester, message);
    }

    async fn move_shard(&mut self, key: ShardKey, to: NodeId) {
        if !self.eligible().contains(&to) || self.handoffs.contains_key(&key) {
            tracing::warn!(%key, %to, "move refused: target not eligible or shard moving");
            return;
        }
        let Some(current) = self.table.get(&key) else {
            tracing::warn!(%key, "move refused: shard is not allocated");
            return;
        };
        if self.owner(&current.node) != Owner::Serving {
            tracing::warn!(%key, %to, "move refused: the owner cannot hand the shard off now");
            return;
        }
        if current.node == to {
            return;
        }
        let movement = ShardMovement {
            key,
            from: current.node.clone(),
            to,
            generation: 0,
        };
        let recorded = self.apply_moves(vec![movement]).await;
        self.history
            .record(RebalanceReason::GracefulSpread, recorded);
    }

    /// One rebalance round of each kind; rounds without movements are not recorded.
    async fn rebalance(&mut self) {
        self.observe_members();
        self.read_replication();
        let eligible = self.eligible();
        if eligible.is_empty() {
            return;
        }
        self.tend_handoffs(&eligible).await;
        let moving: BTreeSet<ShardKey> = self.handoffs.keys().cloned().collect();
        // Shards whose owner holds their state but cannot hand it off now stay where they are.
        let mut skip = moving.clone();
        for (key, allocation) in &self.table {
            if self.owner_of(key, &allocation.node) == Owner::Held {
                skip.insert(key.clone());
            }
        }
        if self.partitions_serve() {
            let cap = self.config.rebalance_per_round;
            let moves = self.plan_partitioned_moves(&eligible, &skip, cap);
            let recorded = self.apply_moves(moves.dead).await;
            self.history.record(RebalanceReason::DeadOwner, recorded);
            let recorded = self.apply_moves(moves.follow).await;
            self.history
                .record(RebalanceReason::FollowPrimary, recorded);
            let recorded = self.apply_moves(moves.spread).await;
            self.history
                .record(RebalanceReason::GracefulSpread, recorded);
            self.place_partitions(&eligible).await;
            return;
        }
        let mut planned = self.table.clone();
        let dead = rebalance::plan_dead_owner_moves(&mut planned, &eligible, &skip);
        let recorded = self.apply_moves(dead).await;
        self.history.record(RebalanceReason::DeadOwner, recorded);

        let moving: BTreeSet<ShardKey> = self.handoffs.keys().cloned().collect();
        let mut planned = self.table.clone();
        let cap = self.config.rebalance_per_round;
        let spread = rebalance::plan_spread_moves(&mut planned, &eligible, &moving, cap);
        let recorded = self.apply_moves(spread).await;
        self.history
            .record(RebalanceReason::GracefulSpread, recorded);
        self.place_partitions(&eligible).await;
    }
}
