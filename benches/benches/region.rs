//! Local messaging through the node, beside raw typed calls of the same component on the same
//! number of threads, in the same run:
//!
//! - tells to 1,000 `counter` entities (read-only `"Get"`) through `Node::tell` — tenant rate
//!   quota, the region's shard-home table, the entity's mailbox — from one sender task per
//!   worker thread, and the same tells through one reusable `EntityRef` per entity (resolved
//!   once: no lookups by address), vs raw typed `handle` calls of 1,000 instances of the same
//!   component split over the same worker threads (target: >= 70% of raw, and the absolute
//!   rate);
//! - beside them, the same tells by address through a sender-local map from each address to
//!   its handle (`tessera_tests::tell_round_looked_up`): finding the entity by its address and
//!   sending as a handle does, nothing else — the floor of any send by address, which tells
//!   how much of the by-address path's cost is its lookup;
//! - ask round trip p50 and p99 through the node.
//!
//! Both sides run on one two-thread Tokio runtime. The ratio printed at the end is the median
//! over rounds taken in turns (each side's round, then the next side's, in an order that changes
//! from one round to the next), so that neither the machine's speed drifting during the run
//! nor the caches left by the round before land on one side only.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_benches::baseline::RawInstance;
use tessera_contract::EntityAddress;
use tessera_host::node::{EntityRef, Node};
use tessera_state::{GroupCommitConfig, LocalState, StateStore};
use tessera_tests::to_msgpack;

/// The allocator the `tessera` binary runs with (`crates/host/src/main.rs`), for both sides.
#[global_allocator]
static ALLOCATOR: tessera_host::allocator::Mimalloc = tessera_host::allocator::Mimalloc;

const ENTITIES: usize = 1_000;
const TELLS_PER_ENTITY: usize = 20;
const ASK_SAMPLES: usize = 20_000;
/// The sides of the closing run: by address, through handles, handles looked up by address,
/// raw.
const SIDES: usize = 4;
/// The orders the sides take their turns in, round after round: a balanced Latin square, so
/// that in every `SIDES` rounds each side goes first once and follows each other side once.
const TURNS: [[usize; SIDES]; SIDES] = [[0, 1, 3, 2], [1, 2, 0, 3], [2, 3, 1, 0], [3, 0, 2, 1]];
/// Rounds of the closing run, each a round of every side: a multiple of `SIDES`, so that every
/// order of `TURNS` is taken equally often.
const PAIRED_ROUNDS: usize = 6 * SIDES;
/// Worker threads of the runtime both sides run on, and sender tasks / raw instance groups.
const THREADS: usize = 2;

fn open_node(rt: &tokio::runtime::Runtime, dir: &std::path::Path) -> Arc<Node> {
    let config =
        tessera_tests::node_config(dir, "bench-admin-token-0123456789", (ENTITIES + 100) as u32);
    rt.block_on(tessera_tests::counter_bench_node(config))
}

/// A sender's handles by address, hashed as the node's own tables are (foldhash).
type HandlesByAddress = HashMap<EntityAddress, EntityRef, foldhash::fast::RandomState>;

fn address(index: usize) -> EntityAddress {
    EntityAddress::new("bench", "counter", format!("c{index}"))
}

/// Tells `"Get"` `TELLS_PER_ENTITY` times to each entity of `range`, then asks each once
/// (`tessera_tests::tell_round`).
async fn send_round(node: Arc<Node>, range: std::ops::Range<usize>, get: Vec<u8>) {
    let addresses: Vec<EntityAddress> = range.map(address).collect();
    tessera_tests::tell_round(&node, &addresses, &get, TELLS_PER_ENTITY).await;
}

/// One round through the node: each sender task tells its half of the counters.
fn node_round(rt: &tokio::runtime::Runtime, node: &Arc<Node>, get: &[u8]) {
    let per_sender = ENTITIES / THREADS;
    rt.block_on(async {
        let senders: Vec<_> = (0..THREADS)
            .map(|sender| {
                let range = sender * per_sender..(sender + 1) * per_sender;
                tokio::spawn(send_round(node.clone(), range, get.to_vec()))
            })
            .collect();
        for sender in senders {
            sender.await.unwrap();
        }
    })
}

/// Runs `work` on each group on a task of its own, all at once, and puts the groups back (in
/// the order their tasks end).
fn on_each_group<G, Work>(
    rt: &tokio::runtime::Runtime,
    groups: &mut Vec<G>,
    work: impl Fn(G) -> Work,
) where
    G: Send + 'static,
    Work: std::future::Future<Output = G> + Send + 'static,
{
    rt.block_on(async {
        let tasks: Vec<_> = std::mem::take(groups)
            .into_iter()
            .map(|group| tokio::spawn(work(group)))
            .collect();
        for task in tasks {
            groups.push(task.await.unwrap());
        }
    })
}

/// The same round through reusable handles: each sender task tells its own half of the
/// counters, each through its handle.
fn ref_round(rt: &tokio::runtime::Runtime, groups: &mut Vec<Vec<EntityRef>>, get: &[u8]) {
    on_each_group(rt, groups, |mut refs| {
        let get = get.to_vec();
        async move {
            tessera_tests::tell_round_refs(&mut refs, &get, TELLS_PER_ENTITY).await;
            refs
        }
    })
}

/// The same round by address through each sender's map of handles: each sender task tells
/// its own half of the counters, looking each handle up by its borrowed address.
fn lookup_round(
    rt: &tokio::runtime::Runtime,
    groups: &mut Vec<(Vec<EntityAddress>, HandlesByAddress)>,
    get: &[u8],
) {
    on_each_group(rt, groups, |(targets, mut handles)| {
        let get = get.to_vec();
        async move {
            tessera_tests::tell_round_looked_up(&mut handles, &targets, &get, TELLS_PER_ENTITY)
                .await;
            (targets, handles)
        }
    })
}

/// The same round of raw typed calls: one task per group of instances, each called
/// `TELLS_PER_ENTITY + 1` times.
fn raw_round(rt: &tokio::runtime::Runtime, groups: &mut Vec<Vec<RawInstance>>, get: &[u8]) {
    on_each_group(rt, groups, |mut instances| {
        let get = get.to_vec();
        async move {
            for _ in 0..=TELLS_PER_ENTITY {
                for instance in instances.iter_mut() {
                    instance.handle(&get).await.unwrap();
                }
            }
            instances
        }
    })
}

fn timed(run: impl FnOnce()) -> Duration {
    let started = Instant::now();
    run();
    started.elapsed()
}

fn bench_local_messaging(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(THREADS)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let node = open_node(&rt, dir.path());
    let get = to_msgpack(&serde_json::json!("Get"));
    // Activate every entity first: the benchmark measures messaging, not activation.
    rt.block_on(async {
        for index in 0..ENTITIES {
            node.ask(&address(index), get.clone(), Duration::from_secs(10))
                .await
                .unwrap();
        }
    });
    let per_sender = ENTITIES / THREADS;
    let messages = (ENTITIES * (TELLS_PER_ENTITY + 1)) as u64;
    let mut group = c.benchmark_group("local_messaging");
    group.throughput(Throughput::Elements(messages));
    group.sample_size(10);
    group.bench_function("node_tell_get_1000_counters_2_threads", |b| {
        b.iter_custom(|iterations| {
            let started = Instant::now();
            for _ in 0..iterations {
                node_round(&rt, &node, &get);
            }
            started.elapsed()
        })
    });
    let mut ref_groups: Vec<Vec<EntityRef>> = (0..THREADS)
        .map(|sender| {
            (sender * per_sender..(sender + 1) * per_sender)
                .map(|index| node.entity_ref(address(index)).unwrap())
                .collect()
        })
        .collect();
    group.bench_function("node_entity_ref_tell_get_1000_counters_2_threads", |b| {
        b.iter_custom(|iterations| {
            let started = Instant::now();
            for _ in 0..iterations {
                ref_round(&rt, &mut ref_groups, &get);
            }
            started.elapsed()
        })
    });
    let mut lookup_groups: Vec<(Vec<EntityAddress>, HandlesByAddress)> = (0..THREADS)
        .map(|sender| {
            let targets: Vec<EntityAddress> = (sender * per_sender..(sender + 1) * per_sender)
                .map(address)
                .collect();
            let handles = targets
                .iter()
                .map(|to| (to.clone(), node.entity_ref(to.clone()).unwrap()))
                .collect();
            (targets, handles)
        })
        .collect();
    group.bench_function("node_looked_up_ref_tell_get_1000_counters_2_threads", |b| {
        b.iter_custom(|iterations| {
            let started = Instant::now();
            for _ in 0..iterations {
                lookup_round(&rt, &mut lookup_groups, &get);
            }
            started.elapsed()
        })
    });
    let store = StateStore::open(&dir.path().join("raw.redb")).unwrap();
    let state = Arc::new(LocalState::new(store, GroupCommitConfig::default()));
    let runtime = tessera_tests::shared_runtime();
    let plugin = tessera_tests::plugin(tessera_tests::COUNTER);
    let mut groups: Vec<Vec<RawInstance>> = rt.block_on(async {
        let mut groups = Vec::with_capacity(THREADS);
        for _ in 0..THREADS {
            let mut instances = Vec::with_capacity(per_sender);
            for _ in 0..per_sender {
                let raw = RawInstance::instantiate(&runtime, &plugin, state.clone());
                instances.push(raw.await.unwrap());
            }
            groups.push(instances);
        }
        groups
    });
    group.bench_function("raw_typed_handle_get_1000_instances_2_threads", |b| {
        b.iter_custom(|iterations| {
            let started = Instant::now();
            for _ in 0..iterations {
                raw_round(&rt, &mut groups, &get);
            }
            started.elapsed()
        })
    });
    group.finish();

    // The ratios from rounds taken in turns (by address, handles, handles looked up, raw), so
    // that a change in the machine's speed during the run (other tenants of a shared host)
    // falls on every side alike. The order changes from round to round (`TURNS`): a side finds
    // the caches full of the data of the side before it, and a fixed order would charge that
    // to one side only.
    let rounds: Vec<[Duration; SIDES]> = (0..PAIRED_ROUNDS)
        .map(|round| {
            let mut took = [Duration::ZERO; SIDES];
            for side in TURNS[round % SIDES] {
                took[side] = match side {
                    0 => timed(|| node_round(&rt, &node, &get)),
                    1 => timed(|| ref_round(&rt, &mut ref_groups, &get)),
                    2 => timed(|| lookup_round(&rt, &mut lookup_groups, &get)),
                    _ => timed(|| raw_round(&rt, &mut groups, &get)),
                };
            }
            took
        })
        .collect();
    drop((groups, ref_groups, lookup_groups));
    // The round of the median ratio of side `side` (0: by address, 1: handles, 2: handles
    // looked up by address) to raw.
    let median = |side: usize| {
        let mut sorted = rounds.clone();
        let ratio = |round: &[Duration; SIDES]| round[3].as_secs_f64() / round[side].as_secs_f64();
        sorted.sort_by(|a, b| ratio(a).total_cmp(&ratio(b)));
        let round = sorted[sorted.len() / 2];
        (round[side], round[3])
    };
    let (node_took, raw_by_node) = median(0);
    let (ref_took, raw_by_ref) = median(1);
    let (lookup_took, raw_by_lookup) = median(2);
    let rate = |took: Duration| messages as f64 / took.as_secs_f64();

    let mut latencies: Vec<Duration> = rt.block_on(async {
        let mut latencies = Vec::with_capacity(ASK_SAMPLES);
        for sample in 0..ASK_SAMPLES {
            let started = Instant::now();
            node.ask(
                &address(sample % ENTITIES),
                get.clone(),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
            latencies.push(started.elapsed());
        }
        latencies
    });
    latencies.sort();
    let percentile =
        |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!("\nlocal messaging on {THREADS} threads (same run):");
    println!(
        "  median of {PAIRED_ROUNDS} paired rounds: node tell by address {:.0} msg/s; raw typed \
         handle {:.0} msg/s; node = {:.0}% of raw (target >= 70%)",
        rate(node_took),
        rate(raw_by_node),
        100.0 * raw_by_node.as_secs_f64() / node_took.as_secs_f64()
    );
    println!(
        "  median of {PAIRED_ROUNDS} paired rounds: node tell through EntityRef {:.0} msg/s; raw \
         typed handle {:.0} msg/s; node = {:.0}% of raw (target >= 70%)",
        rate(ref_took),
        rate(raw_by_ref),
        100.0 * raw_by_ref.as_secs_f64() / ref_took.as_secs_f64()
    );
    println!(
        "  median of {PAIRED_ROUNDS} paired rounds: by address through a map of EntityRefs (the \
         floor of a send by address) {:.0} msg/s; raw typed handle {:.0} msg/s; = {:.0}% of raw",
        rate(lookup_took),
        rate(raw_by_lookup),
        100.0 * raw_by_lookup.as_secs_f64() / lookup_took.as_secs_f64()
    );
    println!(
        "  node ask round trip over {ASK_SAMPLES} asks: p50 {:?}, p99 {:?}",
        percentile(0.50),
        percentile(0.99)
    );
    rt.block_on(node.shutdown());
}

criterion_group!(region_benches, bench_local_messaging);
criterion_main!(region_benches);
