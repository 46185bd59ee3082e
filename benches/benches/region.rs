//! Local messaging through the sharding region, beside raw typed calls of the same component
//! in the same run:
//!
//! - tell throughput to 1,000 `counter` entities with read-only `"Get"` messages vs raw typed
//!   `handle` calls of 1,000 instances of the same component (target >= 50% of raw and
//!   >= 300,000 messages/s on 2 cores);
//! - ask round trip p50 and p99 through the region.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_host::api::codec::json_to_msgpack;
use tessera_host::envelope::{EntityAddress, ErrorKind};
use tessera_host::metadata::{Quotas, TypeOptions};
use tessera_host::node::Node;
use tessera_host::runtime::baseline::RawInstance;
use tessera_host::state::StateStore;

const ENTITIES: usize = 1_000;
const TELLS_PER_ENTITY: usize = 20;
const ASK_SAMPLES: usize = 20_000;

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
        node.create_tenant("bench", Some(quotas)).expect("tenant");
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

fn bench_region(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let node = open_node(&rt, dir.path());
    let region = node.region().clone();
    let get = json_to_msgpack(&serde_json::json!("Get"));
    // Activate every entity first: the benchmark measures messaging, not activation.
    rt.block_on(async {
        for index in 0..ENTITIES {
            region.ask(address(index), get.clone(), None).await.unwrap();
        }
    });

    let messages = (ENTITIES * TELLS_PER_ENTITY) as u64;
    let mut group = c.benchmark_group("local_messaging");
    group.throughput(Throughput::Elements(messages));
    group.sample_size(10);
    let (mut region_ns, mut raw_ns) = (0.0, 0.0);
    group.bench_function("region_tell_get_1000_counters", |b| {
        b.iter_custom(|iterations| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    for _ in 0..TELLS_PER_ENTITY {
                        for index in 0..ENTITIES {
                            // Pipelined: hand the message to the region without waiting for
                            // its routing; a full region inbox is backpressure, so yield and
                            // retry.
                            while let Err(error) = region.try_tell(address(index), get.clone()) {
                                assert_eq!(error.kind, ErrorKind::Unavailable, "{error}");
                                tokio::task::yield_now().await;
                            }
                        }
                    }
                    // A final ask per entity returns after every earlier tell (same sender,
                    // same entity: order is kept), so all messages were handled.
                    for index in 0..ENTITIES {
                        region.ask(address(index), get.clone(), None).await.unwrap();
                    }
                }
                let elapsed = started.elapsed();
                region_ns = elapsed.as_secs_f64() * 1e9 / (iterations * messages) as f64;
                elapsed
            })
        })
    });
    let store = StateStore::open(&dir.path().join("raw.redb")).unwrap();
    let runtime = tessera_tests::shared_runtime();
    let plugin = tessera_tests::plugin(tessera_tests::COUNTER);
    let mut raw: Vec<RawInstance> = rt.block_on(async {
        let mut instances = Vec::with_capacity(ENTITIES);
        for _ in 0..ENTITIES {
            instances.push(
                RawInstance::instantiate(&runtime, &plugin, store.clone())
                    .await
                    .unwrap(),
            );
        }
        instances
    });
    group.bench_function("raw_typed_handle_get_1000_instances", |b| {
        b.iter_custom(|iterations| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    for _ in 0..TELLS_PER_ENTITY {
                        for instance in raw.iter_mut() {
                            instance.handle(&get).await.unwrap();
                        }
                    }
                }
                let elapsed = started.elapsed();
                raw_ns = elapsed.as_secs_f64() * 1e9 / (iterations * messages) as f64;
                elapsed
            })
        })
    });
    group.finish();
    drop(raw);

    let mut latencies: Vec<Duration> = rt.block_on(async {
        let mut latencies = Vec::with_capacity(ASK_SAMPLES);
        for sample in 0..ASK_SAMPLES {
            let started = Instant::now();
            region
                .ask(address(sample % ENTITIES), get.clone(), None)
                .await
                .unwrap();
            latencies.push(started.elapsed());
        }
        latencies
    });
    latencies.sort();
    let percentile =
        |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
    println!("\nlocal messaging (same run):");
    println!(
        "  region tell: {:.0} msg/s; raw typed handle: {:.0} msg/s; region = {:.0}% of raw (target >= 50% and >= 300,000 msg/s)",
        1e9 / region_ns,
        1e9 / raw_ns,
        100.0 * raw_ns / region_ns
    );
    println!(
        "  region ask round trip over {ASK_SAMPLES} asks: p50 {:?}, p99 {:?}",
        percentile(0.50),
        percentile(0.99)
    );
    rt.block_on(node.shutdown());
}

criterion_group!(region_benches, bench_region);
criterion_main!(region_benches);
