//! The metadata plane across three `tessera node` processes on loopback (mutual TLS, durable
//! journals with fdatasync), beside one single-node `tessera node` process doing the same
//! work, in the same run: a catalog write over HTTP (`PUT /v1/tenants/bench/quotas`, answered
//! after commit) sent one at a time to a backup of the cluster and to the single node; the time
//! from `kill -9` of the metadata primary to the next committed write through a survivor; and
//! the time a restarted voter takes from its process start to having caught up; and the time a
//! new, non-voting node takes from its process start to being an up member.
//!
//! Each node is this bench binary re-run as a child (`tessera_tests::processes`): the child
//! runs the real command line until it is killed. Run:
//! `cargo bench -p tessera-benches --bench cluster_processes -- --warm-up-time 1 --measurement-time 3`.

use criterion::Criterion;
use serde_json::{Value as Json, json};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};
use tessera_tests::processes::{free_address, run_child_if_asked, spawn_node};

const ADMIN: &str = "admin-token-for-the-cluster-bench";
const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// The node that joins later, without a vote.
const JOINER: &str = "n4";
/// Sequential writes timed one by one on each side.
const SAMPLES: usize = 300;
const PATIENCE: Duration = Duration::from_secs(120);

fn spawn(dir: &Path, name: &str, args: Vec<String>) -> Child {
    let mut all = vec!["node".to_string()];
    all.extend(args);
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log");
    spawn_node(&[], &all, ADMIN, "warn", log, &[])
}

struct Voter {
    id: &'static str,
    http: SocketAddr,
    cluster: SocketAddr,
    child: Option<Child>,
}

fn voter_args(dir: &Path, voters: &[Voter], index: usize) -> Vec<String> {
    let voter = &voters[index];
    node_args(dir, voters, voter.id, voter.http, voter.cluster)
}

fn node_args(
    dir: &Path,
    voters: &[Voter],
    id: &str,
    http: SocketAddr,
    cluster: SocketAddr,
) -> Vec<String> {
    let mut args = vec![
        "--node-id".into(),
        id.into(),
        "--data-dir".into(),
        dir.join(id).display().to_string(),
        "--http".into(),
        http.to_string(),
        "--cluster-id".into(),
        "bench".into(),
        "--cluster-listen".into(),
        cluster.to_string(),
        "--certs-dir".into(),
        dir.join("certs").display().to_string(),
        "--voters".into(),
        NODES.join(","),
    ];
    for peer in voters {
        args.push("--seed".into());
        args.push(format!("{}={}", peer.id, peer.cluster));
    }
    args
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// One request: the status and JSON body, or `None` if the node did not answer.
fn call(agent: &ureq::Agent, method: &str, url: &str, body: Option<&Json>) -> Option<(u16, Json)> {
    let builder = ureq::http::Request::builder()
        .method(method)
        .uri(url)
        .header("authorization", format!("Bearer {ADMIN}"))
        .header("content-type", "application/json");
    let bytes = body
        .map(|body| serde_json::to_vec(body).expect("json"))
        .unwrap_or_default();
    let response = agent.run(builder.body(bytes).ok()?).ok()?;
    let status = response.status().as_u16();
    let text = response.into_body().read_to_string().ok()?;
    Some((status, serde_json::from_str(&text).unwrap_or(Json::Null)))
}

fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn cluster_status(agent: &ureq::Agent, http: SocketAddr) -> Option<Json> {
    let (status, body) = call(agent, "GET", &format!("http://{http}/v1/cluster"), None)?;
    (status == 200).then_some(body)
}

/// One catalog write, answered after it committed (and applied on the node written through).
fn write_quotas(agent: &ureq::Agent, http: SocketAddr, round: u32) -> bool {
    let url = format!("http://{http}/v1/tenants/bench/quotas");
    let body = json!({"messages_burst": 1_000 + round});
    matches!(call(agent, "PUT", &url, Some(&body)), Some((200, _)))
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)]
}

fn latencies(agent: &ureq::Agent, http: SocketAddr, offset: u32) -> Vec<Duration> {
    (0..SAMPLES as u32)
        .map(|round| {
            let started = Instant::now();
            assert!(write_quotas(agent, http, offset + round), "write committed");
            started.elapsed()
        })
        .collect()
}

fn bench_cluster_processes(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    let all: Vec<&str> = NODES.iter().copied().chain([JOINER]).collect();
    tessera_cluster::create_dev_cluster(&dir.join("certs"), &all).expect("certificates");
    let mut voters: Vec<Voter> = NODES
        .iter()
        .map(|id| Voter {
            id,
            http: free_address(),
            cluster: free_address(),
            child: None,
        })
        .collect();
    for index in 0..voters.len() {
        let child = spawn(dir, voters[index].id, voter_args(dir, &voters, index));
        voters[index].child = Some(child);
    }
    let single_http = free_address();
    let mut single = spawn(
        dir,
        "single",
        vec![
            "--data-dir".into(),
            dir.join("single").display().to_string(),
            "--http".into(),
            single_http.to_string(),
        ],
    );
    let agent = agent();
    for voter in &voters {
        wait_for("three members up", || {
            let status = cluster_status(&agent, voter.http)?;
            let up = status["members"]
                .as_array()?
                .iter()
                .filter(|member| member["state"] == "up")
                .count();
            (up == NODES.len()).then_some(())
        });
    }
    wait_for("the single node", || cluster_status(&agent, single_http));
    for http in [voters[0].http, single_http] {
        let url = format!("http://{http}/v1/tenants");
        let created = call(&agent, "POST", &url, Some(&json!({"name": "bench"})));
        assert!(matches!(created, Some((201, _))), "tenant: {created:?}");
    }
    let status = cluster_status(&agent, voters[0].http).expect("status");
    let primary = status["primary"].as_str().expect("a primary").to_string();
    let primary_index = NODES.iter().position(|id| *id == primary).expect("voter");
    let backup = voters[(primary_index + 1) % NODES.len()].http;
    // The backup must have applied the tenant before it is written through.
    wait_for("the tenant on the backup", || {
        write_quotas(&agent, backup, 0).then_some(())
    });

    let mut group = c.benchmark_group("cluster_processes");
    group.sample_size(10);
    let mut round = 1;
    group.bench_function("single_node_catalog_write", |b| {
        b.iter_custom(|iterations| {
            let started = Instant::now();
            for _ in 0..iterations {
                round += 1;
                assert!(write_quotas(&agent, single_http, round));
            }
            started.elapsed()
        })
    });
    group.bench_function("three_processes_catalog_write_via_backup", |b| {
        b.iter_custom(|iterations| {
            let started = Instant::now();
            for _ in 0..iterations {
                round += 1;
                assert!(write_quotas(&agent, backup, round));
            }
            started.elapsed()
        })
    });
    group.finish();
    let mut single_samples = latencies(&agent, single_http, 1_000_000);
    let mut cluster_samples = latencies(&agent, backup, 2_000_000);

    // kill -9 of the primary: time until a write through a survivor commits.
    let survivor = voters[(primary_index + 1) % NODES.len()].http;
    let started = Instant::now();
    if let Some(mut child) = voters[primary_index].child.take() {
        child.kill().expect("kill -9");
        child.wait().expect("reaped");
    }
    let mut attempt = 3_000_000;
    wait_for("a write after the primary's death", || {
        attempt += 1;
        write_quotas(&agent, survivor, attempt).then_some(())
    });
    let failover = started.elapsed();

    // The killed voter restarted: time from its start to having applied every write.
    let target = cluster_status(&agent, survivor).expect("status")["commit"]
        .as_u64()
        .expect("commit");
    let started = Instant::now();
    let child = spawn(
        dir,
        voters[primary_index].id,
        voter_args(dir, &voters, primary_index),
    );
    voters[primary_index].child = Some(child);
    let restarted = voters[primary_index].http;
    wait_for("the restarted voter caught up", || {
        let status = cluster_status(&agent, restarted)?;
        (status["commit"].as_u64()? >= target).then_some(())
    });
    let rejoin = started.elapsed();

    // A new node without a vote: time from its process start to being an up member, as a
    // voter sees it.
    let started = Instant::now();
    let mut joiner = spawn(
        dir,
        JOINER,
        node_args(dir, &voters, JOINER, free_address(), free_address()),
    );
    wait_for("the new node up", || {
        let status = cluster_status(&agent, survivor)?;
        status["members"]
            .as_array()?
            .iter()
            .any(|member| member["node"] == JOINER && member["state"] == "up")
            .then_some(())
    });
    let join = started.elapsed();
    let _ = joiner.kill();
    let _ = joiner.wait();

    let (single_p50, single_p99) = (
        percentile(&mut single_samples, 0.5),
        percentile(&mut single_samples, 0.99),
    );
    let (cluster_p50, cluster_p99) = (
        percentile(&mut cluster_samples, 0.5),
        percentile(&mut cluster_samples, 0.99),
    );
    println!("\ncatalog write over HTTP, {SAMPLES} sequential (same run):");
    println!(
        "  one single-node process (one durable redb commit): p50 {single_p50:?}, p99 {single_p99:?}"
    );
    println!(
        "  three processes, written through a backup:         p50 {cluster_p50:?}, p99 {cluster_p99:?} \
         ({:.1}x / {:.1}x the single node)",
        cluster_p50.as_secs_f64() / single_p50.as_secs_f64(),
        cluster_p99.as_secs_f64() / single_p99.as_secs_f64()
    );
    println!("  kill -9 of the primary -> next write committed through a survivor: {failover:?}");
    println!("  killed voter restarted -> caught up (process start included): {rejoin:?}");
    println!("  new non-voting node started -> up member (process start included): {join:?}");

    for voter in &mut voters {
        if let Some(mut child) = voter.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    let _ = single.kill();
    let _ = single.wait();
}

fn main() {
    run_child_if_asked();
    let mut criterion = Criterion::default().configure_from_args();
    bench_cluster_processes(&mut criterion);
    criterion.final_summary();
}
