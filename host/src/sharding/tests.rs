//! Behaviour of regions and the coordinator together: two or three regions in one process
//! connected by a switchboard, over a fake entity layer that records what it is asked to do.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::{Notify, Semaphore, watch};

use crate::envelope::{EntityAddress, Envelope, ErrorKind, ReplyPort, TypeKey};
use crate::sharding::coordinator::{CoordinatorCommand, CoordinatorMessage};
use crate::sharding::link::{LinkMessage, ReplyTo, WireBody, WireEnvelope, WireReply};
use crate::sharding::local::BoxFuture;
use crate::sharding::remember::memory::{FaultyStore, MemoryStore};
use crate::sharding::remember::redb::RedbStore;
use crate::sharding::remember::{FailurePolicy, RememberEvent, RememberStore};
use crate::sharding::{
    Allocation, Coordinator, CoordinatorHandle, FnvExtractor, LocalEntities, Membership,
    RebalanceReason, Region, RegionHandle, ShardExtractor, ShardId, ShardKey, ShardingConfig,
    Switchboard, TypeSettings,
};

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
/// keeps unanswered), reports lifecycle to its region, and can hold `stop_shard` at a gate.
struct FakeEntities {
    me: std::sync::Weak<FakeEntities>,
    region: OnceLock<RegionHandle>,
    state: Mutex<FakeState>,
    version: watch::Sender<u64>,
    stop_gate: Option<Arc<Semaphore>>,
    stop_called: Notify,
}

impl FakeEntities {
    fn new(stop_gate: Option<Arc<Semaphore>>) -> Arc<Self> {
        Arc::new_cyclic(|me| FakeEntities {
            me: me.clone(),
            region: OnceLock::new(),
            state: Mutex::default(),
            version: watch::Sender::new(0),
            stop_gate,
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

    fn region(&self) -> &RegionHandle {
        self.region
            .get()
            .expect("tests set the region before sending")
    }
}

impl LocalEntities for FakeEntities {
    fn deliver(&self, to: EntityAddress, shard: ShardId, envelope: Envelope) {
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
            self.region().entity_started(&to);
        }
        self.changed();
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
            self.region().entity_started(&to);
        }
        self.changed();
    }

    fn passivate(&self, to: &EntityAddress) {
        let removed = self.state.lock().unwrap().live.remove(to).is_some();
        if removed {
            self.region().entity_passivated(to);
        }
        self.changed();
    }

    fn stop_shard(&self, type_key: &TypeKey, shard: ShardId) -> BoxFuture {
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

struct TestCluster {
    config: ShardingConfig,
    switchboard: Arc<Switchboard>,
    membership: Membership,
    coordinator: CoordinatorHandle,
    regions: Vec<RegionHandle>,
    fakes: Vec<Arc<FakeEntities>>,
}

async fn start_region(
    node: &str,
    config: &ShardingConfig,
    switchboard: &Arc<Switchboard>,
    store: Option<Arc<dyn RememberStore>>,
    gate: Option<Arc<Semaphore>>,
    settings: TypeSettings,
) -> (RegionHandle, Arc<FakeEntities>) {
    let fake = FakeEntities::new(gate);
    let local: Arc<dyn LocalEntities> = fake.clone();
    let region = Region::start(
        node.to_string(),
        config.clone(),
        local,
        Arc::clone(switchboard),
        store,
    )
    .unwrap();
    fake.region.set(region.clone()).unwrap();
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
    let coordinator = Coordinator::start(
        config.clone(),
        membership.subscribe(),
        Arc::clone(&switchboard),
    )
    .unwrap();
    TestCluster {
        config,
        switchboard,
        membership,
        coordinator,
        regions,
        fakes,
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

#[tokio::test(start_paused = true)]
async fn asks_reach_the_owner_through_any_region_and_replies_come_back() {
    let cluster = cluster(3, test_config(), None).await;
    for index in 0..30 {
        let address = counter().entity(format!("user-{index}"));
        let via = &cluster.regions[index % 3];
        let payload = format!("hello {index}").into_bytes();
        let reply = via.ask(address, payload.clone(), None).await;
        assert_eq!(reply, Ok(payload));
    }
    let table = cluster.coordinator.allocation_table().await.unwrap();
    for index in 0..30 {
        let address = counter().entity(format!("user-{index}"));
        let owner = &table[&key_of(&address.id, 16)].node;
        for (node, fake) in cluster.fakes.iter().enumerate() {
            let expected = usize::from(owner == &format!("node-{node}"));
            assert_eq!(
                fake.deliveries_to(&address).len(),
                expected,
                "{address} on node-{node}"
            );
        }
    }
    let owners: std::collections::BTreeSet<_> = table.values().map(|a| a.node.clone()).collect();
    assert_eq!(owners.len(), 3, "least-shards placement uses every node");
}

#[tokio::test(start_paused = true)]
async fn unregistered_type_is_refused() {
    let cluster = cluster(1, test_config(), None).await;
    let unknown = TypeKey::new("acme", "ghost").entity("g-1");
    let told = cluster.regions[0].tell(unknown.clone(), vec![1]).await;
    assert_eq!(told.unwrap_err().kind, ErrorKind::EntityTypeNotRegistered);
    let asked = cluster.regions[0].ask(unknown, vec![1], None).await;
    assert_eq!(asked.unwrap_err().kind, ErrorKind::EntityTypeNotRegistered);
    cluster.regions[0].unregister_type(&counter());
    let gone = cluster.regions[0]
        .ask(counter().entity("c"), vec![1], None)
        .await;
    assert_eq!(gone.unwrap_err().kind, ErrorKind::EntityTypeNotRegistered);
}

#[tokio::test(start_paused = true)]
async fn a_forwarded_envelope_for_a_type_the_owner_lacks_is_answered_not_lost() {
    let cluster = cluster(2, test_config(), None).await;
    // Find an entity owned by node-1, then unregister the type there only.
    let ids = one_id_per_shard(16);
    for id in ids.values() {
        cluster.regions[0]
            .tell(counter().entity(id.clone()), vec![0])
            .await
            .unwrap();
    }
    cluster.fakes[1]
        .wait_for("some deliveries on node-1", |s| !s.deliveries.is_empty())
        .await;
    let table = cluster.coordinator.allocation_table().await.unwrap();
    let remote_id = ids
        .values()
        .find(|id| table[&key_of(id, 16)].node == "node-1")
        .expect("least-shards placement gives node-1 some shards");
    cluster.regions[1].unregister_type(&counter());
    let reply = cluster.regions[0]
        .ask(counter().entity(remote_id.clone()), vec![1], None)
        .await;
    assert_eq!(reply.unwrap_err().kind, ErrorKind::EntityTypeNotRegistered);
}

#[tokio::test(start_paused = true)]
async fn ask_times_out_at_its_deadline() {
    let cluster = cluster(2, test_config(), None).await;
    let timeout = Duration::from_millis(100);
    for region in &cluster.regions {
        let started = tokio::time::Instant::now();
        let reply = region
            .ask(counter().entity("quiet"), b"silent".to_vec(), Some(timeout))
            .await;
        assert_eq!(reply.unwrap_err().kind, ErrorKind::Timeout);
        let waited = started.elapsed();
        assert!(
            waited >= timeout && waited < timeout * 2,
            "waited {waited:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn allocation_buffer_overflow_is_reported_to_the_caller() {
    let config = ShardingConfig {
        allocation_buffer: 2,
        ..test_config()
    };
    let switchboard = Arc::new(Switchboard::new());
    // A coordinator that never answers keeps the allocation in flight.
    let (silent_coordinator, _requests) = tokio::sync::mpsc::channel::<CoordinatorMessage>(16);
    switchboard.connect_coordinator(silent_coordinator);
    let settings = TypeSettings::new(16);
    let (region, fake) = start_region("node-0", &config, &switchboard, None, None, settings).await;
    let address = counter().entity("busy");
    region.tell(address.clone(), vec![1]).await.unwrap();
    region.tell(address.clone(), vec![2]).await.unwrap();
    let overflow = region.tell(address.clone(), vec![3]).await.unwrap_err();
    assert_eq!(overflow.kind, ErrorKind::BufferOverflow);
    let asked = region
        .ask(address.clone(), vec![4], None)
        .await
        .unwrap_err();
    assert_eq!(asked.kind, ErrorKind::BufferOverflow);
    // The buffered two are failed, not lost silently, when the allocation never comes.
    let patient = Some(Duration::from_secs(2));
    let late = region
        .ask(counter().entity("other"), vec![5], patient)
        .await
        .unwrap_err();
    assert_eq!(late.kind, ErrorKind::Unavailable, "{late}");
    assert!(fake.with(|s| s.deliveries.is_empty()));
    let counters = region.counters();
    assert_eq!(counters.refused.get("buffer_overflow"), Some(&2));
    assert_eq!(
        counters.tells_dropped, 2,
        "the two buffered tells failed with no one to tell"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_per_sender_is_kept_under_concurrency() {
    let cluster = cluster(3, test_config(), None).await;
    const SENDERS: usize = 24;
    const MESSAGES: usize = 60;
    const ENTITIES: usize = 6;
    let mut tasks = Vec::new();
    for sender in 0..SENDERS {
        let region = cluster.regions[sender % 3].clone();
        tasks.push(tokio::spawn(async move {
            for sequence in 0..MESSAGES {
                let entity =
                    counter().entity(format!("ordered-{}", (sender + sequence) % ENTITIES));
                let payload = serde_json::to_vec(&(sender, sequence)).unwrap();
                region.tell(entity, payload).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let total = SENDERS * MESSAGES;
    let all_delivered = async {
        // Polls a condition (not a race-hiding sleep): every accepted tell must arrive.
        loop {
            let delivered: usize = cluster
                .fakes
                .iter()
                .map(|f| f.with(|s| s.deliveries.len()))
                .sum();
            if delivered == total {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(WAIT_LIMIT, all_delivered)
        .await
        .expect("every tell delivered");
    for fake in &cluster.fakes {
        let mut last: HashMap<(String, usize), usize> = HashMap::new();
        for (address, payload) in fake.with(|s| s.deliveries.clone()) {
            let (sender, sequence): (usize, usize) = serde_json::from_slice(&payload).unwrap();
            if let Some(previous) = last.insert((address.id.clone(), sender), sequence) {
                assert!(
                    previous < sequence,
                    "{address}: sender {sender} {previous} then {sequence}"
                );
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn handoff_stops_the_losing_owner_and_drains_its_buffer_in_order() {
    let gate = Arc::new(Semaphore::new(0));
    let cluster = cluster(2, test_config(), Some(Arc::clone(&gate))).await;
    let ids = one_id_per_shard(16);
    for id in ids.values() {
        let reply = cluster.regions[0].ask(counter().entity(id.clone()), b"warm".to_vec(), None);
        assert!(reply.await.is_ok());
    }
    let table = cluster.coordinator.allocation_table().await.unwrap();
    let id = ids
        .values()
        .find(|id| table[&key_of(id, 16)].node == "node-0")
        .expect("node-0 owns some shards")
        .clone();
    let key = key_of(&id, 16);
    let address = counter().entity(id.clone());
    let (losing, winning) = (&cluster.fakes[0], &cluster.fakes[1]);
    assert_eq!(losing.live_in_shard(&counter(), key.shard), 1);
    let before = table[&key].generation;

    cluster
        .coordinator
        .command(CoordinatorCommand::MoveShard {
            key: key.clone(),
            to: "node-1".into(),
        })
        .await
        .unwrap();
    losing.stop_called.notified().await;
    // The handoff is under way and held at the gate: these are buffered by node-0, in order,
    // whichever region they are sent through.
    for sequence in 0..10u8 {
        let via = &cluster.regions[usize::from(sequence % 2)];
        via.tell(address.clone(), vec![sequence]).await.unwrap();
    }
    assert!(
        winning.deliveries_to(&address).is_empty(),
        "nothing reaches node-1 before stop"
    );
    gate.add_permits(1);
    winning
        .wait_for("buffered messages at the new owner", |s| {
            s.deliveries.iter().filter(|(to, _)| to == &address).count() == 10
        })
        .await;

    let moved: Vec<Vec<u8>> = winning.deliveries_to(&address);
    let from_node0: Vec<u8> = moved.iter().map(|p| p[0]).filter(|s| s % 2 == 0).collect();
    let from_node1: Vec<u8> = moved.iter().map(|p| p[0]).filter(|s| s % 2 == 1).collect();
    assert_eq!(from_node0, vec![0, 2, 4, 6, 8]);
    assert_eq!(from_node1, vec![1, 3, 5, 7, 9]);
    assert_eq!(losing.live_in_shard(&counter(), key.shard), 0);
    assert_eq!(losing.deliveries_to(&address), vec![b"warm".to_vec()]);
    let table = cluster.coordinator.allocation_table().await.unwrap();
    assert_eq!(table[&key].node, "node-1");
    assert!(table[&key].generation > before);
    let rounds = cluster.coordinator.rebalance_rounds().await.unwrap();
    assert!(
        rounds
            .iter()
            .any(|round| round.movements.iter().any(|m| m.key == key))
    );
    // After the handoff both regions route straight to the new owner.
    assert_eq!(
        cluster.regions[0]
            .ask(address.clone(), b"after".to_vec(), None)
            .await,
        Ok(b"after".to_vec())
    );
    assert_eq!(winning.deliveries_to(&address).len(), 11);
}

#[tokio::test(start_paused = true)]
async fn dead_owner_moves_are_uncapped_and_spread_moves_capped() {
    let config = ShardingConfig {
        rebalance_per_round: 2,
        ..test_config()
    };
    let mut cluster = cluster(2, config, None).await;
    for id in one_id_per_shard(16).values() {
        cluster.regions[0]
            .tell(counter().entity(id.clone()), vec![0])
            .await
            .unwrap();
    }
    let table = cluster.coordinator.allocation_table().await.unwrap();
    assert_eq!(table.len(), 16);
    let on_node1 = table.values().filter(|a| a.node == "node-1").count();
    assert_eq!(on_node1, 8, "least-shards placement splits evenly");

    cluster.membership.set_unreachable("node-1", true);
    let table = eventually(&cluster.coordinator, |table| {
        table.values().all(|a| a.node == "node-0")
    })
    .await;
    assert_eq!(table.len(), 16);
    let rounds = cluster.coordinator.rebalance_rounds().await.unwrap();
    let dead: Vec<_> = rounds
        .iter()
        .filter(|r| r.reason == RebalanceReason::DeadOwner)
        .collect();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0].movements.len(),
        8,
        "all orphaned shards move in one round, above the cap"
    );

    let settings = TypeSettings::new(16);
    let (region, fake) = start_region(
        "node-2",
        &cluster.config,
        &cluster.switchboard,
        None,
        None,
        settings,
    )
    .await;
    cluster.regions.push(region);
    cluster.fakes.push(fake);
    cluster.membership.join("node-2", Vec::<String>::new());
    let table = eventually(&cluster.coordinator, |table| {
        table.values().filter(|a| a.node == "node-2").count() == 8
    })
    .await;
    let rounds = cluster.coordinator.rebalance_rounds().await.unwrap();
    let spread: Vec<_> = rounds
        .iter()
        .filter(|r| r.reason == RebalanceReason::GracefulSpread)
        .collect();
    assert_eq!(spread.len(), 4);
    assert!(
        spread.iter().all(|r| r.movements.len() == 2),
        "spread capped at 2 per round"
    );
    assert!(
        cluster
            .coordinator
            .moving_shards()
            .await
            .unwrap()
            .is_empty()
    );
    for (key, allocation) in &table {
        if allocation.node == "node-2" {
            let live = cluster.fakes[0].live_in_shard(&key.type_key, key.shard);
            assert_eq!(
                live, 0,
                "shard {key} moved to node-2 but still live on node-0"
            );
        }
    }
}

async fn eventually(
    coordinator: &CoordinatorHandle,
    condition: impl Fn(&crate::sharding::AllocationTable) -> bool,
) -> crate::sharding::AllocationTable {
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

async fn remembered_region(
    store: Arc<dyn RememberStore>,
    policy: FailurePolicy,
) -> (TestCluster, RegionHandle, Arc<FakeEntities>) {
    let mut config = test_config();
    config.remember.failure_policy = policy;
    let mut cluster = cluster(0, config.clone(), None).await;
    let settings = TypeSettings::new(16).remembered();
    let (region, fake) = start_region(
        "node-0",
        &config,
        &cluster.switchboard,
        Some(store),
        None,
        settings,
    )
    .await;
    cluster.membership.join("node-0", Vec::<String>::new());
    cluster.regions.push(region.clone());
    cluster.fakes.push(fake.clone());
    (cluster, region, fake)
}

#[tokio::test]
async fn a_fail_closed_shard_fails_fast_after_a_store_error() {
    let store = Arc::new(FaultyStore::new(MemoryStore::default(), 0));
    let (_cluster, region, _fake) = remembered_region(store, FailurePolicy::FailClosed).await;
    let mut events = region.remember_events().expect("remember enabled");
    let address = counter().entity("c-1");
    assert_eq!(
        region.ask(address.clone(), b"1".to_vec(), None).await,
        Ok(b"1".to_vec())
    );
    assert!(
        region.flush_remembered().await.is_err(),
        "the failed write is reported by flush"
    );
    let event = events.recv().await.unwrap();
    let RememberEvent::StoreFailed { policy, .. } = event;
    assert_eq!(policy, FailurePolicy::FailClosed);
    let refused = region
        .ask(address.clone(), b"2".to_vec(), None)
        .await
        .unwrap_err();
    assert_eq!(refused.kind, ErrorKind::Unavailable);
    assert!(refused.message.contains("fail-closed"), "{refused}");
    let told = region.tell(address, b"3".to_vec()).await.unwrap_err();
    assert_eq!(told.kind, ErrorKind::Unavailable);
}

#[tokio::test]
async fn a_fail_open_shard_keeps_routing_after_a_store_error() {
    let store = Arc::new(FaultyStore::new(MemoryStore::default(), 0));
    let (_cluster, region, _fake) = remembered_region(store, FailurePolicy::FailOpen).await;
    let mut events = region.remember_events().expect("remember enabled");
    let address = counter().entity("c-1");
    assert_eq!(
        region.ask(address.clone(), b"1".to_vec(), None).await,
        Ok(b"1".to_vec())
    );
    assert!(region.flush_remembered().await.is_err());
    let RememberEvent::StoreFailed { policy, .. } = events.recv().await.unwrap();
    assert_eq!(policy, FailurePolicy::FailOpen);
    assert_eq!(
        region.ask(address, b"2".to_vec(), None).await,
        Ok(b"2".to_vec())
    );
}

#[tokio::test]
async fn a_passivated_entity_is_forgotten() {
    let store = MemoryStore::default();
    let (_cluster, region, fake) =
        remembered_region(Arc::new(store.clone()), FailurePolicy::FailOpen).await;
    let (first, second) = (counter().entity("e-1"), counter().entity("e-2"));
    region.tell(first.clone(), vec![1]).await.unwrap();
    region.tell(second.clone(), vec![1]).await.unwrap();
    fake.wait_for("both live", |s| s.live.len() == 2).await;
    region.flush_remembered().await.unwrap();
    let remembered = |address: &EntityAddress| {
        let key = key_of(&address.id, 16);
        store
            .list_ids(&key.type_key, key.shard)
            .unwrap()
            .contains(&address.id)
    };
    assert!(remembered(&first) && remembered(&second));
    region.passivate(first.clone()).await.unwrap();
    fake.wait_for("first passivated", |s| !s.live.contains_key(&first))
        .await;
    region.flush_remembered().await.unwrap();
    assert!(!remembered(&first), "passivation forgets the id");
    assert!(remembered(&second));
}

#[tokio::test]
async fn remembered_entities_come_back_after_a_region_restart() {
    let directory = tempfile::tempdir().unwrap();
    let database = Arc::new(redb::Database::create(directory.path().join("node.redb")).unwrap());
    let store: Arc<dyn RememberStore> = Arc::new(RedbStore::new(Arc::clone(&database)).unwrap());
    let (cluster, region, fake) =
        remembered_region(Arc::clone(&store), FailurePolicy::FailOpen).await;
    let ids: Vec<String> = (0..6).map(|index| format!("user-{index}")).collect();
    for id in &ids {
        region
            .tell(counter().entity(id.clone()), vec![1])
            .await
            .unwrap();
    }
    fake.wait_for("all live", |s| s.live.len() == 6).await;
    region.passivate(counter().entity("user-3")).await.unwrap();
    fake.wait_for("user-3 passivated", |s| s.live.len() == 5)
        .await;
    region.flush_remembered().await.unwrap();
    region.shutdown().await;
    drop(region);
    drop(fake);

    let store: Arc<dyn RememberStore> = Arc::new(RedbStore::new(database).unwrap());
    let settings = TypeSettings::new(16).remembered();
    let (_restarted, fake) = start_region(
        "node-0",
        &cluster.config,
        &cluster.switchboard,
        Some(store),
        None,
        settings,
    )
    .await;
    fake.wait_for("remembered entities restarted", |s| {
        s.started_without_message.len() == 5
    })
    .await;
    let mut started: Vec<String> = fake.with(|s| {
        s.started_without_message
            .iter()
            .map(|a| a.id.clone())
            .collect()
    });
    started.sort();
    assert_eq!(
        started,
        vec!["user-0", "user-1", "user-2", "user-4", "user-5"]
    );
}

#[tokio::test(start_paused = true)]
async fn recovery_is_paced_by_the_configured_rate() {
    let store = MemoryStore::default();
    let ids: Vec<crate::sharding::remember::RememberOp> = (0..400)
        .map(|index| {
            let id = format!("r-{index}");
            let key = key_of(&id, 16);
            crate::sharding::remember::RememberOp::Started(
                crate::sharding::remember::RememberedId {
                    type_key: key.type_key,
                    shard: key.shard,
                    id,
                },
            )
        })
        .collect();
    store.apply(&ids).unwrap();
    let mut config = test_config();
    config.recovery_rate_per_second = 200;
    let cluster = cluster(0, config.clone(), None).await;
    let started = tokio::time::Instant::now();
    let settings = TypeSettings::new(16).remembered();
    let (_region, fake) = start_region(
        "node-0",
        &config,
        &cluster.switchboard,
        Some(Arc::new(store)),
        None,
        settings,
    )
    .await;
    cluster.membership.join("node-0", Vec::<String>::new());
    fake.wait_for("all recovered", |s| s.started_without_message.len() == 400)
        .await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1900),
        "400 at 200/s took only {elapsed:?}"
    );
}

#[test]
fn wire_messages_round_trip_through_messagepack() {
    let key = ShardKey::new(counter(), 7);
    let allocation = Allocation {
        node: "node-1".into(),
        generation: 3,
    };
    let messages = vec![
        LinkMessage::Deliver(WireEnvelope {
            address: counter().entity("c-1"),
            key: key.clone(),
            allocation: allocation.clone(),
            hops: 1,
            body: WireBody::Message {
                payload: vec![1, 2, 3],
                reply_to: Some(ReplyTo {
                    node: "node-0".into(),
                    request_id: 9,
                    timeout_ms: 750,
                }),
            },
        }),
        LinkMessage::AskReply {
            request_id: 9,
            reply: WireReply::Ok(vec![4]),
        },
        LinkMessage::HandOff {
            key: key.clone(),
            to: allocation.clone(),
        },
    ];
    for message in messages {
        let bytes = rmp_serde::to_vec_named(&message).unwrap();
        let back: LinkMessage = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, message);
    }
    let command = CoordinatorCommand::Allocate {
        key,
        requester: "node-0".into(),
    };
    let bytes = rmp_serde::to_vec_named(&command).unwrap();
    assert_eq!(
        rmp_serde::from_slice::<CoordinatorCommand>(&bytes).unwrap(),
        command
    );
}

#[derive(Debug)]
struct AlwaysShardFive;

impl ShardExtractor for AlwaysShardFive {
    fn shard_of(&self, _id: &str) -> ShardId {
        5
    }
}

#[tokio::test(start_paused = true)]
async fn a_type_can_bring_its_own_shard_extractor() {
    let cluster = cluster(2, test_config(), None).await;
    let orders = TypeKey::new("acme", "orders");
    let settings = TypeSettings::new(16).with_extractor(Arc::new(AlwaysShardFive));
    for region in &cluster.regions {
        region
            .register_type(orders.clone(), settings.clone())
            .await
            .unwrap();
    }
    for id in ["o-1", "o-2", "o-3"] {
        let reply = cluster.regions[1]
            .ask(orders.entity(id), b"x".to_vec(), None)
            .await;
        assert_eq!(reply, Ok(b"x".to_vec()));
    }
    let table = cluster.coordinator.allocation_table().await.unwrap();
    let shards: Vec<ShardId> = table
        .keys()
        .filter(|key| key.type_key == orders)
        .map(|key| key.shard)
        .collect();
    assert_eq!(shards, vec![5]);
}
