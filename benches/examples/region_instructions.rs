//! The region benchmark's work (tells of `"Get"` to counters through `Node::tell`, closed by
//! one ask each; beside raw typed `handle` calls of the same component), sized to run under
//! `valgrind --tool=callgrind`, which counts the instructions each side executes per message.
//! Unlike wall-clock time on a shared VM (whose speed drifts 3-8x between runs), the count is
//! the same from run to run, so a change to the hot path can be judged by a few hundred
//! instructions. `benches/instructions.sh` runs it and prints the counts and their ratio.
//!
//! Usage: `region_instructions node|ref|lookup|raw ROUNDS [SENDERS]` (`ref`: the same tells
//! through one `EntityRef` per entity; `lookup`: by address through a sender-local map of those
//! handles, the floor of any send by address). 100 entities (`ENTITIES=N` for another count,
//! with room for them in the instance pool and the live-entity quota;
//! `SENDER_ROUTES_PER_THREAD=N` for the node's bound of routes kept per sender thread, 0 for
//! none), 16 MiB linear
//! memories (valgrind cannot reserve the 4 GiB per memory a node reserves by default), one
//! sender (the default) or `SENDERS` sender tasks on as many worker threads, each with its
//! share of the entities — for a profiler's view of the benchmark's two senders
//! (`perf record -e cpu-clock` works where hardware counters do not). The per-message count is
//! the difference between a run of `ROUNDS` rounds and a run of none (start-up), divided by the
//! messages of `ROUNDS` rounds.

use std::sync::Arc;
use std::time::Duration;
use tessera_benches::baseline::RawInstance;
use tessera_contract::EntityAddress;
use tessera_host::node::{EntityRef, Node};
use tessera_runtime::{Runtime, RuntimeConfig};
use tessera_state::{GroupCommitConfig, LocalState, StateStore};

/// The allocator the `tessera` binary runs with (`crates/host/src/main.rs`), for both sides.
#[global_allocator]
static ALLOCATOR: tessera_host::allocator::Mimalloc = tessera_host::allocator::Mimalloc;

/// The entities the work is spread over: `ENTITIES` from the environment, 100 by default (one
/// entity shows the path's cost with every entity's data hot in the cache).
fn entities() -> usize {
    std::env::var("ENTITIES")
        .ok()
        .and_then(|entities| entities.parse().ok())
        .filter(|&entities| entities > 0)
        .unwrap_or(100)
}
const TELLS_PER_ENTITY: usize = 20;

/// Instances and live entities the node and the raw side may hold: room for every entity.
fn capacity() -> usize {
    entities().max(200) + 100
}

/// Small linear memories, so valgrind can reserve the instance pool.
fn runtime_config() -> RuntimeConfig {
    RuntimeConfig {
        instances_max: capacity() as u32,
        memory_bytes_max: 16 << 20,
        memory_reservation_bytes: 16 << 20,
        compiled_cache_dir: Some(tessera_tests::compiled_cache_dir()),
        ..RuntimeConfig::default()
    }
}

/// A sender's handles by address, hashed as the node's own tables are (foldhash).
type HandlesByAddress =
    std::collections::HashMap<EntityAddress, EntityRef, foldhash::fast::RandomState>;

fn address(index: usize) -> EntityAddress {
    EntityAddress::new("bench", "counter", format!("c{index}"))
}

async fn open_node(dir: &std::path::Path) -> Arc<Node> {
    let mut config =
        tessera_tests::node_config(dir, "bench-admin-token-0123456789", capacity() as u32);
    config.runtime = runtime_config();
    // `SENDER_ROUTES_PER_THREAD=0` measures the node's tells by address without the routes it
    // keeps for its senders.
    if let Some(routes) = std::env::var("SENDER_ROUTES_PER_THREAD")
        .ok()
        .and_then(|routes| routes.parse().ok())
    {
        config.sender_routes_per_thread = routes;
    }
    tessera_tests::counter_bench_node(config).await
}

/// `items` split into `senders` shares, in order.
fn shares<T>(items: Vec<T>, senders: usize) -> Vec<Vec<T>> {
    let per_sender = items.len().div_ceil(senders);
    let mut shares: Vec<Vec<T>> = (0..senders).map(|_| Vec::new()).collect();
    for (index, item) in items.into_iter().enumerate() {
        shares[index / per_sender].push(item);
    }
    shares
}

/// Runs `work` on each share of `items`: on this task for one sender, else on a task each.
async fn on_senders<T, F, Fut>(items: Vec<T>, senders: usize, work: F)
where
    T: Send + 'static,
    F: Fn(Vec<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    if senders == 1 {
        work(items).await;
        return;
    }
    let tasks: Vec<_> = shares(items, senders)
        .into_iter()
        .map(|share| tokio::spawn(work(share)))
        .collect();
    for task in tasks {
        task.await.expect("sender task");
    }
}

/// A node with every entity activated by one ask by address, and the entities' addresses.
async fn activated_node(dir: &std::path::Path, get: &[u8]) -> (Arc<Node>, Vec<EntityAddress>) {
    let node = open_node(dir).await;
    let addresses: Vec<EntityAddress> = (0..entities()).map(address).collect();
    for to in &addresses {
        node.ask(to, get.to_vec(), Duration::from_secs(10))
            .await
            .expect("activation");
    }
    (node, addresses)
}

async fn node_rounds(dir: &std::path::Path, rounds: usize, senders: usize, get: &[u8]) {
    let (node, addresses) = activated_node(dir, get).await;
    on_senders(addresses, senders, |share| {
        let (node, get) = (node.clone(), get.to_vec());
        async move {
            for _ in 0..rounds {
                tessera_tests::tell_round(&node, &share, &get, TELLS_PER_ENTITY).await;
            }
        }
    })
    .await;
    node.shutdown().await;
}

/// The node's rounds by address through a sender-local map of handles
/// (`tessera_tests::tell_round_looked_up`): the floor of any send by address.
async fn lookup_rounds(dir: &std::path::Path, rounds: usize, senders: usize, get: &[u8]) {
    let (node, addresses) = activated_node(dir, get).await;
    on_senders(addresses, senders, |share| {
        let get = get.to_vec();
        let mut handles: HandlesByAddress = share
            .iter()
            .map(|to| (to.clone(), node.entity_ref(to.clone()).expect("entity ref")))
            .collect();
        async move {
            for _ in 0..rounds {
                tessera_tests::tell_round_looked_up(&mut handles, &share, &get, TELLS_PER_ENTITY)
                    .await;
            }
        }
    })
    .await;
    node.shutdown().await;
}

/// The node's rounds through one reusable handle per entity.
async fn ref_rounds(dir: &std::path::Path, rounds: usize, senders: usize, get: &[u8]) {
    let node = open_node(dir).await;
    let mut refs: Vec<_> = (0..entities())
        .map(|index| node.entity_ref(address(index)).expect("entity ref"))
        .collect();
    for target in refs.iter_mut() {
        target
            .ask(get.to_vec(), Duration::from_secs(10))
            .await
            .expect("activation");
    }
    on_senders(refs, senders, |mut share| {
        let get = get.to_vec();
        async move {
            for _ in 0..rounds {
                tessera_tests::tell_round_refs(&mut share, &get, TELLS_PER_ENTITY).await;
            }
        }
    })
    .await;
    node.shutdown().await;
}

async fn raw_rounds(dir: &std::path::Path, rounds: usize, senders: usize, get: &[u8]) {
    let runtime = Runtime::new(runtime_config()).expect("engine");
    let bytes = std::fs::read(tessera_tests::COUNTER).expect("plugin built");
    let plugin = runtime.load(&bytes).expect("plugin loads");
    let store = StateStore::open(&dir.join("raw.redb")).expect("store");
    let state = Arc::new(LocalState::new(store, GroupCommitConfig::default()));
    let mut instances = Vec::with_capacity(entities());
    for _ in 0..entities() {
        let instance = RawInstance::instantiate(&runtime, &plugin, state.clone()).await;
        instances.push(instance.expect("instantiates"));
    }
    on_senders(instances, senders, |mut share| {
        let get = get.to_vec();
        async move {
            for _ in 0..rounds {
                for _ in 0..=TELLS_PER_ENTITY {
                    for instance in share.iter_mut() {
                        instance.handle(&get).await.expect("handled");
                    }
                }
            }
        }
    })
    .await;
}

fn main() {
    let mut args = std::env::args().skip(1);
    let side = args.next().unwrap_or_default();
    let rounds = args.next().map(|rounds| rounds.parse::<usize>());
    let senders = args
        .next()
        .map_or(Ok(1), |senders| senders.parse::<usize>());
    let (rounds, senders) = match (rounds, senders) {
        (Some(Ok(rounds)), Ok(senders))
            if ["node", "ref", "lookup", "raw"].contains(&side.as_str())
                && (1..=entities()).contains(&senders) =>
        {
            (rounds, senders)
        }
        _ => {
            eprintln!("usage: region_instructions node|ref|lookup|raw ROUNDS [SENDERS]");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(senders)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let get = tessera_tests::to_msgpack(&serde_json::json!("Get"));
    rt.block_on(async {
        match side.as_str() {
            "node" => node_rounds(dir.path(), rounds, senders, &get).await,
            "ref" => ref_rounds(dir.path(), rounds, senders, &get).await,
            "lookup" => lookup_rounds(dir.path(), rounds, senders, &get).await,
            _ => raw_rounds(dir.path(), rounds, senders, &get).await,
        }
    });
    println!("messages {}", rounds * entities() * (TELLS_PER_ENTITY + 1));
}
