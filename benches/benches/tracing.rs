//! What tracing costs on the region benchmark's work, off and on, in the same run: tells to
//! 1,000 `counter` entities (read-only `"Get"`, 20 per entity, then an ask each) through
//! `Node::tell` from one sender task per worker thread (`tessera_tests::tell_round`, as in
//! `region.rs`), on a node with the OTLP exporter installed — recording switched off for one
//! side (`tessera_entity::trace::set_recording(false)`: a message costs what it costs on a
//! node without an endpoint) and on for the other (a span per message, exported over HTTP to a
//! sink on loopback that answers every batch `200`, so encoding and sending are paid too).
//!
//! The ratio printed at the end is the median over rounds taken in turns (off, on, then on,
//! off, ...), so that neither the machine's drift nor the caches left by the round before land
//! on one side only. Run: `cargo bench -p tessera-benches --bench tracing`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_contract::EntityAddress;
use tessera_host::node::Node;
use tessera_tests::to_msgpack;

/// The allocator the `tessera` binary runs with (`crates/host/src/main.rs`).
#[global_allocator]
static ALLOCATOR: tessera_host::allocator::Mimalloc = tessera_host::allocator::Mimalloc;

const ENTITIES: usize = 1_000;
const TELLS_PER_ENTITY: usize = 20;
/// Rounds of the closing run, each a round of both sides, in alternating order.
const PAIRED_ROUNDS: usize = 24;
/// Worker threads of the runtime, and sender tasks.
const THREADS: usize = 2;

/// An OTLP/HTTP sink on loopback: answers every POST `200` and drops the spans. Its own thread
/// and runtime, as a collector beside the node would be.
fn start_sink() -> String {
    let (address_sender, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("sink runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("sink listens");
            address_sender
                .send(listener.local_addr().expect("sink address"))
                .expect("address sent");
            let sink = axum::Router::new().route(
                "/v1/traces",
                axum::routing::post(|_: axum::body::Bytes| async { "" }),
            );
            axum::serve(listener, sink).await.expect("sink serves");
        });
    });
    format!("http://{}/v1/traces", address.recv().expect("sink address"))
}

/// Installs the OTLP exporter (outside any runtime: its HTTP client runs its own).
fn install_exporter(endpoint: &str) -> opentelemetry_sdk::trace::SdkTracerProvider {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint)
        .build()
        .expect("exporter");
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .build();
    let tracer = opentelemetry::global::BoxedTracer::new(Box::new(provider.tracer("bench")));
    assert!(tessera_entity::trace::install(tracer), "installed once");
    provider
}

fn address(index: usize) -> EntityAddress {
    EntityAddress::new("bench", "counter", format!("c{index}"))
}

/// One round: each sender task tells its half of the counters.
fn round(rt: &tokio::runtime::Runtime, node: &Arc<Node>, get: &[u8]) {
    let per_sender = ENTITIES / THREADS;
    rt.block_on(async {
        let senders: Vec<_> = (0..THREADS)
            .map(|sender| {
                let node = node.clone();
                let get = get.to_vec();
                let range = sender * per_sender..(sender + 1) * per_sender;
                tokio::spawn(async move {
                    let addresses: Vec<EntityAddress> = range.map(address).collect();
                    tessera_tests::tell_round(&node, &addresses, &get, TELLS_PER_ENTITY).await;
                })
            })
            .collect();
        for sender in senders {
            sender.await.expect("sender");
        }
    })
}

fn timed_round(rt: &tokio::runtime::Runtime, node: &Arc<Node>, get: &[u8], on: bool) -> Duration {
    tessera_entity::trace::set_recording(on);
    let started = Instant::now();
    round(rt, node, get);
    started.elapsed()
}

fn bench_tracing(c: &mut Criterion) {
    let provider = install_exporter(&start_sink());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(THREADS)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("dir");
    let config = tessera_tests::node_config(
        dir.path(),
        "bench-admin-token-0123456789",
        (ENTITIES + 100) as u32,
    );
    let node = rt.block_on(tessera_tests::counter_bench_node(config));
    let get = to_msgpack(&serde_json::json!("Get"));
    // Every counter live before anything is timed.
    round(&rt, &node, &get);

    let messages = (ENTITIES * (TELLS_PER_ENTITY + 1)) as u64;
    let mut group = c.benchmark_group("tracing");
    group.throughput(Throughput::Elements(messages));
    group.sample_size(10);
    for (name, on) in [
        ("tells_1000_counters_tracing_off", false),
        ("tells_1000_counters_tracing_on", true),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                (0..iterations)
                    .map(|_| timed_round(&rt, &node, &get, on))
                    .sum()
            })
        });
    }
    group.finish();

    let mut ratios = Vec::with_capacity(PAIRED_ROUNDS);
    let (mut off_total, mut on_total) = (Duration::ZERO, Duration::ZERO);
    for index in 0..PAIRED_ROUNDS {
        let (off, on) = if index % 2 == 0 {
            let off = timed_round(&rt, &node, &get, false);
            (off, timed_round(&rt, &node, &get, true))
        } else {
            let on = timed_round(&rt, &node, &get, true);
            (timed_round(&rt, &node, &get, false), on)
        };
        off_total += off;
        on_total += on;
        ratios.push(on.as_secs_f64() / off.as_secs_f64());
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    let rate = |total: Duration| messages as f64 * PAIRED_ROUNDS as f64 / total.as_secs_f64();
    println!(
        "tracing over {PAIRED_ROUNDS} paired rounds of {messages} messages: off {:.0} msg/s, \
         on {:.0} msg/s; time on / off, median of the rounds: {median:.3} (quartiles {:.3} .. {:.3})",
        rate(off_total),
        rate(on_total),
        ratios[ratios.len() / 4],
        ratios[3 * ratios.len() / 4],
    );
    tessera_entity::trace::set_recording(false);
    drop(rt);
    if let Err(error) = provider.shutdown() {
        eprintln!("exporter shutdown: {error}");
    }
}

criterion_group!(tracing_benches, bench_tracing);
criterion_main!(tracing_benches);
