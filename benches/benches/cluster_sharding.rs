//! Sharding across nodes, each measurement beside its baseline in the same run. Two cluster
//! nodes in this process (mutual TLS over loopback, one voter and one non-voting member), on
//! one two-worker Tokio runtime:
//!
//! - cross-node ask: `Node::ask` on n1 of a `counter` whose shard n2 owns (the envelope and its
//!   reply cross the cluster transport), p50 / p99, vs a raw TCP round trip of a message of the
//!   same size between two tasks of the same runtime over loopback;
//! - pipelined tells: `Node::tell` from n1 to 1,000 counters owned by n2, vs the same tells to
//!   1,000 counters owned by n1 itself (local), each round ending with one ask per entity;
//! - rebalance with state: with 1,000 counters (state written) spread over n1 and n2, a third
//!   node joins; the time from its `Node::open` returning (an up member) until the coordinator
//!   has moved its share of the 128 shards, with their state, and no handoff is in flight —
//!   while clients keep asking every counter; failed asks are counted (target 0).
//!
//! Run: `cargo bench -p tessera-benches --bench cluster_sharding -- --warm-up-time 1 --measurement-time 3`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tessera_contract::EntityAddress;
use tessera_host::node::{ClusterConfig, Node};
use tessera_metadata::{Quotas, TypeOptions};
use tessera_tests::processes::free_address;
use tessera_tests::to_msgpack;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ADMIN: &str = "bench-admin-token-0123456789";
const NODES: [&str; 3] = ["n1", "n2", "n3"];
const ENTITIES: usize = 1_000;
const TELLS_PER_ENTITY: usize = 10;
const ASK_SAMPLES: usize = 2_000;
const THREADS: usize = 2;
/// Rounds of each kind of tells behind the printed ratio.
const RATE_ROUNDS: usize = 9;

fn cluster_config(
    dir: &Path,
    id: &str,
    listen: SocketAddr,
    seed: Option<SocketAddr>,
) -> tessera_host::node::NodeConfig {
    let mut config = tessera_tests::node_config(&dir.join(id), ADMIN, 1_500);
    config.node_id = id.to_string();
    config.http = free_address();
    let mut cluster =
        ClusterConfig::new("bench", listen, dir.join("certs"), vec!["n1".to_string()]);
    if let Some(seed) = seed {
        cluster.seeds = BTreeMap::from([("n1".to_string(), seed.into())]);
    }
    config.cluster = Some(cluster);
    // The plane off: what this bench measures is shards moving with their owners' state
    // (the partition plane has its own benches, `partition_plane` and `partition_failover`).
    config.sharding.partitions.count = Some(0);
    config
}

struct Cluster {
    dir: tempfile::TempDir,
    nodes: Vec<Arc<Node>>,
    n1_cluster: SocketAddr,
}

async fn start_cluster() -> Cluster {
    let dir = tempfile::tempdir().expect("temporary directory");
    tessera_cluster::create_dev_cluster(&dir.path().join("certs"), &NODES).expect("certs");
    let n1_cluster = free_address();
    let n1 = Node::open(cluster_config(dir.path(), "n1", n1_cluster, None))
        .await
        .expect("n1 opens");
    let n2 = Node::open(cluster_config(
        dir.path(),
        "n2",
        free_address(),
        Some(n1_cluster),
    ))
    .await
    .expect("n2 opens");
    let quotas = Quotas {
        messages_per_second: 100_000_000,
        messages_burst: 100_000_000,
        ..Quotas::default()
    };
    n1.create_tenant("bench", Some(quotas))
        .await
        .expect("tenant");
    let bytes = std::fs::read(tessera_tests::COUNTER).expect("plugin built");
    n1.deploy("bench", "counter", bytes, TypeOptions::default())
        .await
        .expect("deploy");
    // n2 follows the catalog: wait until it has bound the type.
    let deadline = Instant::now() + Duration::from_secs(60);
    while n2
        .status("bench")
        .map(|types| types.iter().all(|t| t.bound_version.is_none()))
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "n2 binds the type");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Cluster {
        dir,
        nodes: vec![n1, n2],
        n1_cluster,
    }
}

fn address(index: usize) -> EntityAddress {
    EntityAddress::new("bench", "counter", format!("c{index}"))
}

/// Asks `{"Add":1}` of counters `0..ENTITIES` through `via` (to allocate and write state).
async fn touch_all(node: &Node) {
    let add = to_msgpack(&serde_json::json!({"Add": 1}));
    for index in 0..ENTITIES {
        node.ask(&address(index), add.clone(), Duration::from_secs(10))
            .await
            .expect("first add");
    }
}

/// Counters `0..` whose shard `owner` owns, `count` of them.
async fn owned_by(node: &Node, owner: &str, count: usize) -> Vec<EntityAddress> {
    let table = node.shards().await.expect("shard table");
    let extractor = tessera_sharding::FnvExtractor::new(128);
    use tessera_sharding::ShardExtractor;
    let owners: BTreeMap<u32, String> = table
        .into_iter()
        .filter(|(type_key, _, _, _)| type_key == "bench/counter")
        .map(|(_, shard, node, _)| (shard, node))
        .collect();
    (0..ENTITIES)
        .filter(|index| {
            owners
                .get(&extractor.shard_of(&format!("c{index}")))
                .map(String::as_str)
                == Some(owner)
        })
        .take(count)
        .map(address)
        .collect()
}

async fn tell_round(node: Arc<Node>, targets: Vec<EntityAddress>, get: Vec<u8>) {
    tessera_tests::tell_round(&node, &targets, &get, TELLS_PER_ENTITY).await;
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    sorted[((sorted.len() as f64 * fraction) as usize).min(sorted.len() - 1)]
}

/// A TCP echo pair on loopback: the client writes `size` bytes, the server echoes them.
async fn tcp_pair(size: usize) -> tokio::net::TcpStream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        socket.set_nodelay(true).expect("nodelay");
        let mut buffer = vec![0u8; size];
        while socket.read_exact(&mut buffer).await.is_ok() {
            if socket.write_all(&buffer).await.is_err() {
                break;
            }
        }
    });
    let client = tokio::net::TcpStream::connect(addr).await.expect("connect");
    client.set_nodelay(true).expect("nodelay");
    client
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(THREADS)
        .enable_all()
        .build()
        .expect("runtime");
    let cluster = rt.block_on(start_cluster());
    let n1 = cluster.nodes[0].clone();
    rt.block_on(touch_all(&n1));
    let remote = rt.block_on(owned_by(&n1, "n2", ENTITIES));
    let local = rt.block_on(owned_by(&n1, "n1", ENTITIES));
    let per_side = remote.len().min(local.len());
    let (remote, local) = (remote[..per_side].to_vec(), local[..per_side].to_vec());
    let get = to_msgpack(&serde_json::json!("Get"));

    // Cross-node ask vs a raw TCP round trip of the same bytes.
    let envelope_bytes = 64 + get.len();
    let mut asks = Vec::with_capacity(ASK_SAMPLES);
    let mut raw = Vec::with_capacity(ASK_SAMPLES);
    rt.block_on(async {
        let mut client = tcp_pair(envelope_bytes).await;
        let message = vec![7u8; envelope_bytes];
        let mut echo = vec![0u8; envelope_bytes];
        for sample in 0..ASK_SAMPLES {
            let to = &remote[sample % remote.len()];
            let started = Instant::now();
            n1.ask(to, get.clone(), Duration::from_secs(10))
                .await
                .expect("cross-node ask");
            asks.push(started.elapsed());
            let started = Instant::now();
            client.write_all(&message).await.expect("write");
            client.read_exact(&mut echo).await.expect("read");
            raw.push(started.elapsed());
        }
    });
    asks.sort();
    raw.sort();
    let mut group = c.benchmark_group("cluster_sharding");
    group.bench_function("cross_node_ask", |b| {
        b.iter(|| {
            let (n1, to, get) = (n1.clone(), remote[0].clone(), get.clone());
            rt.block_on(async move {
                n1.ask(&to, get, Duration::from_secs(10))
                    .await
                    .expect("ask")
            })
        })
    });
    group.bench_function("raw_tcp_round_trip", |b| {
        let client = rt.block_on(tcp_pair(envelope_bytes));
        let client = Arc::new(tokio::sync::Mutex::new(client));
        b.iter(|| {
            let client = client.clone();
            rt.block_on(async move {
                let mut client = client.lock().await;
                let message = vec![7u8; envelope_bytes];
                let mut echo = vec![0u8; envelope_bytes];
                client.write_all(&message).await.expect("write");
                client.read_exact(&mut echo).await.expect("read");
            })
        })
    });

    // Pipelined tells: to n2's counters from n1, vs to n1's own.
    let tells = (per_side * TELLS_PER_ENTITY) as u64;
    group.throughput(Throughput::Elements(tells));
    for (name, targets) in [("tells_cross_node", &remote), ("tells_local", &local)] {
        group.bench_function(name, |b| {
            b.iter(|| rt.block_on(tell_round(n1.clone(), targets.clone(), get.clone())))
        });
    }
    // The printed ratio: rounds of both kinds taken in turn, the median rate of each.
    let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for _ in 0..RATE_ROUNDS {
        for (name, targets) in [("tells_cross_node", &remote), ("tells_local", &local)] {
            let started = Instant::now();
            rt.block_on(tell_round(n1.clone(), targets.clone(), get.clone()));
            let rate = tells as f64 / started.elapsed().as_secs_f64();
            rates.entry(name).or_default().push(rate);
        }
    }
    let median = |name: &str| {
        let mut samples = rates[name].clone();
        samples.sort_by(f64::total_cmp);
        samples[samples.len() / 2]
    };
    group.finish();

    // Rebalance with state: a third node joins while clients ask every counter.
    let (failed, asked, took, moved) = rt.block_on(async {
        let stop = Arc::new(AtomicBool::new(false));
        let failed = Arc::new(AtomicU64::new(0));
        let asked = Arc::new(AtomicU64::new(0));
        let clients: Vec<_> = (0..THREADS)
            .map(|client| {
                let (node, stop, failed, asked) = (
                    cluster.nodes[client].clone(),
                    stop.clone(),
                    failed.clone(),
                    asked.clone(),
                );
                tokio::spawn(async move {
                    let add = to_msgpack(&serde_json::json!({"Add": 1}));
                    let mut index = client;
                    while !stop.load(Ordering::Relaxed) {
                        let reply = node
                            .ask(
                                &address(index % ENTITIES),
                                add.clone(),
                                Duration::from_secs(10),
                            )
                            .await;
                        asked.fetch_add(1, Ordering::Relaxed);
                        if let Err(error) = reply {
                            eprintln!("failed ask during the rebalance: {error}");
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        index += THREADS;
                    }
                })
            })
            .collect();
        let n3 = Node::open(cluster_config(
            cluster.dir.path(),
            "n3",
            free_address(),
            Some(cluster.n1_cluster),
        ))
        .await
        .expect("n3 opens");
        let started = Instant::now();
        let moved = loop {
            let table = n1.shards().await.expect("table");
            let on_n3 = table.iter().filter(|(_, _, node, _)| node == "n3").count();
            let settled = on_n3 >= 128 / 3 && n1.shards_moving().expect("catalog") == 0;
            if settled {
                break on_n3;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the rebalance settles"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let took = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        for client in clients {
            client.await.expect("client");
        }
        n3.shutdown().await;
        (
            failed.load(Ordering::Relaxed),
            asked.load(Ordering::Relaxed),
            took,
            moved,
        )
    });

    println!();
    println!("cross-node ask ({ASK_SAMPLES} sequential, n1 -> n2):");
    println!(
        "  tessera p50 {:?} p99 {:?} | raw TCP round trip p50 {:?} p99 {:?} | ratio p50 {:.1}x p99 {:.1}x",
        percentile(&asks, 0.50),
        percentile(&asks, 0.99),
        percentile(&raw, 0.50),
        percentile(&raw, 0.99),
        percentile(&asks, 0.50).as_secs_f64() / percentile(&raw, 0.50).as_secs_f64(),
        percentile(&asks, 0.99).as_secs_f64() / percentile(&raw, 0.99).as_secs_f64(),
    );
    let (cross, local_rate) = (median("tells_cross_node"), median("tells_local"));
    println!(
        "pipelined tells ({per_side} counters x {TELLS_PER_ENTITY}, median of {RATE_ROUNDS} rounds each, taken in turn): cross-node {cross:.0}/s, local {local_rate:.0}/s, ratio {:.2}",
        cross / local_rate
    );
    println!(
        "rebalance on join: {moved} of 128 shards moved to n3 with their state in {took:?}; {failed} of {asked} asks failed meanwhile"
    );
    for node in &cluster.nodes {
        rt.block_on(node.shutdown());
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
