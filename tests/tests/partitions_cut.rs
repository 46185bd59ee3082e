//! A node cut off from the others by its links, not by its death: three node processes with
//! six partitions of three replicas, each node's cluster traffic through a proxy in front of
//! it (`tessera_tests::proxy`, the address it advertises), while the test reaches every
//! node's HTTP API directly. The node leading the most partitions is isolated both ways: its
//! own proxy is cut, and the others' refuse the connections it dials. The majority then serves
//! every counter, those of the partitions it led included, with every acknowledged add; the
//! isolated node acknowledges no add and answers no read with a value older than the
//! majority's latest (it answers errors); healed, it rejoins and every node reads the same
//! values. Each node is this test binary re-run as a child (`tessera_tests::processes`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tessera_tests::cluster::*;
use tessera_tests::partition_plane::*;
use tessera_tests::processes::run_child_if_asked;
use tessera_tests::proxy::Proxy;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const COUNTERS: usize = 12;
/// What the isolated node is asked to add: larger than any sum of the majority's adds, so an
/// add of it that landed would show in every later value.
const ISOLATED_ADD: u64 = 1_000_000;
/// Counters the cut-off node is asked about, each by a client of its own.
const PROBED: usize = 4;
/// Between two asks of a client of the cut-off node.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// Rounds of adds through the majority while the node is cut off.
const MAJORITY_ROUNDS: usize = 3;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by the tests of this file as their child processes"]
fn partitions_cut_child_node() {
    run_child_if_asked();
}

/// Cuts node `isolated` off: its proxy closes and refuses every connection, the others'
/// those its process dials.
fn isolate(cluster: &Cluster, proxies: &[Proxy], isolated: usize) {
    let pid = cluster.pid(isolated).expect("the node to cut off runs");
    for (index, proxy) in proxies.iter().enumerate() {
        if index == isolated {
            proxy.cut();
        } else {
            proxy.cut_from(pid);
        }
    }
}

/// Adds to counter `id` through the majority's nodes, starting at the `turn`th, until one
/// acknowledges it; every outcome is checked against `ledger`.
/// The majority's asks' timeout after the cut.
const MAJORITY_ASK_TIMEOUT_MS: u64 = 1_000;

fn majority_add(
    cluster: &Cluster,
    token: &str,
    ledger: &Mutex<Ledger>,
    majority: &[usize],
    id: &str,
    turn: usize,
) {
    let add = turn as u64 % 5 + 1;
    let mut attempt = turn;
    eventually(&format!("{id} served by the majority"), cluster, || {
        let through = majority[attempt % majority.len()];
        attempt += 1;
        // A short ask timeout: an add forwarded to the cut-off node before its shards moved
        // ends after it (outcome unknown), so the window measured is the failover's, not
        // that of one unlucky ask's default 5 s.
        let outcome = add_within(
            cluster,
            through,
            token,
            id,
            add,
            Some(MAJORITY_ASK_TIMEOUT_MS),
        );
        ledger
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .record(id, add, outcome);
        matches!(outcome, Outcome::Acknowledged(_)).then_some(())
    });
}

/// What the isolated node answered while cut off.
#[derive(Debug, Default)]
struct Isolated {
    /// Reads that answered a value, with the value acknowledged when each was sent.
    values: Vec<(String, u64, u64)>,
    /// Answers by status (`0`: none).
    statuses: BTreeMap<u16, usize>,
}

/// Reads, then adds [`ISOLATED_ADD`] to, counter `id` through node `isolated`, `rounds`
/// times; checks each answer against `ledger` as it was when the ask was sent.
fn probe_isolated(
    cluster: &Cluster,
    token: &str,
    isolated: usize,
    id: &str,
    ledger: &Mutex<Ledger>,
    seen: &Mutex<Isolated>,
    stop: &std::sync::atomic::AtomicBool,
) {
    let lock = |ledger: &Mutex<Ledger>| {
        ledger
            .lock()
            .map(|ledger| ledger.value(id))
            .unwrap_or_else(|poisoned| poisoned.into_inner().value(id))
    };
    let url = format!("{}/v1/entities/counter/{id}/ask", cluster.url(isolated));
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let before = lock(ledger);
        let read = post_json(&url, token, &serde_json::json!("Get"));
        let mut seen = seen.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *seen
            .statuses
            .entry(read.as_ref().map_or(0, |reply| reply.status))
            .or_default() += 1;
        if let Some(value) = read
            .filter(|reply| reply.status == 200)
            .and_then(|reply| reply.json().as_u64())
        {
            seen.values.push((id.to_string(), value, before));
        }
        drop(seen);
        let outcome = add_through(cluster, isolated, token, id, ISOLATED_ADD);
        assert!(
            !matches!(outcome, Outcome::Acknowledged(_)),
            "the cut-off node acknowledged an add to {id}: {outcome:?}"
        );
        if outcome == Outcome::Unknown {
            ledger
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .record(id, ISOLATED_ADD, outcome);
        }
        // Asked again shortly, not in a busy loop: the refusals are immediate.
        std::thread::sleep(PROBE_INTERVAL);
    }
}

#[test]
fn a_node_cut_off_from_the_others_serves_nothing_and_the_majority_serves_everything() {
    // Every node's cluster traffic through a proxy in front of it.
    let mut cluster = Cluster::new(&NODES, NODES.len(), "partitions_cut_child_node");
    let proxies: Vec<Proxy> = cluster
        .members
        .iter()
        .map(|member| Proxy::start(member.cluster))
        .collect();
    for (index, proxy) in proxies.iter().enumerate() {
        cluster = cluster.with_advertised(index, proxy.address());
    }
    let (cluster, token) = serving_cluster(cluster);

    let mut ledger = Ledger::read_through(&cluster, 0, &token, COUNTERS);
    add_rounds(&cluster, &token, &mut ledger, &[0, 1, 2], 0..2);

    // The node that leads the most partitions is cut off; among equals the first, which
    // dials its peers (a node dials those with greater ids), so the others' proxies must
    // refuse it too.
    let led = led_by(&cluster);
    let (isolated, isolated_led) = led
        .iter()
        .max_by_key(|(index, partitions)| (partitions.len(), std::cmp::Reverse(**index)))
        .map(|(index, partitions)| (*index, partitions.clone()))
        .expect("three nodes");
    assert!(!isolated_led.is_empty(), "nobody leads: {led:?}");
    let majority: Vec<usize> = (0..NODES.len())
        .filter(|index| *index != isolated)
        .collect();
    let partitions = eventually("the counters' partitions", &cluster, || {
        counter_partitions(&cluster, majority[0], &ledger.ids())
    });
    let owners = eventually("the counters' owners", &cluster, || {
        counters_served_by(&cluster, majority[0], &ledger.ids())
    });
    eprintln!(
        "cutting off {} (leads partitions {isolated_led:?}; the counters' partitions: \
         {partitions:?}, owners: {owners:?})",
        NODES[isolated]
    );
    let cut = Instant::now();
    isolate(&cluster, &proxies, isolated);
    let pid = cluster.pid(isolated).expect("the cut-off node runs");
    for proxy in &proxies {
        assert_eq!(
            proxy.connections_from(pid),
            0,
            "the cut-off node's links closed"
        );
    }
    assert_eq!(
        proxies[isolated].connections(),
        0,
        "no link to the cut-off node"
    );

    // The majority serves every counter; the cut-off node is probed all along.
    let ledger = Mutex::new(ledger);
    let seen = Mutex::new(Isolated::default());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut served_again: BTreeMap<String, Duration> = BTreeMap::new();
    let ids = ledger
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .ids();
    std::thread::scope(|scope| {
        // Probed: counters of the partitions it led first.
        let mut probed: Vec<&String> = ids.iter().collect();
        probed.sort_by_key(|id| !isolated_led.contains(&partitions[*id]));
        for id in probed.into_iter().take(PROBED) {
            let (cluster, token, ledger, seen, stop) = (&cluster, &token, &ledger, &seen, &stop);
            scope.spawn(move || probe_isolated(cluster, token, isolated, id, ledger, seen, stop));
        }
        // Every counter at once, each timed from the cut to its first acknowledged add.
        let first: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(number, id)| {
                let (cluster, token, ledger, majority) = (&cluster, &token, &ledger, &majority);
                scope.spawn(move || {
                    majority_add(cluster, token, ledger, majority, id, number);
                    (id.clone(), cut.elapsed())
                })
            })
            .collect();
        for served in first {
            match served.join() {
                Ok((id, after)) => {
                    served_again.insert(id, after);
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        for round in 1..MAJORITY_ROUNDS {
            for (number, id) in ids.iter().enumerate() {
                majority_add(&cluster, &token, &ledger, &majority, id, round + number);
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let window = |counted: &dyn Fn(&String) -> bool| {
        served_again
            .iter()
            .filter(|(id, _)| counted(id))
            .map(|(_, after)| after.as_secs_f64())
            .fold(0.0, f64::max)
    };
    let cut_off = NODES[isolated];
    let served_by_it = |id: &String| owners[id] == cut_off;
    let led_by_it = |id: &String| isolated_led.contains(&partitions[id]);
    eprintln!(
        "after the cut, the majority served every counter within {:.1} s: those the cut-off \
         node served within {:.1} s, the others of the partitions it led within {:.1} s, the \
         rest within {:.1} s (each counter: {served_again:?})",
        window(&|_| true),
        window(&served_by_it),
        window(&|id| !served_by_it(id) && led_by_it(id)),
        window(&|id| !served_by_it(id) && !led_by_it(id)),
    );

    // The cut was real both ways: each side sees the other unreachable.
    eventually("each side sees the other unreachable", &cluster, || {
        let isolated_view = cluster_status(&cluster, isolated)?;
        let majority_view = cluster_status(&cluster, majority[0])?;
        let apart = majority
            .iter()
            .all(|index| reachable(&isolated_view, NODES[*index]) == Some(false))
            && reachable(&majority_view, NODES[isolated]) == Some(false);
        apart.then_some(())
    });

    // The cut-off node acknowledged nothing (checked as it answered) and read nothing older
    // than the majority's latest.
    let seen = seen
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    eprintln!(
        "the cut-off node answered (status: count, 0 = no answer): {:?}; values: {:?}",
        seen.statuses, seen.values
    );
    assert!(
        seen.statuses.values().sum::<usize>() > 0,
        "the cut-off node was asked"
    );
    assert!(
        seen.statuses
            .keys()
            .all(|status| [0, 200, 503, 504].contains(status)),
        "the cut-off node answers unavailable or a timeout: {:?}",
        seen.statuses
    );
    for (id, value, acknowledged) in &seen.values {
        assert!(
            value >= acknowledged,
            "the cut-off node read {id} as {value}; the majority had acknowledged {acknowledged}"
        );
    }

    // Healed, it rejoins: every node reads each counter alike, at its last acknowledged value.
    proxies.iter().for_each(Proxy::heal);
    let healed = Instant::now();
    eventually(
        "the healed node runs every group with a primary",
        &cluster,
        || groups_ready(&cluster, isolated),
    );
    let mut ledger = ledger
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for id in ledger.ids() {
        let agreed = agreed_counter(&cluster, &token, &id);
        ledger.check_read(&id, agreed, "every node");
    }
    eprintln!(
        "all three nodes read the same values {:.1} s after the heal",
        healed.elapsed().as_secs_f64()
    );
    // And adds through the healed node are acknowledged again.
    add_rounds(&cluster, &token, &mut ledger, &[isolated], 0..1);
}
