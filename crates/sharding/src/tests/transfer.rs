//! A shard's durable state moving with it between two regions that each have a store of their
//! own (real `LocalState`s): an entity larger than the mesh's 80 MiB frame streams across in
//! bounded parts and arrives whole; a transfer the new owner keeps refusing is counted as
//! stalled, and completes once the refusal ends.

use super::*;
use crate::{CoordinatorCommand, LinkMessage, RegionCounters, TRANSFER_STALL_ATTEMPTS};
use std::time::Instant;
use tessera_state::{
    EntityState, GroupCommitConfig, LocalState, SHARD_PART_BYTES_MAX, ShardPart, ShardScope,
    ShardStates, StateStore, WriteSet,
};

/// A region whose shard state lives in its own store; the type is registered if `register`.
async fn region_with_store(
    node: &str,
    config: &ShardingConfig,
    switchboard: &Arc<Switchboard>,
    store: Arc<LocalState>,
    register: bool,
    catalog: Option<tessera_metadata::MetadataStore>,
) -> RegionHandle {
    let local: Arc<dyn LocalEntities> = FakeEntities::new(None, None);
    let parts = RegionParts {
        node: node.to_string(),
        config: config.clone(),
        switchboard: Arc::clone(switchboard),
        remember: None,
        shard_states: Some(store as Arc<dyn ShardStates>),
        lease: None,
        catalog,
    };
    let (region, ()) = Region::start(parts, |_router| (local, ())).unwrap();
    if register {
        let settings = TypeSettings::new(config.num_shards);
        region.register_type(counter(), settings).await.unwrap();
    }
    region
}

struct Pair {
    stores: [Arc<LocalState>; 2],
    regions: [RegionHandle; 2],
    coordinator: CoordinatorHandle,
    switchboard: Arc<Switchboard>,
    plane: Arc<dyn MetadataPlane>,
    _membership: Membership,
    _directory: tempfile::TempDir,
}

/// node-0 and node-1 with stores of their own; node-1 registers the type if `register`.
async fn pair(config: &ShardingConfig, register: bool) -> Pair {
    pair_reading(config, register, false).await
}

/// [`pair`], with node-0's region reading the coordinator's catalog if `catalog` (as a node's
/// region reads its applied catalog).
async fn pair_reading(config: &ShardingConfig, register: bool, catalog: bool) -> Pair {
    let directory = tempfile::tempdir().unwrap();
    let open = |name: &str| {
        let store = StateStore::open(&directory.path().join(format!("{name}.redb"))).unwrap();
        Arc::new(LocalState::new(store, GroupCommitConfig::default()))
    };
    let stores = [open("node-0"), open("node-1")];
    let switchboard = Arc::new(Switchboard::new());
    let membership = Membership::new();
    let plane = test_plane(&directory);
    let catalog = catalog.then(|| plane.store().clone());
    let first = region_with_store(
        "node-0",
        config,
        &switchboard,
        stores[0].clone(),
        true,
        catalog,
    )
    .await;
    let second = region_with_store(
        "node-1",
        config,
        &switchboard,
        stores[1].clone(),
        register,
        None,
    )
    .await;
    membership.join("node-0", Vec::<String>::new());
    membership.join("node-1", Vec::<String>::new());
    let coordinator = Coordinator::start(
        config.clone(),
        membership.subscribe(),
        Arc::clone(&switchboard),
        plane.clone(),
    )
    .unwrap();
    Pair {
        stores,
        regions: [first, second],
        coordinator,
        switchboard,
        plane,
        _membership: membership,
        _directory: directory,
    }
}

fn scope_of(key: &ShardKey) -> ShardScope {
    let (extractor, shard) = (FnvExtractor::new(16), key.shard);
    ShardScope {
        type_key: key.type_key.clone(),
        shard,
        contains: Arc::new(move |id: &str| extractor.shard_of(id) == shard),
    }
}

fn export_all(store: &LocalState, key: &ShardKey) -> Vec<ShardPart> {
    let parts = store.export(&scope_of(key)).unwrap();
    parts.collect::<Result<_, _>>().unwrap()
}

/// `id`'s state on node-0: `keys` values of 1 MiB and one of `big_bytes` (more than a part).
async fn write_state(store: &LocalState, id: &str, keys: usize, big_bytes: usize) {
    let address = counter().entity(id);
    for batch in 0..keys.div_ceil(4) {
        let mut writes = WriteSet::new(address.clone());
        for key in batch * 4..((batch + 1) * 4).min(keys) {
            writes.put(format!("k{key:04}"), vec![key as u8; 1 << 20]);
        }
        store.commit(writes).await.unwrap();
    }
    let mut writes = WriteSet::new(address);
    writes.put("big", (0..big_bytes).map(|at| (at % 251) as u8).collect());
    store.commit(writes).await.unwrap();
}

/// Makes node-0 own `id`'s shard and tells the coordinator to move it to node-1.
async fn move_to_second(pair: &Pair, id: &str) -> ShardKey {
    let key = key_of(id, 16);
    // Retried: the first allocation (the coordinator's seat, a catalog commit) may take
    // longer than one request timeout on a busy machine.
    let mut answered = false;
    for _ in 0..20 {
        let reply = pair.regions[0].ask(counter().entity(id), b"warm".to_vec(), None);
        if reply.await.is_ok() {
            answered = true;
            break;
        }
    }
    assert!(answered, "{id} answers on node-0");
    let table = pair.coordinator.allocation_table().await.unwrap();
    assert_eq!(
        table[&key].node, "node-0",
        "the first allocation goes to node-0"
    );
    let command = CoordinatorCommand::MoveShard {
        key: key.clone(),
        to: "node-1".into(),
    };
    pair.coordinator.command(command).await.unwrap();
    key
}

/// Waits until the move of `key` to node-1 is settled.
async fn settled(pair: &Pair, key: &ShardKey, wait: Duration) {
    let settled = async {
        loop {
            let table = pair.coordinator.allocation_table().await.unwrap();
            let moving = pair.coordinator.moving_shards().await.unwrap();
            if table[key].node == "node-1" && !moving.contains(key) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(wait, settled)
        .await
        .expect("the move settles");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_larger_than_a_mesh_frame_moves_whole_in_bounded_parts() {
    let config = test_config();
    let pair = pair(&config, true).await;
    let id = "big-entity";
    // 84 MiB over 84 keys and one 6 MiB value: more than the mesh's 80 MiB frame.
    write_state(&pair.stores[0], id, 84, 6 << 20).await;
    let key = key_of(id, 16);
    let before = export_all(&pair.stores[0], &key);
    let shard_bytes: usize = before.iter().map(ShardPart::bytes).sum();
    assert!(shard_bytes > 90 << 20, "{shard_bytes} bytes");

    let started = Instant::now();
    move_to_second(&pair, id).await;
    settled(&pair, &key, Duration::from_secs(120)).await;
    let took = started.elapsed();

    let after = export_all(&pair.stores[1], &key);
    assert_eq!(after, before, "node-1 holds every row node-0 had");
    let address = counter().entity(id);
    let big = pair.stores[1].get(&address, "big").unwrap().unwrap();
    assert_eq!(big.len(), 6 << 20);
    assert!(
        big.iter()
            .enumerate()
            .all(|(at, byte)| *byte == (at % 251) as u8)
    );
    assert!(
        export_all(&pair.stores[0], &key)[0].entities.is_empty(),
        "node-0 discarded its copy"
    );
    let counters: RegionCounters = pair.regions[0].counters();
    let largest = before.iter().map(ShardPart::bytes).max().unwrap();
    assert!(largest <= SHARD_PART_BYTES_MAX);
    assert!(counters.shard_parts_sent >= before.len() as u64);
    assert_eq!(counters.shard_transfer_stalls, 0);
    assert_eq!(
        pair.regions[1].counters().shard_parts_installed,
        before.len() as u64
    );
    eprintln!(
        "moved {shard_bytes} bytes in {} parts (largest {largest} bytes) in {took:?}",
        before.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_that_cannot_progress_is_counted_and_completes_once_it_can() {
    let config = ShardingConfig {
        request_timeout: Duration::from_millis(40),
        ..test_config()
    };
    // node-1 does not know the type: it refuses every part.
    let pair = pair(&config, false).await;
    let id = "stuck";
    write_state(&pair.stores[0], id, 2, 5 << 20).await;
    let key = move_to_second(&pair, id).await;
    let before = export_all(&pair.stores[0], &key);
    let stalled = async {
        while pair.regions[0].counters().shard_transfer_stalls == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), stalled)
        .await
        .expect("the stalled transfer is counted");
    assert!(pair.regions[1].counters().shard_parts_refused >= u64::from(TRANSFER_STALL_ATTEMPTS));
    // Once node-1 knows the type, the transfer goes through.
    let settings = TypeSettings::new(config.num_shards);
    pair.regions[1]
        .register_type(counter(), settings)
        .await
        .unwrap();
    settled(&pair, &key, Duration::from_secs(20)).await;
    assert_eq!(export_all(&pair.stores[1], &key), before);
}

/// A region still sending a handoff's state stops, and sends what waited for the shard to its
/// new home, once its catalog says the coordinator settled the move without it (it took the
/// node for gone) — instead of holding the shard forever for a transfer nobody will take. Until
/// then, hearing of the new allocation (an announcement, a forwarded envelope) stops nothing:
/// a handoff under way must finish, or the new owner starts without the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_the_coordinator_settled_without_this_region_is_abandoned() {
    let config = ShardingConfig {
        request_timeout: Duration::from_millis(40),
        ..test_config()
    };
    // node-1 does not know the type: it refuses every part, so the transfer never ends.
    let pair = pair_reading(&config, false, true).await;
    let id = "abandoned";
    write_state(&pair.stores[0], id, 1, 1 << 10).await;
    let key = move_to_second(&pair, id).await;
    let receiver = pair.regions[1].clone();
    let refused_at_least = move |count: u64| {
        let receiver = receiver.clone();
        async move {
            while receiver.counters().shard_parts_refused < count {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), refused_at_least(1))
        .await
        .expect("node-1 refuses the first part");
    // An ask waits in node-0's handoff buffer.
    let region = pair.regions[0].clone();
    let asked = tokio::spawn(async move {
        region
            .ask(
                counter().entity(id),
                b"after".to_vec(),
                Some(Duration::from_secs(30)),
            )
            .await
    });
    // The new allocation announced while the handoff is still in flight changes nothing: the
    // transfer goes on.
    let table = pair.coordinator.allocation_table().await.unwrap();
    let allocation = table[&key].clone();
    let announce = || LinkMessage::Allocated {
        key: key.clone(),
        allocation: allocation.clone(),
    };
    pair.switchboard
        .send_to_region("node-0", announce())
        .unwrap();
    let refused = pair.regions[1].counters().shard_parts_refused;
    tokio::time::timeout(Duration::from_secs(10), refused_at_least(refused + 2))
        .await
        .expect("the transfer goes on after the announcement");
    assert!(!asked.is_finished(), "the ask still waits for the handoff");

    // The coordinator settles the move without node-0 (a committed completion) and announces
    // it: node-0 abandons the transfer and sends the ask on.
    let settle = tessera_metadata::Command::CompleteHandoff {
        key: key.clone(),
        generation: allocation.generation,
    };
    pair.plane
        .submit(settle)
        .await
        .expect("the completion commits");
    pair.switchboard
        .send_to_region("node-0", announce())
        .unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), asked)
        .await
        .expect("the waiting ask is sent on")
        .unwrap();
    // node-1 does not know the type: the ask reached it and was refused there.
    let error = reply.expect_err("node-1 refuses the type");
    assert_ne!(error.kind, tessera_contract::ErrorKind::Timeout, "{error}");
    let refused = pair.regions[1].counters().shard_parts_refused;
    tokio::time::sleep(config.request_timeout * 10).await;
    assert_eq!(
        pair.regions[1].counters().shard_parts_refused,
        refused,
        "no part is sent after the handoff was abandoned"
    );
}
