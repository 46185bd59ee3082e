//! The partition plane serves: three node processes, six partitions of three replicas each,
//! counters asked through every node. Their state is committed through the partitions' groups,
//! so when a node is killed (`kill -9`) and its disk is lost, and the operator removes it, the
//! counters it served come back on the others with every acknowledged add — where, with the
//! plane off, they restart empty. The type's entities are listed as before, and a backup
//! read from the partitions' replicas restores them into a fresh node. And a node stalled
//! (SIGSTOP) for 15 s while clients add through the others serves nothing stale when it wakes:
//! each counter's acknowledged values only grow, and every node then reads the same value, no
//! smaller than the last acknowledged. A node killed and left dead (not removed) does not keep
//! its counters waiting: the others serve them, with every acknowledged add, once their
//! partitions' new primaries take their shards over. Each node is this test binary re-run as a child
//! (`tessera_tests::processes`).

use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use std::process::ExitCode;
use tessera_tests::cluster::*;
use tessera_tests::partition_plane::{PARTITIONS, groups_ready};
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const COUNTERS: usize = 12;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by the tests of this file as their child processes"]
fn partitions_served_child_node() {
    run_child_if_asked();
}

fn cli(args: &[&str]) -> ExitCode {
    tessera_host::cli::run_from(std::iter::once("tessera").chain(args.iter().copied()))
}

/// Counter `id`'s value read through node `index`, once it answers.
fn value_through(cluster: &Cluster, index: usize, token: &str, id: usize) -> u64 {
    let url = format!("{}/v1/entities/counter/c{id}/ask", cluster.url(index));
    let reply = eventually(&format!("c{id} read through node {index}"), cluster, || {
        post_json(&url, token, &json!("Get")).filter(|reply| reply.status == 200)
    });
    reply.json().as_u64().expect("a counter's value")
}

/// Three nodes with the partition plane serving, every partition's group with a primary, and
/// the counter deployed and bound everywhere for tenant `acme`; the cluster and the token.
fn serving_cluster() -> (Cluster, String) {
    let cluster = Cluster::new(&NODES, NODES.len(), "partitions_served_child_node")
        .with_partitions(PARTITIONS);
    cluster.start_until_up(NODES.len());
    for index in 0..NODES.len() {
        eventually("every partition's group has a primary", &cluster, || {
            groups_ready(&cluster, index)
        });
    }
    let token = eventually("a tenant", &cluster, || create_tenant(&cluster, 0, "acme"));
    deploy_counter(&cluster, 0, &token, "counter", "");
    for index in 0..NODES.len() {
        wait_bound(&cluster, index, &token, "counter", 1);
    }
    (cluster, token)
}

#[test]
fn a_killed_node_whose_disk_is_lost_takes_no_acknowledged_add_with_it() {
    let (cluster, token) = serving_cluster();

    // Adds through every node, one at a time: each answers the previous value plus its amount.
    let mut acknowledged: BTreeMap<usize, u64> = BTreeMap::new();
    for id in 0..COUNTERS {
        acknowledged.insert(id, value_through(&cluster, id % NODES.len(), &token, id));
    }
    for round in 0..3 {
        for id in 0..COUNTERS {
            let add = (round + id) as u64 % 5 + 1;
            let through = (round + id) % NODES.len();
            let reply = ask_counter(&cluster, through, &token, &format!("c{id}"), add);
            assert_eq!(
                reply.status, 200,
                "c{id} through node {through}: {}",
                reply.body
            );
            let expected = acknowledged[&id] + add;
            assert_eq!(reply.json(), json!(expected), "c{id} after adding {add}");
            acknowledged.insert(id, expected);
        }
    }

    // n3 dies with its disk; the operator removes it (its shards move to the others).
    let victim = 2;
    cluster.kill(victim);
    cluster.lose_disk(victim);
    declare_lost(&cluster, 0, NODES[victim]);

    // Every counter answers again with exactly what was acknowledged: nothing lost (the
    // victim's counters included), nothing applied twice.
    for id in 0..COUNTERS {
        let through = id % 2;
        assert_eq!(
            value_through(&cluster, through, &token, id),
            acknowledged[&id],
            "c{id} read through node {through} after n3's loss"
        );
    }
    // Listed as before: their state is in the partitions' replicas.
    let page = get(
        &format!("{}/v1/types/counter/entities", cluster.url(1)),
        &token,
    )
    .expect("the listing answers")
    .json();
    assert_eq!(page["total"], json!(COUNTERS), "{page}");
    // A backup reads each shard from its owner's replica of its partition. Restored into a
    // fresh node with the plane off, and into a fresh three-node cluster whose plane serves
    // (each part written through its partition's group), every counter holds its
    // acknowledged value.
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("partitioned.tsrbak").display().to_string();
    let backed_up = cli(&[
        "backup",
        "--out",
        &file,
        "--url",
        &cluster.url(0),
        "--token",
        ADMIN,
    ]);
    assert_eq!(backed_up, ExitCode::SUCCESS, "the backup succeeded");
    let single = Cluster::new(&["b1"], 1, "partitions_served_child_node");
    single.start_until_up(1);
    let plane = Cluster::new(&["p1", "p2", "p3"], 3, "partitions_served_child_node")
        .with_partitions(PARTITIONS);
    plane.start_until_up(3);
    for index in 0..3 {
        eventually("every partition's group has a primary", &plane, || {
            groups_ready(&plane, index)
        });
    }
    for target in [&single, &plane] {
        let restored = cli(&["restore", &file, "--url", &target.url(0), "--token", ADMIN]);
        assert_eq!(restored, ExitCode::SUCCESS, "the restore succeeded");
        for id in 0..COUNTERS {
            assert_eq!(
                value_through(target, id % target.members.len(), &token, id),
                acknowledged[&id],
                "c{id} restored from the partitions' replicas"
            );
        }
    }
    // And they go on from there.
    for id in 0..COUNTERS {
        let reply = ask_counter(&cluster, id % 2, &token, &format!("c{id}"), 1);
        assert_eq!(reply.status, 200, "c{id}: {}", reply.body);
        assert_eq!(reply.json(), json!(acknowledged[&id] + 1), "c{id}");
    }
}

/// Client threads of the stall test; each adds to its own counters, one add at a time.
const CLIENTS: usize = 4;
/// Counters each client adds to.
const COUNTERS_PER_CLIENT: usize = 3;
/// How long the stalled node stays stopped: past its leases and its groups' view changes.
const STALL: std::time::Duration = std::time::Duration::from_secs(15);

/// Each counter's acknowledged values, in the order its client saw them.
type Acknowledged = BTreeMap<String, Vec<u64>>;

/// Adds 1 to client `me`'s counters in turn, through the nodes other than `stalled`, until
/// `stop`; records every acknowledged value.
fn client(
    cluster: &Cluster,
    token: &str,
    me: usize,
    stalled: usize,
    stop: &std::sync::atomic::AtomicBool,
    seen: &std::sync::Mutex<Acknowledged>,
) {
    let through: Vec<usize> = (0..NODES.len()).filter(|index| *index != stalled).collect();
    let mut n = 0;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let id = format!("s{me}-{}", n % COUNTERS_PER_CLIENT);
        let url = format!(
            "{}/v1/entities/counter/{id}/ask",
            cluster.url(through[n % 2])
        );
        n += 1;
        let Some(reply) = post_json(&url, token, &json!({"Add": 1})) else {
            continue;
        };
        if reply.status != 200 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            continue;
        }
        let value = reply.json().as_u64().expect("a counter's value");
        if let Ok(mut seen) = seen.lock() {
            seen.entry(id).or_default().push(value);
        }
    }
}

#[test]
fn a_stalled_node_serves_no_stale_state_when_it_wakes() {
    let (cluster, token) = serving_cluster();
    // The stalled node serves some counters and leads some partitions first: read every
    // counter through it, so its instances hold values the others will then move past.
    let stalled = 2;
    for me in 0..CLIENTS {
        for counter in 0..COUNTERS_PER_CLIENT {
            let url = format!(
                "{}/v1/entities/counter/s{me}-{counter}/ask",
                cluster.url(stalled)
            );
            eventually("a counter read through the node to stall", &cluster, || {
                post_json(&url, &token, &json!("Get")).filter(|reply| reply.status == 200)
            });
        }
    }

    let stop = std::sync::atomic::AtomicBool::new(false);
    let seen = std::sync::Mutex::new(Acknowledged::new());
    std::thread::scope(|scope| {
        for me in 0..CLIENTS {
            let (cluster, token, stop, seen) = (&cluster, &token, &stop, &seen);
            scope.spawn(move || client(cluster, token, me, stalled, stop, seen));
        }
        let acknowledged = || {
            seen.lock()
                .map(|seen| seen.values().map(Vec::len).sum())
                .unwrap_or(0)
        };
        eventually("adds acknowledged before the stall", &cluster, || {
            (acknowledged() >= CLIENTS).then_some(())
        });
        cluster.pause(stalled);
        std::thread::sleep(STALL);
        let during = seen.lock().map(|seen| seen.clone()).unwrap_or_default();
        cluster.resume(stalled);
        // Until every counter, those the stalled node served included, has been added to since.
        eventually("every counter added to after the stall", &cluster, || {
            let seen = seen.lock().ok()?;
            let all = seen.len() == CLIENTS * COUNTERS_PER_CLIENT
                && seen
                    .iter()
                    .all(|(id, values)| values.len() > during.get(id).map_or(0, Vec::len));
            all.then_some(())
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });

    let seen = seen
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    assert_eq!(
        seen.len(),
        CLIENTS * COUNTERS_PER_CLIENT,
        "every counter was added to"
    );
    for (id, values) in &seen {
        assert!(
            values.windows(2).all(|pair| pair[0] < pair[1]),
            "{id} answered {values:?}: a stale copy served it"
        );
    }
    // Every node, the woken one included, reads each counter alike, and no acknowledged add
    // is lost.
    for (id, values) in &seen {
        let last = *values.last().expect("at least one value");
        let agreed = agreed_counter(&cluster, &token, id);
        assert!(agreed >= last, "{id} reads {agreed}, acknowledged {last}");
    }
}

#[test]
fn a_killed_nodes_counters_are_served_by_the_others_without_waiting_for_it() {
    let (cluster, token) = serving_cluster();
    let mut acknowledged: BTreeMap<usize, u64> = BTreeMap::new();
    for id in 0..COUNTERS {
        let reply = ask_counter(&cluster, id % NODES.len(), &token, &format!("c{id}"), 2);
        assert_eq!(reply.status, 200, "c{id}: {}", reply.body);
        acknowledged.insert(id, reply.json().as_u64().expect("a value"));
    }

    // n3 is killed and stays dead: nobody removes it. Its counters move to the others as soon
    // as their partitions elect new primaries, not when it comes back. Each counter is read
    // through a survivor by a client of its own with a short ask timeout (an ask that reached
    // n3 before the kill ends in a timeout, its outcome unknown); when each answers again is
    // what the failover costs.
    let victim = 2;
    let killed = std::time::Instant::now();
    cluster.kill(victim);
    let mut served: Vec<(usize, u64, f64)> = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..COUNTERS)
            .map(|id| {
                let (cluster, token) = (&cluster, &token);
                scope.spawn(move || {
                    let url = format!(
                        "{}/v1/entities/counter/c{id}/ask?timeout_ms=500",
                        cluster.url(id % 2)
                    );
                    let reply = eventually(&format!("c{id} served again"), cluster, || {
                        post_json(&url, token, &json!("Get")).filter(|reply| reply.status == 200)
                    });
                    let value = reply.json().as_u64().expect("a counter's value");
                    (id, value, killed.elapsed().as_secs_f64())
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|reader| reader.join().expect("a reader"))
            .collect()
    });
    for (id, value, _) in &served {
        assert_eq!(*value, acknowledged[id], "c{id} after n3's death");
    }
    served.sort_by(|left, right| left.2.total_cmp(&right.2));
    eprintln!(
        "counters served again after the kill: p50 {:.2} s, max {:.2} s",
        served[COUNTERS / 2].2,
        served[COUNTERS - 1].2
    );

    // n3 comes back: once caught up it asks for the primary's role in the partitions it is the
    // preferred primary of, and serves their counters again (else it would lead nothing, and
    // serve nothing, until another node failed).
    cluster.start(victim);
    let url = format!("{}/v1/cluster/partitions", cluster.url(victim));
    eventually("n3 leads its preferred partitions again", &cluster, || {
        let answer = get(&url, ADMIN)?.json();
        let groups = answer["partitions"].as_array()?;
        let preferred: Vec<&Json> = groups
            .iter()
            .filter(|here| here["replicas"][0] == NODES[victim])
            .collect();
        let leads = !preferred.is_empty()
            && preferred
                .iter()
                .all(|here| here["status"]["primary"] == NODES[victim]);
        leads.then_some(())
    });
    eventually("n3 serves counters again", &cluster, || {
        let shards = get(&format!("{}/v1/cluster/shards", cluster.url(0)), ADMIN)?.json();
        let owns = shards["shards"]
            .as_array()?
            .iter()
            .any(|shard| shard["node"] == NODES[victim]);
        owns.then_some(())
    });
    for id in 0..COUNTERS {
        assert_eq!(
            value_through(&cluster, victim, &token, id),
            acknowledged[&id],
            "c{id} through the returned n3"
        );
    }
}
