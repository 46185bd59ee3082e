//! HTTP API overhead: asks to one counter over loopback HTTP (ureq, keep-alive) beside the same
//! ask made in-process with `Node::ask`, and beside two floors no HTTP ask can go under on this
//! machine: a bare axum echo of the same body (same client, same runtime, no Tessera) and a
//! blocking TCP round trip between two threads (no HTTP at all). Criterion measures one
//! sequential ask each way; a closing run measures sequential asks again with CPU accounting
//! (the server's CPU per HTTP ask is the process's CPU minus the client thread's) and drives
//! the ask both ways with 32 concurrent clients, printing throughput, p50 and p99 latency and
//! the ratios (recorded in `docs/performance.md`). The runtime is the one `tessera node` runs
//! on: one worker per core.

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_contract::EntityAddress;
use tessera_host::node::Node;
use tessera_metadata::{Quotas, TypeOptions};
use tessera_tests::to_msgpack as json_to_msgpack;

/// The allocator the `tessera` binary runs with (`crates/host/src/main.rs`), for both sides.
#[global_allocator]
static ALLOCATOR: tessera_host::allocator::Mimalloc = tessera_host::allocator::Mimalloc;

const ADMIN: &str = "admin-token-for-the-http-bench";
/// Concurrent clients of the closing run.
const CLIENTS: usize = 32;
/// Asks each client makes in the closing run.
const ASKS_PER_CLIENT: usize = 2_000;
/// Asks read the counter: the entity does the least work, so the edge's cost shows.
const MESSAGE: &str = "\"Get\"";

struct Bench {
    runtime: tokio::runtime::Runtime,
    node: Arc<Node>,
    url: String,
    /// A bare HTTP echo on the same runtime: the floor any HTTP ask pays.
    echo_url: String,
    token: String,
    _dir: tempfile::TempDir,
}

impl Bench {
    fn new() -> Bench {
        // The runtime `tessera node` runs on: one worker per core.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("benchmark runtime");
        let dir = tempfile::tempdir().expect("temporary directory");
        let config = tessera_tests::node_config(dir.path(), ADMIN, 100);
        let (node, url, echo_url, token) = runtime.block_on(async {
            let node = Node::open(config).await.expect("the node opens");
            let quotas = Quotas {
                messages_per_second: 1_000_000_000,
                messages_burst: 1_000_000_000,
                ..Quotas::default()
            };
            let (_, token) = node
                .create_tenant("bench", Some(quotas))
                .await
                .expect("tenant");
            let bytes = std::fs::read(tessera_tests::COUNTER).expect("the counter plugin");
            node.deploy("bench", "counter", bytes, TypeOptions::default())
                .await
                .expect("deploy");
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("listener");
            let url = format!("http://{}", listener.local_addr().expect("address"));
            tokio::spawn(tessera_host::api::serve(
                node.clone(),
                listener,
                std::future::pending(),
            ));
            let echo = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("echo listener");
            let echo_url = format!("http://{}", echo.local_addr().expect("address"));
            let router = axum::Router::new().route(
                "/echo",
                axum::routing::post(|body: axum::body::Bytes| async move { body }),
            );
            tokio::spawn(async move { axum::serve(echo, router).await });

            (node, url, echo_url, token)
        });
        Bench {
            runtime,
            node,
            url,
            echo_url,
            token,
            _dir: dir,
        }
    }

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into()
    }

    fn http_ask(&self, agent: &ureq::Agent, id: &str) {
        self.post(agent, &format!("{}/v1/entities/counter/{id}/ask", self.url));
    }

    /// The same request to the bare echo: same headers, same body.
    fn http_echo(&self, agent: &ureq::Agent) {
        self.post(agent, &format!("{}/echo", self.echo_url));
    }

    /// POSTs `MESSAGE` as JSON with the tenant's token to `url` and reads the 200 answer.
    fn post(&self, agent: &ureq::Agent, url: &str) {
        let mut response = agent
            .post(url)
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .send(MESSAGE)
            .expect("the request is answered");
        assert_eq!(response.status().as_u16(), 200);
        response.body_mut().read_to_vec().expect("the answer");
    }

    async fn node_ask(node: &Node, id: &str) {
        let payload = json_to_msgpack(&json!("Get"));
        node.ask(
            &EntityAddress::new("bench", "counter", id),
            payload,
            Duration::from_secs(10),
        )
        .await
        .expect("the ask is answered");
    }
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 * fraction) as usize).min(sorted.len() - 1);
    sorted[index]
}

struct Run {
    asks_per_second: f64,
    p50: Duration,
    p99: Duration,
}

fn summarise(mut latencies: Vec<Duration>, elapsed: Duration) -> Run {
    latencies.sort();
    Run {
        asks_per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
    }
}

fn concurrent_http(bench: &Arc<Bench>) -> Run {
    let start = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let bench = bench.clone();
            std::thread::spawn(move || {
                let agent = Bench::agent();
                let id = format!("c{client}");
                (0..ASKS_PER_CLIENT)
                    .map(|_| {
                        let asked = Instant::now();
                        bench.http_ask(&agent, &id);
                        asked.elapsed()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let latencies = clients
        .into_iter()
        .flat_map(|client| client.join().expect("client thread"))
        .collect();
    summarise(latencies, start.elapsed())
}

fn concurrent_in_process(bench: &Bench) -> Run {
    bench.runtime.block_on(async {
        let start = Instant::now();
        let clients: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let node = bench.node.clone();
                tokio::spawn(async move {
                    let id = format!("c{client}");
                    let mut latencies = Vec::with_capacity(ASKS_PER_CLIENT);
                    for _ in 0..ASKS_PER_CLIENT {
                        let asked = Instant::now();
                        Bench::node_ask(&node, &id).await;
                        latencies.push(asked.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        let mut latencies = Vec::new();
        for client in clients {
            latencies.extend(client.await.expect("client task"));
        }
        summarise(latencies, start.elapsed())
    })
}

/// Sequential asks measured for the closing table.
const SEQUENTIAL_ASKS: usize = 20_000;

/// CPU time of `clock` (`CLOCK_PROCESS_CPUTIME_ID` or `CLOCK_THREAD_CPUTIME_ID`).
fn cpu_time(clock: libc::clockid_t) -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec and both clocks exist on Linux.
    let status = unsafe { libc::clock_gettime(clock, &mut now) };
    assert_eq!(status, 0, "clock_gettime");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Asks per second and CPU per ask: all of the process's for in-process asks, the process's
/// minus this (client) thread's for HTTP asks.
fn sequential_with_cpu(
    asks: usize,
    mut ask: impl FnMut(),
    exclude_caller: bool,
) -> (f64, Duration) {
    let process = cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID);
    let caller = cpu_time(libc::CLOCK_THREAD_CPUTIME_ID);
    let started = Instant::now();
    for _ in 0..asks {
        ask();
    }
    let elapsed = started.elapsed();
    let mut used = cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID) - process;
    if exclude_caller {
        used -= cpu_time(libc::CLOCK_THREAD_CPUTIME_ID) - caller;
    }
    (asks as f64 / elapsed.as_secs_f64(), used / asks as u32)
}

/// Round trips per second of a 64-byte message between two threads over blocking loopback TCP
/// (`TCP_NODELAY`): what the machine's network stack and scheduler cost before any HTTP.
fn tcp_round_trips(trips: usize) -> f64 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp listener");
    let address = listener.local_addr().expect("address");
    let echo = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        stream.set_nodelay(true).expect("nodelay");
        let mut buffer = [0u8; 64];
        while stream.read_exact(&mut buffer).is_ok() {
            stream.write_all(&buffer).expect("echo");
        }
    });
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut buffer = [7u8; 64];
    let started = Instant::now();
    for _ in 0..trips {
        stream.write_all(&buffer).expect("send");
        stream.read_exact(&mut buffer).expect("receive");
    }
    let rate = trips as f64 / started.elapsed().as_secs_f64();
    drop(stream);
    echo.join().expect("echo thread");
    rate
}

fn http_ask(c: &mut Criterion) {
    let bench = Arc::new(Bench::new());
    let agent = Bench::agent();
    let mut group = c.benchmark_group("ask");
    group.bench_function("http_sequential", |b| {
        b.iter(|| bench.http_ask(&agent, "seq"))
    });
    group.bench_function("http_echo_sequential", |b| {
        b.iter(|| bench.http_echo(&agent))
    });
    group.bench_function("in_process_sequential", |b| {
        b.iter(|| bench.runtime.block_on(Bench::node_ask(&bench.node, "seq")))
    });
    group.finish();

    let (http_rate, server_cpu) =
        sequential_with_cpu(SEQUENTIAL_ASKS, || bench.http_ask(&agent, "seq"), true);
    let (echo_rate, echo_cpu) =
        sequential_with_cpu(SEQUENTIAL_ASKS, || bench.http_echo(&agent), true);
    let tcp_rate = tcp_round_trips(SEQUENTIAL_ASKS);
    let (local_rate, local_cpu) = sequential_with_cpu(
        SEQUENTIAL_ASKS,
        || bench.runtime.block_on(Bench::node_ask(&bench.node, "seq")),
        false,
    );
    println!("\nsequential, {SEQUENTIAL_ASKS} asks each:");
    println!(
        "http (keep-alive)        {http_rate:>10.0} asks/s   server CPU {:>6.1} µs per ask",
        server_cpu.as_secs_f64() * 1e6
    );
    println!(
        "bare http echo           {echo_rate:>10.0} asks/s   server CPU {:>6.1} µs per echo",
        echo_cpu.as_secs_f64() * 1e6
    );
    println!(
        "in-process Node::ask     {local_rate:>10.0} asks/s   CPU        {:>6.1} µs per ask",
        local_cpu.as_secs_f64() * 1e6
    );
    println!("tcp round trip (floor)   {tcp_rate:>10.0} trips/s");
    println!(
        "http / in-process: throughput {:.2}x (target >= 0.35x); http / bare echo {:.2}x; \
         the floors / in-process: bare echo {:.2}x, tcp {:.2}x",
        http_rate / local_rate,
        http_rate / echo_rate,
        echo_rate / local_rate,
        tcp_rate / local_rate
    );

    let http = concurrent_http(&bench);
    let local = concurrent_in_process(&bench);
    let row = |name: &str, run: &Run| {
        println!(
            "{name:<24} {:>10.0} asks/s   p50 {:>8.1} µs   p99 {:>8.1} µs",
            run.asks_per_second,
            run.p50.as_secs_f64() * 1e6,
            run.p99.as_secs_f64() * 1e6
        );
    };
    println!("\n{CLIENTS} concurrent clients, {ASKS_PER_CLIENT} asks each:");
    row("http (keep-alive)", &http);
    row("in-process Node::ask", &local);
    println!(
        "http / in-process: throughput {:.2}x, p50 {:.1}x, p99 {:.1}x",
        http.asks_per_second / local.asks_per_second,
        http.p50.as_secs_f64() / local.p50.as_secs_f64(),
        http.p99.as_secs_f64() / local.p99.as_secs_f64()
    );
}

criterion_group!(benches, http_ask);
criterion_main!(benches);
