//! The metadata primary stalls (SIGSTOP) while clients add to counters through every node, new
//! counters among them (their shards allocated for the first time during the stall, by the new
//! primary's coordinator, while the stalled one still believes it holds the seat). When it
//! wakes, its coordinator is deposed and fenced, and no shard ever has two serving owners: each
//! counter's acknowledged values only grow, and afterwards every node reads the same value, no
//! smaller than the last one acknowledged. Each node is this test binary re-run as a child
//! (`tessera_tests::processes`).

use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
/// Client threads; each adds to its own counters, one at a time.
const CLIENTS: usize = 6;
/// Successful adds to a counter before its client moves on to a new counter.
const ADDS_PER_COUNTER: u64 = 3;
/// How long the primary stays stalled: well past the plane's view change (~0.3 s) and the
/// region leases, so shards are allocated by the new primary meanwhile.
const STALL: Duration = Duration::from_secs(8);

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by a_stalled_metadata_primary_never_makes_two_owners as its child processes"]
fn stall_child_node() {
    run_child_if_asked();
}

/// What one counter's client saw: the values its successful adds answered, in order.
type Acknowledged = BTreeMap<String, Vec<u64>>;

fn client(
    cluster: &Cluster,
    token: &str,
    me: usize,
    stop: &AtomicBool,
    seen: &Mutex<Acknowledged>,
) {
    let mut counter = 0;
    let mut node = me;
    while !stop.load(Ordering::Relaxed) {
        let id = format!("c-{me}-{counter}");
        node = (node + 1) % VOTERS.len();
        let url = format!("{}/v1/entities/counter/{id}/ask", cluster.url(node));
        let Some(reply) = post_json(&url, token, &json!({"Add": 1})) else {
            continue;
        };
        if reply.status != 200 {
            continue; // refused or unknown: the next try says more
        }
        let Some(value) = reply.json().as_u64() else {
            panic!("counter {id} answered {}", reply.body);
        };
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        let values = seen.entry(id).or_default();
        values.push(value);
        if values.len() as u64 >= ADDS_PER_COUNTER {
            counter += 1;
        }
    }
}

#[test]
fn a_stalled_metadata_primary_never_makes_two_owners() {
    let cluster = Cluster::new(&VOTERS, VOTERS.len(), "stall_child_node");
    for index in 0..VOTERS.len() {
        cluster.start(index);
    }
    let primary = eventually("a cluster of three with a primary", &cluster, || {
        let status = cluster_status(&cluster, 0)?;
        (members_up(&status) == VOTERS.len())
            .then(|| status["primary"].as_str().map(str::to_string))?
    });
    let token = eventually("a tenant", &cluster, || create_tenant(&cluster, 0, "acme"));
    deploy_counter(&cluster, 0, &token, "counter", "");
    for index in 0..VOTERS.len() {
        wait_bound(&cluster, index, &token, "counter", 1);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Acknowledged::new()));
    let stalled = cluster.index_of(&primary);
    std::thread::scope(|scope| {
        for me in 0..CLIENTS {
            let (cluster, token, stop, seen) = (&cluster, &token, &stop, &seen);
            scope.spawn(move || client(cluster, token, me, stop, seen));
        }
        eventually("adds acknowledged before the stall", &cluster, || {
            let count = seen.lock().map(|seen| seen.len()).unwrap_or(0);
            (count >= CLIENTS).then_some(())
        });
        cluster.pause(stalled);
        // The fault lasts this long; the clients go on meanwhile.
        std::thread::sleep(STALL);
        cluster.resume(stalled);
        let after = seen.lock().map(|seen| seen.len()).unwrap_or(0);
        eventually("new counters served after the stall", &cluster, || {
            let count = seen.lock().map(|seen| seen.len()).unwrap_or(0);
            (count >= after + CLIENTS).then_some(())
        });
        stop.store(true, Ordering::Relaxed);
    });

    let seen = seen.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for (id, values) in &seen {
        assert!(
            values.windows(2).all(|pair| pair[0] < pair[1]),
            "counter {id} answered {values:?}: two owners served it"
        );
    }
    // Every node reads each counter alike, and no acknowledged add is lost.
    for (id, values) in &seen {
        let last = *values.last().expect("at least one value");
        let agreed = agreed_counter(&cluster, &token, id);
        assert!(
            agreed >= last,
            "counter {id} reads {agreed}, acknowledged {last}"
        );
    }
    assert!(
        seen.len() > 2 * CLIENTS,
        "counters were created during and after the stall: {}",
        seen.len()
    );
}
