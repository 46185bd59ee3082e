//! Failover of the partition plane after `kill -9`, beside what a user has without it, in the
//! same run: three `tessera node` processes, twelve counters added to through every node;
//! then `kill -9` of the node that leads the most partitions (the plane on: six partitions of
//! three replicas) or owns the most counters (the plane off: state on the owners' disks). The
//! time measured is from the kill to the moment every counter answers its last acknowledged
//! value again through a survivor, each counter polled by a client of its own with a 500 ms
//! ask timeout. With the plane on, the killed node stays dead; without it, nothing can serve
//! its counters until it is back, so it is restarted at once on its disk, as a supervisor
//! would: the baseline is that restart's cost (the best case of the plane off: a node that
//! does not come back, or comes back without its disk, is not covered by it). Once per run,
//! the plane off with the owner left dead shows what the plane is for: how many counters are
//! served within 10 s. Each round starts fresh clusters.
//!
//! Each node is this bench binary re-run as a child (`tessera_tests::processes`). Run:
//! `cargo bench -p tessera-benches --bench partition_failover` (five rounds of each);
//! `-- --test` runs one round of each as a smoke check.

use criterion::Criterion;
use serde_json::json;
use std::time::Instant;
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const PARTITIONS: usize = 6;
const COUNTERS: usize = 12;
/// Rounds of each side in a full run.
const ROUNDS: usize = 5;
/// The ask timeout each polling client uses after the kill.
const POLL_TIMEOUT_MS: u64 = 500;

/// A cluster with the counter deployed everywhere and `partitions` partitions (0: the plane
/// off).
fn ready_cluster(partitions: usize) -> (Cluster, String) {
    let cluster = Cluster::new(&NODES, NODES.len(), "bench-child").with_partitions(partitions);
    cluster.start_until_up(NODES.len());
    let token = eventually("a tenant", &cluster, || create_tenant(&cluster, 0, "acme"));
    deploy_counter(&cluster, 0, &token, "counter", "");
    for index in 0..NODES.len() {
        wait_bound(&cluster, index, &token, "counter", 1);
    }
    (cluster, token)
}

/// Adds 1 to every counter through every node in turn; each counter's acknowledged value.
fn load(cluster: &Cluster, token: &str) -> Vec<u64> {
    (0..COUNTERS)
        .map(|id| {
            let url = format!(
                "{}/v1/entities/counter/c{id}/ask",
                cluster.url(id % NODES.len())
            );
            let reply = eventually(&format!("c{id} added to"), cluster, || {
                post_json(&url, token, &json!({"Add": 1})).filter(|reply| reply.status == 200)
            });
            reply.json().as_u64().expect("a counter's value")
        })
        .collect()
}

/// How many entries of `of` name each node.
fn count_per_node(of: impl Iterator<Item = String>) -> Vec<usize> {
    let named: Vec<String> = of.collect();
    NODES
        .iter()
        .map(|node| named.iter().filter(|name| name.as_str() == *node).count())
        .collect()
}

fn most(counts: &[usize]) -> usize {
    (0..counts.len())
        .max_by_key(|index| counts[*index])
        .expect("nodes")
}

/// The node leading the most partitions, as node 0's replicas see their groups.
fn leader_of_most_partitions(cluster: &Cluster) -> usize {
    let counts = eventually("every partition's group has a primary", cluster, || {
        let url = format!("{}/v1/cluster/partitions", cluster.url(0));
        let answer = get(&url, ADMIN)?.json();
        let groups = answer["partitions"].as_array()?;
        let primaries: Vec<String> = groups
            .iter()
            .filter_map(|here| here["status"]["primary"].as_str().map(str::to_string))
            .collect();
        (primaries.len() == PARTITIONS).then(|| count_per_node(primaries.into_iter()))
    });
    most(&counts)
}

/// The node owning the most of the counters' shards (only theirs are allocated), as the
/// cluster's shard table says.
fn owner_of_most_counters(cluster: &Cluster) -> usize {
    let shards = eventually("the shard table", cluster, || {
        let url = format!("{}/v1/cluster/shards", cluster.url(0));
        let answer = get(&url, ADMIN)?.json();
        let owners: Vec<String> = answer["shards"]
            .as_array()?
            .iter()
            .filter(|shard| {
                shard["type"]
                    .as_str()
                    .is_some_and(|ty| ty.ends_with("counter"))
            })
            .filter_map(|shard| shard["node"].as_str().map(str::to_string))
            .collect();
        (!owners.is_empty()).then_some(owners)
    });
    most(&count_per_node(shards.into_iter()))
}

/// Seconds from `killed` until every counter answers `acknowledged` through a node other than
/// `victim`, each polled by a thread of its own.
fn until_all_served(
    cluster: &Cluster,
    token: &str,
    victim: usize,
    acknowledged: &[u64],
    killed: Instant,
) -> f64 {
    let survivors: Vec<usize> = (0..NODES.len()).filter(|index| *index != victim).collect();
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..COUNTERS)
            .map(|id| {
                let through = survivors[id % survivors.len()];
                let url = format!(
                    "{}/v1/entities/counter/c{id}/ask?timeout_ms={POLL_TIMEOUT_MS}",
                    cluster.url(through)
                );
                scope.spawn(move || {
                    let value = eventually(&format!("c{id} served again"), cluster, || {
                        let reply = post_json(&url, token, &json!("Get"))?;
                        (reply.status == 200).then(|| reply.json().as_u64())?
                    });
                    assert_eq!(value, acknowledged[id], "c{id} lost an acknowledged add");
                    killed.elapsed().as_secs_f64()
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|reader| reader.join().expect("a reader"))
            .fold(0.0, f64::max)
    })
}

/// One round with the plane on: the time until every counter is served again.
fn plane_round() -> f64 {
    let (cluster, token) = ready_cluster(PARTITIONS);
    let acknowledged = load(&cluster, &token);
    let victim = leader_of_most_partitions(&cluster);
    let killed = Instant::now();
    cluster.kill(victim);
    until_all_served(&cluster, &token, victim, &acknowledged, killed)
}

/// One round with the plane off: the owner of the most counters killed and restarted at once.
fn restart_round() -> f64 {
    let (cluster, token) = ready_cluster(0);
    let acknowledged = load(&cluster, &token);
    let victim = owner_of_most_counters(&cluster);
    let killed = Instant::now();
    cluster.kill(victim);
    cluster.start(victim);
    until_all_served(&cluster, &token, victim, &acknowledged, killed)
}

/// With the plane off, the owner of the most counters killed and left dead: how many counters
/// answer through the survivors within `wait` (those it owned wait for it, or for an operator
/// to remove it and its lease to run out).
fn left_dead_served(wait: std::time::Duration) -> (usize, usize) {
    let (cluster, token) = ready_cluster(0);
    load(&cluster, &token);
    let victim = owner_of_most_counters(&cluster);
    cluster.kill(victim);
    let deadline = Instant::now() + wait;
    let survivor = (victim + 1) % NODES.len();
    let mut served = std::collections::BTreeSet::new();
    while Instant::now() < deadline && served.len() < COUNTERS {
        for id in 0..COUNTERS {
            let url = format!(
                "{}/v1/entities/counter/c{id}/ask?timeout_ms={POLL_TIMEOUT_MS}",
                cluster.url(survivor)
            );
            if post_json(&url, &token, &json!("Get")).is_some_and(|reply| reply.status == 200) {
                served.insert(id);
            }
        }
    }
    (served.len(), COUNTERS)
}

fn percentile(samples: &mut [f64], at: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let index = ((samples.len() as f64 - 1.0) * at).round() as usize;
    samples[index]
}

fn main() {
    run_child_if_asked();
    let criterion = Criterion::default().configure_from_args();
    let rounds = if std::env::args().any(|arg| arg == "--test") {
        1
    } else {
        ROUNDS
    };
    let (mut plane, mut restart) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        plane.push(plane_round());
        restart.push(restart_round());
    }
    let (plane_p50, plane_max) = (percentile(&mut plane, 0.5), percentile(&mut plane, 1.0));
    let (restart_p50, restart_max) = (percentile(&mut restart, 0.5), percentile(&mut restart, 1.0));
    println!("\nkill -9 -> every counter served again, {rounds} round(s) of each (same run):");
    println!(
        "  partition plane, the leader of the most partitions killed: p50 {plane_p50:.2} s, max \
         {plane_max:.2} s"
    );
    println!(
        "  plane off, the owner of the most counters killed and restarted at once: p50 \
         {restart_p50:.2} s, max {restart_max:.2} s"
    );
    println!(
        "  plane / restart: p50 {:.2}x, max {:.2}x",
        plane_p50 / restart_p50,
        plane_max / restart_max
    );
    let wait = std::time::Duration::from_secs(10);
    let (served, all) = left_dead_served(wait);
    println!(
        "  plane off, the owner killed and left dead: {served} of {all} counters served within \
         {wait:?}"
    );
    criterion.final_summary();
}
