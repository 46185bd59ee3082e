//! Large plugins never wedge the metadata plane (issue 33, finding 1). Three voters; a tenant
//! whose `plugin_bytes_max` is at its 64 MiB ceiling deploys components of ~63 MiB (the counter
//! padded with a custom section), each through another node, until its total plugin quota
//! refuses one with `quota_exceeded`, while another tenant's counters keep answering asks
//! through every node and the plane keeps a primary and commits. Then every node is killed and
//! started again: both tenants' entities serve through every node, including a version
//! deployed through one node asked through another. And a voter down while a version is
//! deployed (the other two hold its plugin, a majority) fetches the plugin from them when it
//! comes back, and runs it. Each node is this test binary re-run as a child
//! (`tessera_tests::processes`).

use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
/// Padding of each large plugin: with the counter it stays under the 64 MiB upload bound.
const PADDING_BYTES: usize = 63 << 20;
/// The large tenant's total plugin bytes: two large plugins fit, a third does not.
const TOTAL_BYTES: usize = 2 * (64 << 20) + (32 << 20);
/// The longest the other tenant's asks may fail in a row (a deploy must not stall them).
const ASK_OUTAGE_MAX: Duration = Duration::from_secs(3);
/// The longest the plane may go without a primary, or without committing, meanwhile: each node
/// commits a lease renewal every 1.5 s, and a lease lasts 6 s, so a plane quiet for longer than
/// this is one whose leases are running out.
const PLANE_OUTAGE_MAX: Duration = Duration::from_secs(4);

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by large_plugins_never_wedge_the_plane_and_survive_a_restart as its children"]
fn plugins_child_node() {
    run_child_if_asked();
}

/// The counter plugin with a custom section of `padding` bytes named after `tag` appended (a
/// component may end with custom sections; the runtime skips them).
fn padded_counter(padding: usize, tag: usize) -> Vec<u8> {
    let mut plugin = std::fs::read(tessera_tests::COUNTER).expect("the counter plugin");
    let name = format!("padding-{tag}");
    let mut section = leb128(name.len());
    section.extend_from_slice(name.as_bytes());
    section.resize(section.len() + padding, 0xA5);
    plugin.push(0); // custom section
    plugin.extend(leb128(section.len()));
    plugin.extend(section);
    plugin
}

fn leb128(mut value: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            bytes.push(byte);
            return bytes;
        }
        bytes.push(byte | 0x80);
    }
}

/// What the quiet tenant's asker and the plane's watcher saw while the large deploys ran.
#[derive(Default)]
struct Seen {
    asks_ok: u64,
    asks_failed: u64,
    /// The longest stretch of failed asks.
    ask_outage: Duration,
    /// The longest stretch with no primary, or no new commit, on node 0.
    plane_outage: Duration,
    commits: Vec<u64>,
}

fn ask_quietly(cluster: &Cluster, token: &str, stop: &AtomicBool, seen: &Mutex<Seen>) {
    let mut last_ok = Instant::now();
    let mut round = 0usize;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        let node = round % VOTERS.len();
        let id = format!("quiet-{}", round % 8);
        let url = format!("{}/v1/entities/counter/{id}/ask", cluster.url(node));
        let ok = post_json(&url, token, &json!({"Add": 1})).is_some_and(|reply| {
            if reply.status != 200 {
                eprintln!(
                    "quiet ask through node {node}: {} {}",
                    reply.status, reply.body
                );
            }
            reply.status == 200
        });
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        if ok {
            seen.asks_ok += 1;
            last_ok = Instant::now();
        } else {
            seen.asks_failed += 1;
            seen.ask_outage = seen.ask_outage.max(last_ok.elapsed());
        }
        drop(seen);
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn watch_plane(cluster: &Cluster, stop: &AtomicBool, seen: &Mutex<Seen>) {
    let (mut last_good, mut last_commit) = (Instant::now(), 0);
    while !stop.load(Ordering::Relaxed) {
        if let Some(status) = cluster_status(cluster, 0) {
            let commit = status["commit"].as_u64().unwrap_or(0);
            if status["primary"].is_string() && commit > last_commit {
                last_good = Instant::now();
                last_commit = commit;
            }
            let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            seen.commits.push(commit);
            seen.plane_outage = seen.plane_outage.max(last_good.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops the background threads when dropped, so a failed assertion inside the thread scope
/// ends the test instead of waiting for them forever.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn deploy(cluster: &Cluster, node: usize, token: &str, plugin: Vec<u8>) -> Reply {
    let url = format!("{}/v1/types/big/versions", cluster.url(node));
    request("POST", &url, token, Some(("application/wasm", plugin))).expect("deploy answered")
}

fn ask(cluster: &Cluster, node: usize, token: &str, entity_type: &str, id: &str) -> Option<u64> {
    let url = format!("{}/v1/entities/{entity_type}/{id}/ask", cluster.url(node));
    let reply = post_json(&url, token, &json!({"Add": 1}))?;
    if reply.status != 200 {
        eprintln!(
            "{entity_type}/{id} through node {node}: {} {}",
            reply.status, reply.body
        );
    }
    (reply.status == 200).then(|| reply.json().as_u64())?
}

#[test]
fn large_plugins_never_wedge_the_plane_and_survive_a_restart() {
    let cluster = Cluster::new(&VOTERS, VOTERS.len(), "plugins_child_node");
    cluster.start_until_up(VOTERS.len());
    let quiet = eventually("a quiet tenant", &cluster, || {
        create_tenant(&cluster, 0, "quiet")
    });
    deploy_counter(&cluster, 0, &quiet, "counter", "");
    let quotas = json!({"plugin_bytes_max": 64 << 20, "plugin_bytes_total_max": TOTAL_BYTES});
    let created = post_json(
        &format!("{}/v1/tenants", cluster.url(0)),
        ADMIN,
        &json!({"name": "large", "quotas": quotas}),
    )
    .expect("the node answers");
    assert_eq!(created.status, 201, "{}", created.body);
    let large = created.json()["token"]
        .as_str()
        .expect("a token")
        .to_string();
    for index in 0..VOTERS.len() {
        wait_bound(&cluster, index, &quiet, "counter", 1);
    }

    let stop = AtomicBool::new(false);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut deployed = Vec::new();
    std::thread::scope(|scope| {
        scope.spawn(|| ask_quietly(&cluster, &quiet, &stop, &seen));
        scope.spawn(|| watch_plane(&cluster, &stop, &seen));
        let _stop = StopOnDrop(&stop);
        for attempt in 0..4 {
            let node = attempt % VOTERS.len();
            let started = Instant::now();
            let reply = deploy(
                &cluster,
                node,
                &large,
                padded_counter(PADDING_BYTES, attempt),
            );
            eprintln!(
                "large deploy {attempt} through node {node}: {} in {:?}",
                reply.status,
                started.elapsed()
            );
            if reply.status == 429 {
                assert_eq!(
                    reply.json()["error"]["code"],
                    "quota_exceeded",
                    "{}",
                    reply.body
                );
                break;
            }
            assert_eq!(reply.status, 201, "large deploy {attempt}: {}", reply.body);
            deployed.push(node);
        }
        // The third voter fetches the last version after the commit; the asks go on meanwhile.
        for index in 0..VOTERS.len() {
            wait_bound(&cluster, index, &large, "big", deployed.len() as u64);
        }
    });
    assert_eq!(
        deployed,
        vec![0, 1],
        "two large plugins fit the quota, the third is refused"
    );

    let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    eprintln!(
        "quiet asks: {} ok, {} failed, longest outage {:?}; plane outage {:?}",
        seen.asks_ok, seen.asks_failed, seen.ask_outage, seen.plane_outage
    );
    assert!(
        seen.asks_ok > 20,
        "the quiet tenant was served: {}",
        seen.asks_ok
    );
    assert!(
        seen.ask_outage <= ASK_OUTAGE_MAX,
        "the quiet tenant's asks failed for {:?}",
        seen.ask_outage
    );
    assert!(
        seen.plane_outage <= PLANE_OUTAGE_MAX,
        "the plane had no primary or did not commit for {:?}",
        seen.plane_outage
    );
    let (first, last) = (seen.commits.first(), seen.commits.last());
    assert!(
        first < last,
        "the commit number advanced: {first:?} -> {last:?}"
    );
    drop(seen);

    // A version deployed through node 1 (the active one), asked through node 2.
    let before = eventually("the large counter through node 2", &cluster, || {
        ask(&cluster, 2, &large, "big", "b-1")
    });

    for index in 0..VOTERS.len() {
        cluster.kill(index);
    }
    for index in 0..VOTERS.len() {
        cluster.start(index);
    }
    for index in 0..VOTERS.len() {
        eventually("every member up after the restart", &cluster, || {
            let status = cluster_status(&cluster, index)?;
            (members_up(&status) == VOTERS.len()).then_some(())
        });
    }
    for index in 0..VOTERS.len() {
        let quiet_value = eventually("a quiet counter after the restart", &cluster, || {
            ask(&cluster, index, &quiet, "counter", "after")
        });
        assert!(quiet_value >= 1);
        let large_value = eventually("the large counter after the restart", &cluster, || {
            ask(&cluster, index, &large, "big", "b-1")
        });
        assert!(
            large_value > before,
            "b-1 kept its state: {large_value} after {before}"
        );
    }
}

#[test]
fn a_voter_down_during_a_deploy_fetches_the_plugin_when_it_returns() {
    let cluster = Cluster::new(&VOTERS, VOTERS.len(), "plugins_child_node");
    cluster.start_until_up(VOTERS.len());
    let token = eventually("a tenant", &cluster, || create_tenant(&cluster, 0, "acme"));
    cluster.kill(2);
    // Held by n1 and n2, a majority of the voters: committed without n3.
    let plugin = padded_counter(8 << 20, 0);
    let url = format!("{}/v1/types/counter/versions", cluster.url(0));
    let reply = eventually("a deploy without n3", &cluster, || {
        let reply = request(
            "POST",
            &url,
            &token,
            Some(("application/wasm", plugin.clone())),
        )?;
        (reply.status == 201).then_some(reply)
    });
    assert_eq!(reply.json()["version"], 1, "{}", reply.body);
    cluster.start(2);
    // n3 replays the deploy (a hash and a size), lacks the bytes, and fetches them.
    wait_bound(&cluster, 2, &token, "counter", 1);
    for id in 0..8 {
        let value = eventually("a counter through n3", &cluster, || {
            ask(&cluster, 2, &token, "counter", &format!("c-{id}"))
        });
        assert_eq!(value, 1);
    }
    let log = cluster.log(2);
    assert!(
        log.contains("plugin fetched from a peer"),
        "n3 fetched the plugin:\n{log}"
    );
}
