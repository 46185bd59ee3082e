//! Local messaging through the node, beside raw typed calls of the same component on the same
//! number of threads, in the same run:
//!
//! - tells to 1,000 `counter` entities (read-only `"Get"`) through `Node::tell` — tenant rate
//!   quota, the region's shard-home table, the entity's mailbox — from one sender task per
//!   worker thread, vs raw typed `handle` calls of 1,000 instances of the same component split
//!   over the same worker threads (target: >= 70% of raw, and the absolute rate);
//! - ask round trip p50 and p99 through the node.
//!
//! Both sides run on one two-thread Tokio runtime; the ratio is printed at the end.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_host::contract::EntityAddress;
use tessera_host::metadata::{Quotas, TypeOptions};
use tessera_host::node::Node;
use tessera_host::runtime::baseline::RawInstance;
use tessera_host::state::{GroupCommitConfig, LocalState, StateStore};
use tessera_tests::to_msgpack;

const ENTITIES: usize = 1_000;
const TELLS_PER_ENTITY: usize = 20;
const ASK_SAMPLES: usize = 20_000;
/// Worker threads of the runtime both sides run on, and sender tasks / raw instance groups.
const THREADS: usize = 2;

fn open_node(rt: &tokio::runtime::Runtime, dir: &std::path::Path) -> Arc<Node> {
    rt.block_on(async {
        let config = tessera_tests::node_config(
            dir,
            "bench-admin-token-0123456789",
            (ENTITIES + 100) as u32,
        );
        let node = Node::open(config).await.expect("node opens");
        let quotas = Quotas {
            messages_per_second: 100_000_000,
            messages_burst: 100_000_000,
            ..Quotas::default()
        };
        node.create_tenant("bench", Some(quotas))
            .await
            .expect("tenant");
        let bytes = std::fs::read(tessera_tests::COUNTER).expect("plugin built");
        node.deploy("bench", "counter", bytes, TypeOptions::default())
            .await
            .expect("deploy");
        node
    })
}

fn address(index: usize) -> EntityAddress {
    EntityAddress::new("bench", "counter", format!("c{index}"))
}

/// Tells `"Get"` `TELLS_PER_ENTITY` times to each entity of `range`, then asks each once
/// (`tessera_tests::tell_round`).
async fn send_round(node: Arc<Node>, range: std::ops::Range<usize>, get: Vec<u8>) {
    let addresses: Vec<EntityAddress> = range.map(address).collect();
    tessera_tests::tell_round(&node, &addresses, &get, TELLS_PER_ENTITY).await;
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
            node.ask(address(index), get.clone(), Duration::from_secs(10))
                .await
                .unwrap();
        }
    });
    let per_sender = ENTITIES / THREADS;
    let messages = (ENTITIES * (TELLS_PER_ENTITY + 1)) as u64;
    let mut group = c.benchmark_group("local_messaging");
    group.throughput(Throughput::Elements(messages));
    group.sample_size(10);
    let (mut node_ns, mut raw_ns) = (0.0, 0.0);
    group.bench_function("node_tell_get_1000_counters_2_threads", |b| {
        b.iter_custom(|iterations| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    let senders: Vec<_> = (0..THREADS)
                        .map(|sender| {
                            let range = sender * per_sender..(sender + 1) * per_sender;
                            tokio::spawn(send_round(node.clone(), range, get.clone()))
                        })
                        .collect();
                    for sender in senders {
                        sender.await.unwrap();
                    }
                }
                let elapsed = started.elapsed();
                node_ns = elapsed.as_secs_f64() * 1e9 / (iterations * messages) as f64;
                elapsed
            })
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
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    let tasks: Vec<_> = std::mem::take(&mut groups)
                        .into_iter()
                        .map(|mut instances| {
                            let get = get.clone();
                            tokio::spawn(async move {
                                for _ in 0..=TELLS_PER_ENTITY {
                                    for instance in instances.iter_mut() {
                                        instance.handle(&get).await.unwrap();
                                    }
                                }
                                instances
                            })
                        })
                        .collect();
                    for task in tasks {
                        groups.push(task.await.unwrap());
                    }
                }
                let elapsed = started.elapsed();
                raw_ns = elapsed.as_secs_f64() * 1e9 / (iterations * messages) as f64;
                elapsed
            })
        })
    });
    group.finish();
    drop(groups);

    let mut latencies: Vec<Duration> = rt.block_on(async {
        let mut latencies = Vec::with_capacity(ASK_SAMPLES);
        for sample in 0..ASK_SAMPLES {
            let started = Instant::now();
            node.ask(
                address(sample % ENTITIES),
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
        "  node tell: {:.0} msg/s; raw typed handle: {:.0} msg/s; node = {:.0}% of raw (target >= 70%)",
        1e9 / node_ns,
        1e9 / raw_ns,
        100.0 * raw_ns / node_ns
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
