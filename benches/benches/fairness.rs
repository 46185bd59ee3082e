//! A calm tenant beside a noisy one, in one run (issue: "one tenant's flood starves another").
//!
//! Tenant `calm` asks its 100 `counter`s over HTTP from a process of its own (this executable,
//! started with `--calm-client`; keep-alive, one client, sequential, the counters in turn): `"Get"` (a read) and `{"Add":1}` (a state write, group-committed before
//! the reply). Tenant `noisy` floods tells from 8 client tasks on two threads of their own, as
//! fast as its rate quota and the mailboxes let it, to one of three targets (a *flood*): 1,000
//! `spin-forever` entities (`"Spin"`: each burns its whole CPU deadline, 500 ms by default),
//! 1,000 `memory-hog` entities (`"Grow"`: each grows its memory until the cap traps it), or both
//! (2,000 entities, the flooders alternating). Each flood runs on a node of its own; on it, calm
//! is measured alone first — the baseline: the same node, client, threads and asks — then
//! during the flood, 3,000 asks of each kind. Target: during the flood calm's p99 <= 3x its p99
//! alone, and no calm errors. Default quotas and node settings (an instance pool of 1,000: the
//! flood's entities outnumber it) except the runtime's worker count (4, as in the HTTP
//! benchmark).
//!
//! Floods to run are named on the command line (`spin`, `hog`, `both`; all by default). Not a
//! criterion timing benchmark: it prints the table.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tessera_contract::EntityAddress;
use tessera_host::node::Node;
use tessera_metadata::TypeOptions;
use tessera_tests::to_msgpack as json_to_msgpack;

const ADMIN: &str = "admin-token-for-the-fairness-bench";
const CALM_ASKS: usize = 3_000;
/// Calm's counters, asked in turn.
const CALM_COUNTERS: usize = 100;
/// A round of calm's asks ends after this long even if not all were sent (a starved calm
/// tenant would otherwise keep the bench running for minutes).
const CALM_ROUND_TIME_MAX: Duration = Duration::from_secs(30);
const FLOODERS: usize = 8;
/// The argument that makes this executable the calm client process.
const CALM_CLIENT_ARG: &str = "--calm-client";
/// Entities of each noisy type the flood goes to.
const NOISY_ENTITIES: usize = 1_000;

/// What the noisy tenant floods.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flood {
    Spin,
    Hog,
    Both,
}

impl Flood {
    const ALL: [Flood; 3] = [Flood::Spin, Flood::Hog, Flood::Both];

    fn name(self) -> &'static str {
        match self {
            Flood::Spin => "spin",
            Flood::Hog => "hog",
            Flood::Both => "both",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Flood::Spin => "1,000 spin-forever",
            Flood::Hog => "1,000 memory-hog",
            Flood::Both => "1,000 spin-forever + 1,000 memory-hog",
        }
    }

    /// The `index`th tell of a flooder: its target and payload.
    fn target(self, index: usize) -> (EntityAddress, &'static str) {
        let spin = || EntityAddress::new("noisy", "spin", format!("s{}", index % NOISY_ENTITIES));
        let hog = || EntityAddress::new("noisy", "hog", format!("h{}", index % NOISY_ENTITIES));
        match self {
            Flood::Spin => (spin(), "Spin"),
            Flood::Hog => (hog(), "Grow"),
            Flood::Both if index.is_multiple_of(2) => (spin(), "Spin"),
            Flood::Both => (hog(), "Grow"),
        }
    }
}

/// Calm's kind of ask.
#[derive(Clone, Copy)]
enum CalmAsk {
    Get,
    Add,
}

impl CalmAsk {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "Get" => Some(CalmAsk::Get),
            "Add" => Some(CalmAsk::Add),
            _ => None,
        }
    }

    fn body(self) -> &'static str {
        match self {
            CalmAsk::Get => "\"Get\"",
            CalmAsk::Add => "{\"Add\":1}",
        }
    }

    fn name(self) -> &'static str {
        match self {
            CalmAsk::Get => "Get",
            CalmAsk::Add => "Add",
        }
    }
}

/// One round of calm's asks: latencies (sorted), failures, and the asks sent.
struct Round {
    latencies: Vec<Duration>,
    errors: usize,
    /// Failed asks by HTTP status (0: no answer).
    statuses: std::collections::BTreeMap<u16, usize>,
    /// Why the first ask with no answer got none.
    no_answer: Option<String>,
}

impl Round {
    fn p(&self, fraction: f64) -> Duration {
        let sorted = &self.latencies;
        sorted[((sorted.len() as f64 * fraction) as usize).min(sorted.len() - 1)]
    }
}

/// A round of calm's asks in a process of its own, as a real client is: an HTTP client in
/// the node's process shares its address space, and with it the kernel's lock on that
/// address space, which the node takes whenever an instance's memory is mapped, grown or
/// reset (a memory flood does that hundreds of times a second): the client's own allocations
/// then waited on the node's memory work, and the bench measured that, not the node.
fn calm_round_apart(url: &str, token: &str, kind: CalmAsk) -> Round {
    let program = std::env::current_exe().expect("the bench's own executable");
    let output = std::process::Command::new(program)
        .args([CALM_CLIENT_ARG, url, token, kind.name()])
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("the calm client process runs");
    assert!(
        output.status.success(),
        "the calm client failed: {}",
        output.status
    );
    let mut round = Round {
        latencies: Vec::with_capacity(CALM_ASKS),
        errors: 0,
        statuses: std::collections::BTreeMap::new(),
        no_answer: None,
    };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        match line.split_once(' ') {
            Some(("latency_ns", nanos)) => round
                .latencies
                .push(Duration::from_nanos(nanos.parse().expect("a latency"))),
            Some(("failed", status)) => {
                round.errors += 1;
                *round
                    .statuses
                    .entry(status.parse().expect("a status"))
                    .or_insert(0) += 1;
            }
            Some(("no_answer", why)) => round.no_answer = Some(why.to_string()),
            _ => {}
        }
    }
    round.latencies.sort();
    round
}

/// The calm client process: one round of asks, each latency and failure on its own line.
fn calm_client(args: &[String]) {
    let [url, token, kind] = args else {
        panic!("usage: {CALM_CLIENT_ARG} URL TOKEN Get|Add");
    };
    let kind = CalmAsk::parse(kind).expect("Get or Add");
    let round = calm_round(url, token, kind);
    let mut out = String::new();
    for latency in &round.latencies {
        out.push_str(&format!("latency_ns {}\n", latency.as_nanos()));
    }
    for (status, count) in &round.statuses {
        for _ in 0..*count {
            out.push_str(&format!("failed {status}\n"));
        }
    }
    if let Some(why) = &round.no_answer {
        out.push_str(&format!("no_answer {why}\n"));
    }
    print!("{out}");
}

/// Up to `CALM_ASKS` sequential HTTP asks of `kind`, the counters in turn.
fn calm_round(url: &str, token: &str, kind: CalmAsk) -> Round {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut latencies = Vec::with_capacity(CALM_ASKS);
    let mut errors = 0;
    let mut statuses = std::collections::BTreeMap::new();
    let mut no_answer = None;
    let round_started = Instant::now();
    for ask in 0..CALM_ASKS {
        if round_started.elapsed() > CALM_ROUND_TIME_MAX {
            break;
        }
        let started = Instant::now();
        let answer = agent
            .post(format!(
                "{url}/v1/entities/counter/c{}/ask",
                ask % CALM_COUNTERS
            ))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .send(kind.body());
        match answer {
            Ok(mut response) if response.status().as_u16() == 200 => {
                let _ = response.body_mut().read_to_vec();
            }
            Ok(response) => {
                errors += 1;
                *statuses.entry(response.status().as_u16()).or_insert(0) += 1;
            }
            Err(error) => {
                errors += 1;
                *statuses.entry(0).or_insert(0) += 1;
                no_answer.get_or_insert_with(|| format!("{error} after {:?}", started.elapsed()));
            }
        }
        latencies.push(started.elapsed());
    }
    latencies.sort();
    Round {
        latencies,
        errors,
        statuses,
        no_answer,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|arg| arg == "--test" || arg == "--list") {
        return;
    }
    if let Some(at) = args.iter().position(|arg| arg == CALM_CLIENT_ARG) {
        calm_client(&args[at + 1..]);
        return;
    }
    let named: Vec<Flood> = Flood::ALL
        .into_iter()
        .filter(|flood| args.iter().any(|arg| arg == flood.name()))
        .collect();
    let floods = if named.is_empty() {
        Flood::ALL.to_vec()
    } else {
        named
    };
    println!(
        "calm tenant, up to {CALM_ASKS} sequential HTTP asks per row over {CALM_COUNTERS} counters; \
         each flood on a node of its own, calm alone measured first on it:"
    );
    for flood in floods {
        run_flood(flood);
    }
}

/// Opens a node, measures calm alone and then during `flood`, and prints the rows.
fn run_flood(flood: Flood) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = tessera_tests::node_config(dir.path(), ADMIN, instances_max());
    let (node, url, calm_token) = runtime.block_on(open_node(config));
    // Warm up: activate the counters and the HTTP path.
    let _ = calm_round_apart(&url, &calm_token, CalmAsk::Get);
    let kinds = [CalmAsk::Get, CalmAsk::Add];
    let alone: Vec<Round> = kinds
        .iter()
        .map(|kind| calm_round_apart(&url, &calm_token, *kind))
        .collect();

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
            clients.spawn(flood_tells(node, flood, flooder, stop, sent))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1_000));
    let during: Vec<Round> = kinds
        .iter()
        .map(|kind| calm_round_apart(&url, &calm_token, *kind))
        .collect();
    stop.store(true, Ordering::Relaxed);
    for flooder in flooders {
        let _ = clients.block_on(flooder);
    }
    let stats = node.entities().stats();
    println!("flood `{}` ({}):", flood.name(), flood.describe());
    for ((kind, alone), during) in kinds.iter().zip(&alone).zip(&during) {
        let ratio = during.p(0.99).as_secs_f64() / alone.p(0.99).as_secs_f64();
        println!(
            "  {:<3}  alone p50 {:>9.1?} p99 {:>9.1?} errors {} | flood p50 {:>9.1?} p99 {:>9.1?} \
             errors {} asks {} max {:.1?} | p99 ratio {ratio:.1}x (target <= 3x)",
            kind.name(),
            alone.p(0.50),
            alone.p(0.99),
            alone.errors,
            during.p(0.50),
            during.p(0.99),
            during.errors,
            during.latencies.len(),
            during.latencies.last().copied().unwrap_or_default(),
        );
        if during.errors > 0 {
            println!(
                "       failed asks by HTTP status: {:?} (no answer: {:?})",
                during.statuses, during.no_answer
            );
        }
    }
    println!(
        "  noisy tells accepted: {}; guest calls throttled at the tenant gate: {}; instance \
         swaps: {}; activations: {}; instance pool: {}",
        sent.load(Ordering::Relaxed),
        stats.throttled_calls.load(Ordering::Relaxed),
        stats.instance_swaps.load(Ordering::Relaxed),
        stats.activations.load(Ordering::Relaxed),
        instances_max(),
    );
    runtime.block_on(node.shutdown());
    drop(clients);
}

/// The node's instance pool: 1,000 (the default), or `FAIRNESS_INSTANCES_MAX` (an experiment:
/// a pool the flood's entities do not fill).
fn instances_max() -> u32 {
    std::env::var("FAIRNESS_INSTANCES_MAX")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1_000)
}

/// A node with tenant `calm` (`counter`) and tenant `noisy` (`spin`, `hog`), serving HTTP.
async fn open_node(config: tessera_host::node::NodeConfig) -> (Arc<Node>, String, String) {
    let node = Node::open(config).await.expect("the node opens");
    let (_, calm_token) = node.create_tenant("calm", None).await.expect("calm");
    node.create_tenant("noisy", None).await.expect("noisy");
    let plugins = [
        ("calm", "counter", tessera_tests::COUNTER),
        ("noisy", "spin", tessera_tests::SPIN_FOREVER),
        ("noisy", "hog", tessera_tests::MEMORY_HOG),
    ];
    for (tenant, entity_type, path) in plugins {
        let bytes = std::fs::read(path).expect("plugin built");
        node.deploy(tenant, entity_type, bytes, TypeOptions::default())
            .await
            .expect("deploy");
    }
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
}

/// Tells the flood's targets until `stop`, backing off when refused.
async fn flood_tells(
    node: Arc<Node>,
    flood: Flood,
    flooder: usize,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) {
    let mut index = flooder;
    while !stop.load(Ordering::Relaxed) {
        let (to, payload) = flood.target(index);
        index += FLOODERS;
        match node
            .tell(&to, json_to_msgpack(&serde_json::json!(payload)))
            .await
        {
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
