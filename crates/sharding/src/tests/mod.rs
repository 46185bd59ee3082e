//! Behaviour of regions and the coordinator together: two or three regions in one process
//! connected by a switchboard, over a fake entity layer that records what it is asked to do,
//! with the coordinator committing through a real catalog.

mod fencing;
mod forwarding;
mod handoff;
mod lost_owner;
mod partitions;
mod remember;
mod replication;
mod routing;
mod state_reads;
mod transfer;
mod wire;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, watch};

use crate::{
    Coordinator, CoordinatorHandle, FnvExtractor, LocalEntities, Membership, Region, RegionHandle,
    RegionParts, ShardExtractor, ShardingConfig, StateRead, Switchboard, TypeSettings,
};
use tessera_contract::{
    AllocationTable, BoxFuture, EntityAddress, Envelope, ReplyPort, ShardId, ShardKey, TypeKey,
};
use tessera_entity::Refused;
use tessera_metadata::{Applied, CatalogObserver, LocalPlane, MetadataPlane, MetadataStore};
use tessera_state::remember::{RememberOp, RememberWriter, RememberedId};

/// Longest a test waits for a condition (virtual time under `start_paused`).
const WAIT_LIMIT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct FakeState {
    live: HashMap<EntityAddress, ShardId>,
    deliveries: Vec<(EntityAddress, Vec<u8>)>,
    started_without_message: Vec<EntityAddress>,
    held: Vec<ReplyPort>,
}

/// A fake entity layer: records deliveries, echoes asks (except `silent`, whose reply port it
/// keeps unanswered), records starts and passivations of remembered entities as the real one
/// does, and can hold `stop_shard` at a gate.
struct FakeEntities {
    me: std::sync::Weak<FakeEntities>,
    remember: Option<RememberWriter>,
    state: Mutex<FakeState>,
    version: watch::Sender<u64>,
    stop_gate: Option<Arc<Semaphore>>,
    stop_called: Notify,
}

impl FakeEntities {
    fn new(gate: Option<Arc<Semaphore>>, remember: Option<RememberWriter>) -> Arc<Self> {
        Arc::new_cyclic(|me| FakeEntities {
            me: me.clone(),
            remember,
            state: Mutex::default(),
            version: watch::Sender::new(0),
            stop_gate: gate,
            stop_called: Notify::new(),
        })
    }

    fn changed(&self) {
        self.version.send_modify(|version| *version += 1);
    }

    fn with<T>(&self, read: impl FnOnce(&FakeState) -> T) -> T {
        read(&self.state.lock().unwrap())
    }

    async fn wait_for(&self, what: &str, condition: impl Fn(&FakeState) -> bool) {
        let mut receiver = self.version.subscribe();
        let waited = tokio::time::timeout(
            WAIT_LIMIT,
            receiver.wait_for(|_| condition(&self.state.lock().unwrap())),
        )
        .await;
        assert!(waited.is_ok(), "timed out waiting for {what}");
    }

    fn deliveries_to(&self, address: &EntityAddress) -> Vec<Vec<u8>> {
        self.with(|state| {
            state
                .deliveries
                .iter()
                .filter(|(to, _)| to == address)
                .map(|(_, payload)| payload.clone())
                .collect()
        })
    }

    fn record(&self, op: fn(RememberedId) -> RememberOp, address: &EntityAddress, shard: ShardId) {
        if let Some(writer) = &self.remember {
            writer.record(op(RememberedId::new(address, shard)));
        }
    }
}

impl LocalEntities for FakeEntities {
    fn deliver(
        &self,
        to: EntityAddress,
        shard: ShardId,
        envelope: Envelope,
    ) -> Result<(), Refused> {
        let first = {
            let mut state = self.state.lock().unwrap();
            state
                .deliveries
                .push((to.clone(), envelope.payload.clone()));
            let first = state.live.insert(to.clone(), shard).is_none();
            if envelope.payload == b"silent" {
                if let Some(port) = envelope.reply {
                    state.held.push(port);
                }
            } else {
                let payload = envelope.payload.clone();
                envelope.answer(Ok(payload));
            }
            first
        };
        if first {
            self.record(RememberOp::Started, &to, shard);
        }
        self.changed();
        Ok(())
    }

    fn start(&self, to: EntityAddress, shard: ShardId) {
        let first = {
            let mut state = self.state.lock().unwrap();
            let first = state.live.insert(to.clone(), shard).is_none();
            if first {
                state.started_without_message.push(to.clone());
            }
            first
        };
        if first {
            self.record(RememberOp::Started, &to, shard);
        }
        self.changed();
    }

    fn passivate(&self, to: &EntityAddress) {
        let removed = self.state.lock().unwrap().live.remove(to);
        if let Some(shard) = removed {
            self.record(RememberOp::Forgotten, to, shard);
        }
        self.changed();
    }

    fn stop_shard(&self, type_key: &TypeKey, shard: ShardId) -> BoxFuture<'static, ()> {
        self.stop_called.notify_one();
        let gate = self.stop_gate.clone();
        let (me, type_key) = (self.me.clone(), type_key.clone());
        Box::pin(async move {
            if let Some(gate) = gate {
                let _permit = gate.acquire().await;
            }
            if let Some(fake) = me.upgrade() {
                fake.state
                    .lock()
                    .unwrap()
                    .live
                    .retain(|address, live_shard| {
                        !(address.type_key() == type_key && *live_shard == shard)
                    });
                fake.changed();
            }
        })
    }

    /// The entity's "state" is what was delivered to it here, in order: a read shows which
    /// node answered it.
    fn read_state(&self, to: EntityAddress, _entries_max: usize) -> BoxFuture<'static, StateRead> {
        let entries = self
            .deliveries_to(&to)
            .into_iter()
            .enumerate()
            .map(|(index, payload)| (format!("{index:04}"), payload))
            .collect();
        Box::pin(async move { Ok(entries) })
    }

    fn live_in_shard(&self, type_key: &TypeKey, shard: ShardId) -> usize {
        self.with(|state| {
            state
                .live
                .iter()
                .filter(|(address, live_shard)| {
                    &address.type_key() == type_key && **live_shard == shard
                })
                .count()
        })
    }
}

fn counter() -> TypeKey {
    TypeKey::new("acme", "counter")
}

fn test_config() -> ShardingConfig {
    ShardingConfig {
        num_shards: 16,
        ..ShardingConfig::default()
    }
}

struct Quiet;

impl CatalogObserver for Quiet {
    fn applied<'a>(&'a self, _: &'a Applied) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// A catalog in a temporary directory, for the coordinator to commit allocations to.
fn test_plane(directory: &tempfile::TempDir) -> Arc<dyn MetadataPlane> {
    let database = redb::Database::create(directory.path().join("catalog.redb")).unwrap();
    let store = MetadataStore::open(Arc::new(database)).unwrap();
    Arc::new(LocalPlane::new(store, Arc::new(Quiet)))
}

struct TestCluster {
    config: ShardingConfig,
    switchboard: Arc<Switchboard>,
    membership: Membership,
    coordinator: CoordinatorHandle,
    regions: Vec<RegionHandle>,
    fakes: Vec<Arc<FakeEntities>>,
    _catalog: tempfile::TempDir,
}

async fn start_region(
    node: &str,
    config: &ShardingConfig,
    switchboard: &Arc<Switchboard>,
    remember: Option<RememberWriter>,
    gate: Option<Arc<Semaphore>>,
    settings: TypeSettings,
) -> (RegionHandle, Arc<FakeEntities>) {
    let fake = FakeEntities::new(gate, remember.clone());
    let local: Arc<dyn LocalEntities> = fake.clone();
    let parts = RegionParts {
        node: node.to_string(),
        config: config.clone(),
        switchboard: Arc::clone(switchboard),
        remember,
        shard_states: None,
        lease: None,
        catalog: None,
    };
    let (region, ()) = Region::start(parts, |_router| (local, ())).unwrap();
    region.register_type(counter(), settings).await.unwrap();
    (region, fake)
}

async fn cluster(
    nodes: usize,
    config: ShardingConfig,
    gate: Option<Arc<Semaphore>>,
) -> TestCluster {
    let switchboard = Arc::new(Switchboard::new());
    let membership = Membership::new();
    let mut regions = Vec::new();
    let mut fakes = Vec::new();
    for index in 0..nodes {
        let node = format!("node-{index}");
        let settings = TypeSettings::new(config.num_shards);
        let (region, fake) =
            start_region(&node, &config, &switchboard, None, gate.clone(), settings).await;
        membership.join(node, Vec::<String>::new());
        regions.push(region);
        fakes.push(fake);
    }
    let catalog = tempfile::tempdir().unwrap();
    let coordinator = Coordinator::start(
        config.clone(),
        membership.subscribe(),
        Arc::clone(&switchboard),
        test_plane(&catalog),
    )
    .unwrap();
    TestCluster {
        config,
        switchboard,
        membership,
        coordinator,
        regions,
        fakes,
        _catalog: catalog,
    }
}

/// One entity id per shard, so a test can touch every shard.
fn one_id_per_shard(num_shards: u32) -> BTreeMap<ShardId, String> {
    let extractor = FnvExtractor::new(num_shards);
    let mut ids = BTreeMap::new();
    for index in 0.. {
        let id = format!("e-{index}");
        ids.entry(extractor.shard_of(&id)).or_insert(id);
        if ids.len() == num_shards as usize {
            break;
        }
    }
    ids
}

fn key_of(id: &str, num_shards: u32) -> ShardKey {
    ShardKey::new(counter(), FnvExtractor::new(num_shards).shard_of(id))
}

async fn eventually(
    coordinator: &CoordinatorHandle,
    condition: impl Fn(&AllocationTable) -> bool,
) -> AllocationTable {
    let poll = async {
        loop {
            let table = coordinator.allocation_table().await.unwrap();
            let settled = coordinator.moving_shards().await.unwrap().is_empty();
            if settled && condition(&table) {
                return table;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(WAIT_LIMIT, poll)
        .await
        .expect("condition reached")
}
