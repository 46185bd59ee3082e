//! A calm tenant beside a noisy one, in one run (issue: "one tenant's flood starves another").
//!
//! Tenant `calm` asks its `counter` over HTTP (keep-alive, one client, sequential); tenant
//! `noisy` floods 64 `spin-forever` entities with `"Spin"` tells (each burns its whole CPU
//! deadline, 500 ms by default) from 8 client tasks on two threads of their own, as fast as its
//! rate quota and the mailboxes let it. Measured: calm's ask latency alone, then during the
//! flood, 1,000 asks each. Target: during the flood calm's p99 <= 3x its p99 alone, and no calm
//! errors. Default quotas and node settings except the runtime's worker count (4, as in the
//! HTTP benchmark).
//!
//! Not a criterion timing benchmark: it prints the table.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tessera_contract::EntityAddress;
use tessera_host::node::Node;
use tessera_metadata::TypeOptions;
use tessera_tests::to_msgpack as json_to_msgpack;

const ADMIN: &str = "admin-token-for-the-fairness-bench";
const CALM_ASKS: usize = 1_000;
const FLOODERS: usize = 8;
const SPINNERS: usize = 64;

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    sorted[((sorted.len() as f64 * fraction) as usize).min(sorted.len() - 1)]
}

/// `CALM_ASKS` sequential HTTP asks; their latencies (sorted) and how many failed.
fn calm_round(url: &str, token: &str) -> (Vec<Duration>, usize) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut latencies = Vec::with_capacity(CALM_ASKS);
    let mut errors = 0;
    for _ in 0..CALM_ASKS {
        let started = Instant::now();
        let answer = agent
            .post(format!("{url}/v1/entities/counter/c1/ask"))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .send("\"Get\"");
        match answer {
            Ok(mut response) if response.status().as_u16() == 200 => {
                let _ = response.body_mut().read_to_vec();
            }
            _ => errors += 1,
        }
        latencies.push(started.elapsed());
    }
    latencies.sort();
    (latencies, errors)
}

fn main() {
    if std::env::args().any(|arg| arg == "--test" || arg == "--list") {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = tessera_tests::node_config(dir.path(), ADMIN, 1_000);
    let (node, url, calm_token) = runtime.block_on(async {
        let node = Node::open(config).await.expect("the node opens");
        let (_, calm_token) = node.create_tenant("calm", None).await.expect("calm");
        node.create_tenant("noisy", None).await.expect("noisy");
        let counter = std::fs::read(tessera_tests::COUNTER).expect("counter plugin");
        node.deploy("calm", "counter", counter, TypeOptions::default())
            .await
            .expect("deploy counter");
        let spin = std::fs::read(tessera_tests::SPIN_FOREVER).expect("spin plugin");
        node.deploy("noisy", "spin", spin, TypeOptions::default())
            .await
            .expect("deploy spin");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("listener");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(tessera_host::api::serve(
            node.clone(),
            listener,
            std::future::pending(),
        ));
        (node, url, calm_token)
    });
    // Warm up: activate the counter and the HTTP path.
    let _ = calm_round(&url, &calm_token);
    let (alone, alone_errors) = calm_round(&url, &calm_token);

    // The flooders are clients: they run on threads of their own, not on the node's workers.
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("client runtime");
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = (0..FLOODERS)
        .map(|flooder| {
            let (node, stop, sent) = (node.clone(), stop.clone(), sent.clone());
            clients.spawn(flood(node, flooder, stop, sent))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1_000));
    let (during, during_errors) = calm_round(&url, &calm_token);
    stop.store(true, Ordering::Relaxed);
    for flooder in flooders {
        let _ = clients.block_on(flooder);
    }
    let throttled = node
        .entities()
        .stats()
        .throttled_calls
        .load(Ordering::Relaxed);

    let row = |name: &str, latencies: &[Duration], errors: usize| {
        println!(
            "  {name:<22} p50 {:>10.1?}  p99 {:>10.1?}  errors {errors}",
            percentile(latencies, 0.50),
            percentile(latencies, 0.99)
        );
    };
    println!("calm tenant, {CALM_ASKS} sequential HTTP asks (same run):");
    row("alone", &alone, alone_errors);
    row("during noisy flood", &during, during_errors);
    let ratio = percentile(&during, 0.99).as_secs_f64() / percentile(&alone, 0.99).as_secs_f64();
    println!(
        "  p99 during / alone = {ratio:.1}x (target <= 3x); calm errors during = {during_errors} (target 0)"
    );
    println!(
        "  noisy tells accepted: {}; guest calls throttled at the tenant gate: {throttled}",
        sent.load(Ordering::Relaxed)
    );
    runtime.block_on(node.shutdown());
}

/// Tells `"Spin"` to the noisy tenant's spinners until `stop`, backing off when refused.
async fn flood(node: Arc<Node>, flooder: usize, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) {
    let spin = json_to_msgpack(&serde_json::json!("Spin"));
    let mut index = flooder;
    while !stop.load(Ordering::Relaxed) {
        let to = EntityAddress::new("noisy", "spin", format!("s{}", index % SPINNERS));
        index += FLOODERS;
        match node.tell(&to, spin.clone()).await {
            Ok(()) => {
                sent.fetch_add(1, Ordering::Relaxed);
                // A client's next request comes after this one left its socket.
                tokio::task::yield_now().await;
            }
            // Over its rate quota or a full mailbox: what a real flooder meets too.
            Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
}
