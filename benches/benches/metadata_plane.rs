//! The metadata plane: catalog commit latency through three VSR voters over real loopback
//! transports with mutual TLS and durable file journals (fdatasync), beside one local durable
//! redb commit of the same command (the single-node plane), in the same run; and the time from
//! stopping the primary to the next committed command.
//!
//! The three voters run in this process (each its own transport, journal and catalog); a test
//! with three processes is the cluster issue's next step. Run:
//! `cargo bench -p tessera-benches --bench metadata_plane`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use tessera_cluster::{Transport, TransportConfig, create_dev_cluster, load_identity};
use tessera_consensus::group::GroupFrame;
use tessera_contract::BoxFuture;
use tessera_metadata::replicated::{PlaneConfig, ReplicatedPlane};
use tessera_metadata::{
    Applied, CatalogObserver, Command, LocalPlane, MetadataPlane, MetadataStore, Quotas,
};
use tessera_tests::plane::dedicated_transport;

const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
/// Sequential commands timed one by one on each side.
const SAMPLES: usize = 300;

struct Quiet;

impl CatalogObserver for Quiet {
    fn applied<'a>(&'a self, _: &'a Applied) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

fn store(path: &std::path::Path) -> MetadataStore {
    let database = redb::Database::create(path).expect("database");
    MetadataStore::open(Arc::new(database)).expect("catalog")
}

fn quotas_command(round: usize) -> Command {
    Command::UpdateQuotas {
        name: "bench".into(),
        quotas: Quotas {
            messages_burst: 1_000 + round as u32,
            ..Quotas::default()
        },
    }
}

fn create_tenant() -> Command {
    Command::CreateTenant {
        name: "bench".into(),
        token_sha256: "bench-token".into(),
        quotas: Quotas::default(),
        created_ms: 0,
    }
}

struct Cluster {
    planes: Vec<Option<ReplicatedPlane>>,
    transports: Vec<Option<Arc<Transport<GroupFrame>>>>,
}

async fn start_cluster(dir: &std::path::Path) -> Cluster {
    create_dev_cluster(&dir.join("certs"), &VOTERS).expect("certificates");
    let addresses: Vec<SocketAddr> = VOTERS
        .iter()
        .map(|_| {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
            probe.local_addr().expect("address")
        })
        .collect();
    let mut cluster = Cluster {
        planes: Vec::new(),
        transports: Vec::new(),
    };
    for (index, node) in VOTERS.iter().enumerate() {
        let identity = load_identity(&dir.join("certs"), node).expect("identity");
        let config = TransportConfig::new("bench", addresses[index]);
        let (transport, inbound) = Transport::<GroupFrame>::start(config, identity)
            .await
            .expect("transport");
        for (peer, address) in VOTERS.iter().zip(&addresses) {
            if peer != node {
                transport.add_peer(peer, *address).expect("peer");
            }
        }
        let transport = Arc::new(transport);
        let (outbox, inbound) = dedicated_transport(transport.clone(), inbound);
        let config = PlaneConfig {
            voters: VOTERS.iter().map(|voter| voter.to_string()).collect(),
            node: node.to_string(),
            journal: dir.join(format!("{node}.journal")),
            tick: Duration::from_millis(10),
            checkpoint_interval_ops: None,
        };
        let plane = ReplicatedPlane::start(
            config,
            store(&dir.join(format!("{node}.redb"))),
            Arc::new(Quiet),
            outbox,
            inbound,
        )
        .expect("plane");
        cluster.planes.push(Some(plane));
        cluster.transports.push(Some(transport));
    }
    cluster
}

async fn latencies(plane: &dyn MetadataPlane, offset: usize) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(SAMPLES);
    for round in 0..SAMPLES {
        let started = Instant::now();
        plane
            .submit(quotas_command(offset + round))
            .await
            .expect("committed");
        samples.push(started.elapsed());
    }
    samples.sort();
    samples
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)]
}

fn bench_metadata_plane(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let local = LocalPlane::new(store(&dir.path().join("local.redb")), Arc::new(Quiet));
    let mut cluster = rt.block_on(start_cluster(dir.path()));
    rt.block_on(async {
        local.submit(create_tenant()).await.expect("tenant");
        let primary = cluster.planes[0].as_ref().expect("voter");
        primary.submit(create_tenant()).await.expect("tenant");
    });
    let mut group = c.benchmark_group("metadata_plane");
    group.sample_size(10);
    let mut round = 0;
    group.bench_function("local_redb_commit", |b| {
        b.iter_custom(|iterations| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    round += 1;
                    local
                        .submit(quotas_command(round))
                        .await
                        .expect("committed");
                }
                started.elapsed()
            })
        })
    });
    group.bench_function("three_voters_submit_on_a_backup", |b| {
        let backup = cluster.planes[1].as_ref().expect("voter");
        b.iter_custom(|iterations| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    round += 1;
                    backup
                        .submit(quotas_command(round))
                        .await
                        .expect("committed");
                }
                started.elapsed()
            })
        })
    });
    group.finish();

    let (local_samples, voter_samples) = rt.block_on(async {
        let local_samples = latencies(&local, 1_000_000).await;
        let backup = cluster.planes[1].as_ref().expect("voter");
        let voter_samples = latencies(backup, 2_000_000).await;
        (local_samples, voter_samples)
    });
    // Failover: stop the primary, time until the next command commits on a survivor (three
    // voters keep a quorum through one loss only).
    let failover = rt.block_on(async {
        let status = cluster.planes[1].as_ref().expect("voter").status();
        let primary = status.primary.expect("a primary in normal status");
        let index = VOTERS
            .iter()
            .position(|voter| *voter == primary)
            .expect("a voter");
        let survivor = (index + 1) % VOTERS.len();
        let started = Instant::now();
        cluster.planes[index] = None;
        if let Some(transport) = cluster.transports[index].take() {
            transport.close();
        }
        let plane = cluster.planes[survivor].as_ref().expect("voter");
        plane
            .submit(quotas_command(3_000_000))
            .await
            .expect("committed after failover");
        started.elapsed()
    });
    let (local_p50, local_p99) = (
        percentile(&local_samples, 0.5),
        percentile(&local_samples, 0.99),
    );
    let (voter_p50, voter_p99) = (
        percentile(&voter_samples, 0.5),
        percentile(&voter_samples, 0.99),
    );
    println!("\nmetadata commit latency over {SAMPLES} sequential commands (same run):");
    println!("  one local durable redb commit:        p50 {local_p50:?}, p99 {local_p99:?}");
    println!(
        "  three voters, submitted on a backup:  p50 {voter_p50:?}, p99 {voter_p99:?} \
         ({:.1}x / {:.1}x the local commit)",
        voter_p50.as_secs_f64() / local_p50.as_secs_f64(),
        voter_p99.as_secs_f64() / local_p99.as_secs_f64()
    );
    println!("  primary stopped -> next command committed on a survivor: {failover:?}");
}

criterion::criterion_group!(benches, bench_metadata_plane);
criterion::criterion_main!(benches);
