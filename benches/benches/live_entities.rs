//! Resident memory per live idle entity when live entities far outnumber instance slots:
//! 100,000 `counter` entities activated one after another on the default 1,000-slot pool, so
//! all but the most recent 1,000 have given their instance back and stay live as cells
//! (mailbox and directory entry) that reactivate on their next message. Beside it, in the same
//! run, 1,000 entities that hold their instances (the baseline: what an entity costs when the
//! pool is not full).
//!
//! Not a criterion timing benchmark: it reads the process's resident set from
//! `/proc/self/statm` before and after each phase.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_contract::{EntityAddress, Envelope, TypeKey};
use tessera_entity::{Entities, EntityConfig, EntityParts, TypeBinding, TypeTable};
use tessera_runtime::{InstanceLimits, Runtime, RuntimeConfig};
use tessera_state::{GroupCommitConfig, LocalState, StateStore};
use tessera_tests::resident_bytes;
use tessera_tests::to_msgpack as json_to_msgpack;

const LIVE_ENTITIES: usize = 100_000;
const HOLDING_ENTITIES: usize = 1_000;

fn directory(runtime: Arc<Runtime>, dir: &std::path::Path, entity_type: &str) -> Entities {
    let plugin = runtime
        .load(&std::fs::read(tessera_tests::COUNTER).unwrap())
        .unwrap();
    let types = Arc::new(TypeTable::default());
    types.bind(
        TypeKey::new("bench", entity_type),
        TypeBinding {
            plugin,
            version: 1,
            limits: InstanceLimits::default(),
            passivate_idle: None,
            mailbox_capacity: 16,
            tenant_live_entities_max: None,
            remember: false,
        },
    );
    let store = StateStore::open(&dir.join(format!("{entity_type}.redb"))).unwrap();
    Entities::standalone(EntityParts {
        runtime,
        state: Arc::new(LocalState::new(store, GroupCommitConfig::default())),
        types,
        remember: None,
        config: EntityConfig::default(),
    })
}

/// Asks `"Get"` of `count` entities of `entity_type`, at most 256 in flight.
async fn activate(entities: &Entities, entity_type: &str, count: usize) {
    let get = json_to_msgpack(&serde_json::json!("Get"));
    let mut replies = Vec::with_capacity(256);
    for index in 0..count {
        let (envelope, reply) = Envelope::ask(get.clone());
        let address = EntityAddress::new("bench", entity_type, format!("c{index}"));
        if let Err(refused) = entities.deliver(address, 0, envelope) {
            panic!("delivery refused: {}", refused.0);
        }
        replies.push(reply);
        if replies.len() == 256 || index + 1 == count {
            for reply in replies.drain(..) {
                reply.await.unwrap().unwrap();
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
}

fn main() {
    if std::env::args().any(|arg| arg == "--test" || arg == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let config = RuntimeConfig::default();
    let slots = config.instances_max as usize;
    let runtime = Arc::new(Runtime::new(config).unwrap());
    let dir = tempfile::tempdir().unwrap();

    let holding = directory(runtime.clone(), dir.path(), "holding");
    let before = resident_bytes();
    rt.block_on(activate(&holding, "holding", HOLDING_ENTITIES));
    let holding_per_entity = resident_bytes().saturating_sub(before) / HOLDING_ENTITIES as u64;
    rt.block_on(holding.stop_all());
    drop(holding);

    let live = directory(runtime.clone(), dir.path(), "counter");
    let before = resident_bytes();
    let started = Instant::now();
    rt.block_on(activate(&live, "counter", LIVE_ENTITIES));
    let elapsed = started.elapsed();
    let per_entity = resident_bytes().saturating_sub(before) / LIVE_ENTITIES as u64;
    assert_eq!(live.live_count(), LIVE_ENTITIES);
    let swaps = live
        .stats()
        .instance_swaps
        .load(std::sync::atomic::Ordering::Relaxed);

    println!("live entities on a {slots}-slot instance pool (same run):");
    println!(
        "  {LIVE_ENTITIES} live idle entities: {:.1} KiB resident per entity; {} instances alive, {swaps} swapped out; activated in {:.1} s ({:.0}/s)",
        per_entity as f64 / 1024.0,
        runtime.live_instances(),
        elapsed.as_secs_f64(),
        LIVE_ENTITIES as f64 / elapsed.as_secs_f64()
    );
    println!(
        "  baseline, {HOLDING_ENTITIES} entities holding instances: {:.1} KiB per entity; idle live entity = {:.2}x of it",
        holding_per_entity as f64 / 1024.0,
        per_entity as f64 / holding_per_entity.max(1) as f64
    );
}
