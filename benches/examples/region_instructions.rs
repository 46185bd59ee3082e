//! The region benchmark's work (tells of `"Get"` to counters through `Node::tell`, closed by
//! one ask each; beside raw typed `handle` calls of the same component), sized to run under
//! `valgrind --tool=callgrind`, which counts the instructions each side executes per message.
//! Unlike wall-clock time on a shared VM (whose speed drifts 3-8x between runs), the count is
//! the same from run to run, so a change to the hot path can be judged by a few hundred
//! instructions. `benches/instructions.sh` runs it and prints the counts and their ratio.
//!
//! Usage: `region_instructions node|ref|raw ROUNDS` (`ref`: the same tells through one
//! `EntityRef` per entity). One worker thread, 100 entities, 16 MiB linear
//! memories (valgrind cannot reserve the 4 GiB per memory a node reserves by default). The
//! per-message count is the difference between a run of `ROUNDS` rounds and a run of none
//! (start-up), divided by the messages of `ROUNDS` rounds.

use std::sync::Arc;
use std::time::Duration;
use tessera_host::contract::EntityAddress;
use tessera_host::node::Node;
use tessera_host::runtime::baseline::RawInstance;
use tessera_host::runtime::{Runtime, RuntimeConfig};
use tessera_host::state::{GroupCommitConfig, LocalState, StateStore};

/// The allocator the `tessera` binary runs with (`host/src/main.rs`), for both sides.
#[global_allocator]
static ALLOCATOR: tessera_host::allocator::Mimalloc = tessera_host::allocator::Mimalloc;

const ENTITIES: usize = 100;
const TELLS_PER_ENTITY: usize = 20;

/// Small linear memories, so valgrind can reserve the instance pool.
fn runtime_config() -> RuntimeConfig {
    RuntimeConfig {
        instances_max: 300,
        memory_bytes_max: 16 << 20,
        memory_reservation_bytes: 16 << 20,
        compiled_cache_dir: Some(tessera_tests::compiled_cache_dir()),
        ..RuntimeConfig::default()
    }
}

fn address(index: usize) -> EntityAddress {
    EntityAddress::new("bench", "counter", format!("c{index}"))
}

async fn open_node(dir: &std::path::Path) -> Arc<Node> {
    let mut config = tessera_tests::node_config(dir, "bench-admin-token-0123456789", 300);
    config.runtime = runtime_config();
    tessera_tests::counter_bench_node(config).await
}

async fn node_rounds(dir: &std::path::Path, rounds: usize, get: &[u8]) {
    let node = open_node(dir).await;
    let addresses: Vec<EntityAddress> = (0..ENTITIES).map(address).collect();
    for to in &addresses {
        node.ask(to.clone(), get.to_vec(), Duration::from_secs(10))
            .await
            .expect("activation");
    }
    for _ in 0..rounds {
        tessera_tests::tell_round(&node, &addresses, get, TELLS_PER_ENTITY).await;
    }
    node.shutdown().await;
}

/// The node's rounds through one reusable handle per entity.
async fn ref_rounds(dir: &std::path::Path, rounds: usize, get: &[u8]) {
    let node = open_node(dir).await;
    let mut refs: Vec<_> = (0..ENTITIES)
        .map(|index| node.entity_ref(address(index)).expect("entity ref"))
        .collect();
    for target in refs.iter_mut() {
        target
            .ask(get.to_vec(), Duration::from_secs(10))
            .await
            .expect("activation");
    }
    for _ in 0..rounds {
        tessera_tests::tell_round_refs(&mut refs, get, TELLS_PER_ENTITY).await;
    }
    node.shutdown().await;
}

async fn raw_rounds(dir: &std::path::Path, rounds: usize, get: &[u8]) {
    let runtime = Runtime::new(runtime_config()).expect("engine");
    let bytes = std::fs::read(tessera_tests::COUNTER).expect("plugin built");
    let plugin = runtime.load(&bytes).expect("plugin loads");
    let store = StateStore::open(&dir.join("raw.redb")).expect("store");
    let state = Arc::new(LocalState::new(store, GroupCommitConfig::default()));
    let mut instances = Vec::with_capacity(ENTITIES);
    for _ in 0..ENTITIES {
        let instance = RawInstance::instantiate(&runtime, &plugin, state.clone()).await;
        instances.push(instance.expect("instantiates"));
    }
    for _ in 0..rounds {
        for _ in 0..=TELLS_PER_ENTITY {
            for instance in instances.iter_mut() {
                instance.handle(get).await.expect("handled");
            }
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (side, rounds) = match (args.next(), args.next().map(|r| r.parse::<usize>())) {
        (Some(side), Some(Ok(rounds))) if ["node", "ref", "raw"].contains(&side.as_str()) => {
            (side, rounds)
        }
        _ => {
            eprintln!("usage: region_instructions node|ref|raw ROUNDS");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let get = tessera_tests::to_msgpack(&serde_json::json!("Get"));
    rt.block_on(async {
        match side.as_str() {
            "node" => node_rounds(dir.path(), rounds, &get).await,
            "ref" => ref_rounds(dir.path(), rounds, &get).await,
            _ => raw_rounds(dir.path(), rounds, &get).await,
        }
    });
    println!("messages {}", rounds * ENTITIES * (TELLS_PER_ENTITY + 1));
}
