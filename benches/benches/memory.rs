//! Resident memory per idle live `counter` entity with 10,000 live, beside the same number of
//! raw instances of the same component (the baseline), measured in the same run.
//!
//! Not a criterion timing benchmark: it activates the entities, lets them go idle, and reads
//! the process's resident set from `/proc/self/statm`. Target: <= 64 KiB per entity.
//!
//! 20,000 pooled instances need more memory mappings than Linux's default
//! `vm.max_map_count` (65,530) allows: run `sysctl -w vm.max_map_count=1048576` first.

use std::sync::Arc;
use std::time::Duration;
use tessera_benches::baseline::RawInstance;
use tessera_contract::{EntityAddress, Envelope, TypeKey};
use tessera_entity::{Entities, EntityConfig, EntityParts, TypeBinding, TypeTable};
use tessera_runtime::{InstanceLimits, Runtime, RuntimeConfig};
use tessera_state::{EntityState, GroupCommitConfig, LocalState, StateStore};
use tessera_tests::resident_bytes;
use tessera_tests::to_msgpack as json_to_msgpack;

const LIVE_ENTITIES: usize = 10_000;

fn main() {
    // `cargo bench` passes `--bench`; run only then (and not under `cargo test --benches`
    // with `--test`, which would take a minute for nothing).
    if std::env::args().any(|arg| arg == "--test" || arg == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // A 10,000-slot pool does not fit 4 GiB reservations per memory in this VM's address
    // space: use 64 MiB reservations (explicit bounds checks) as the design note suggests.
    let runtime = Arc::new(
        Runtime::new(RuntimeConfig {
            instances_max: (LIVE_ENTITIES * 2 + 100) as u32,
            memory_reservation_bytes: 64 << 20,
            memory_bytes_max: 32 << 20,
            ..RuntimeConfig::default()
        })
        .unwrap(),
    );
    let bytes = std::fs::read(tessera_tests::COUNTER).unwrap();
    let plugin = runtime.load(&bytes).unwrap();
    let raw_plugin = plugin.clone();
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(&dir.path().join("bench.redb")).unwrap();

    let types = Arc::new(TypeTable::default());
    types.bind(
        TypeKey::new("bench", "counter"),
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
    let state: Arc<LocalState> = Arc::new(LocalState::new(store, GroupCommitConfig::default()));
    let (raw_runtime, raw_store) = (runtime.clone(), state.clone() as Arc<dyn EntityState>);
    let entities = Entities::standalone(EntityParts {
        runtime,
        state,
        types,
        remember: None,
        config: EntityConfig::default(),
    });
    let before = resident_bytes();
    rt.block_on(async {
        let get = json_to_msgpack(&serde_json::json!("Get"));
        let mut replies = Vec::with_capacity(LIVE_ENTITIES);
        for index in 0..LIVE_ENTITIES {
            let (envelope, reply) = Envelope::ask(get.clone());
            let address = EntityAddress::new("bench", "counter", format!("c{index}"));
            if let Err(refused) = entities.deliver(address, 0, envelope) {
                panic!("delivery refused: {}", refused.0);
            }
            replies.push(reply);
        }
        for reply in replies {
            reply.await.unwrap().unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    });
    assert_eq!(entities.live_count(), LIVE_ENTITIES);
    let per_entity = (resident_bytes().saturating_sub(before)) / LIVE_ENTITIES as u64;
    // The baseline second, with the entities still live, so neither run reuses pages the
    // other made resident.
    let before_raw = resident_bytes();
    let raw_instances: Vec<RawInstance> = rt.block_on(async {
        let mut instances = Vec::with_capacity(LIVE_ENTITIES);
        for _ in 0..LIVE_ENTITIES {
            let mut instance =
                RawInstance::instantiate(&raw_runtime, &raw_plugin, raw_store.clone())
                    .await
                    .unwrap();
            instance
                .handle(&json_to_msgpack(&serde_json::json!("Get")))
                .await
                .unwrap();
            instances.push(instance);
        }
        instances
    });
    let raw_per_instance = (resident_bytes().saturating_sub(before_raw)) / LIVE_ENTITIES as u64;
    assert_eq!(raw_instances.len(), LIVE_ENTITIES);
    println!("memory/idle_live_counter: {LIVE_ENTITIES} live entities");
    println!(
        "  entity (cell + instance): {:.1} KiB per entity",
        per_entity as f64 / 1024.0
    );
    println!(
        "  baseline raw instance:    {:.1} KiB per instance",
        raw_per_instance as f64 / 1024.0
    );
    println!(
        "  ratio entity / raw: {:.2}x; target <= 64 KiB per entity: {}",
        per_entity as f64 / raw_per_instance.max(1) as f64,
        if per_entity <= 64 * 1024 {
            "met"
        } else {
            "NOT met"
        }
    );
}
