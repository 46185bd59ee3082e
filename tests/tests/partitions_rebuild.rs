//! A replica rebuilt from the others: three node processes with six partitions of three
//! replicas, counters added to through every node; one node is killed (`kill -9`), its data
//! directory deleted, and it is started again empty under the same name and address, not
//! removed from the cluster. Its replicas recover from their groups (they vote in nothing
//! before) and catch up with the primaries' commits, while every counter goes on from its last
//! acknowledged value. Then a *different* node — of the other two, the one leading the most
//! partitions — dies with its disk and is removed: each partition is left with a majority of
//! two of which one is the rebuilt replica, its partitions elect new primaries, the rebuilt
//! node among them, and every counter still answers its last acknowledged value, some served
//! by the rebuilt node from its own tables — the rebuilt replicas hold the data.
//! Each node is this test binary re-run as a child (`tessera_tests::processes`).

use serde_json::Value as Json;
use tessera_tests::cluster::*;
use tessera_tests::partition_plane::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const COUNTERS: usize = 12;
/// How long a lagging replica is watched between two rounds of adds that make it acknowledge.
const LAGGING_ROUND_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by the tests of this file as their child processes"]
fn partitions_rebuild_child_node() {
    run_child_if_asked();
}

/// Node `index`'s group of `partition`, as it reports it.
fn group_on(cluster: &Cluster, index: usize, partition: u64) -> Option<Json> {
    groups_here(cluster, index)?
        .into_iter()
        .find(|here| here["partition"].as_u64() == Some(partition))
}

/// Whether every partition placed on node `index` runs there, in contact with its primary,
/// and its commit has reached the commit of the primary's replica, which says this one lags
/// by nothing.
fn caught_up(cluster: &Cluster, index: usize) -> Option<()> {
    let node = cluster.members[index].id;
    let placed: Vec<u64> = cluster_status(cluster, index)?["partitions"]
        .as_array()?
        .iter()
        .filter(|placed| {
            placed["replicas"]
                .as_array()
                .is_some_and(|replicas| replicas.iter().any(|replica| replica == node))
        })
        .filter_map(|placed| placed["partition"].as_u64())
        .collect();
    (placed.len() == PARTITIONS).then_some(())?;
    for partition in placed {
        let here = group_on(cluster, index, partition)?;
        let primary = here["status"]["primary"].as_str()?;
        (here["status"]["contact_age_ms"].as_u64()? < 1_000).then_some(())?;
        let commit = here["status"]["commit"].as_u64()?;
        if primary == node {
            continue;
        }
        let led = group_on(cluster, cluster.index_of(primary), partition)?;
        let status = &led["status"];
        (status["primary"] == primary).then_some(())?;
        let voter = status["voters"]
            .as_array()?
            .iter()
            .position(|voter| voter == node)?;
        let lag = status["lag"].as_array()?.get(voter)?.as_u64()?;
        (commit >= status["commit"].as_u64()? && lag == 0).then_some(())?;
    }
    Some(())
}

#[test]
fn a_node_restarted_on_an_empty_disk_rebuilds_its_replicas_from_the_others() {
    let (cluster, token) = serving_cluster(Cluster::new(
        &NODES,
        NODES.len(),
        "partitions_rebuild_child_node",
    ));
    let all = [0, 1, 2];
    let mut ledger = Ledger::read_through(&cluster, 0, &token, COUNTERS);
    add_rounds(&cluster, &token, &mut ledger, &all, 0..3);

    // n3 dies with its disk, and comes back empty under its own name and address.
    let rebuilt = 2;
    cluster.kill(rebuilt);
    cluster.lose_disk(rebuilt);
    add_rounds(&cluster, &token, &mut ledger, &[0, 1], 3..5);
    cluster.start(rebuilt);
    add_rounds(&cluster, &token, &mut ledger, &all, 5..8);
    wait_bound(&cluster, rebuilt, &token, "counter", 1);
    add_rounds(&cluster, &token, &mut ledger, &all, 8..10);

    // Its replicas catch up: every partition placed on it runs there, at the primary's commit.
    // A primary knows a backup's lag from what it acknowledged since the last view change: a
    // replica that recovered after the last add has acknowledged nothing yet, so while one
    // lags, a round of adds follows now and then (not at every poll, which would keep moving
    // the commit it is compared with).
    let started = std::time::Instant::now();
    let mut last_round = started;
    let mut round = 10;
    eventually(
        "n3's replicas catch up with their primaries",
        &cluster,
        || {
            let caught = caught_up(&cluster, rebuilt);
            if caught.is_none() && last_round.elapsed() > LAGGING_ROUND_INTERVAL {
                add_rounds(&cluster, &token, &mut ledger, &all, round..round + 1);
                round += 1;
                last_round = std::time::Instant::now();
            }
            caught
        },
    );
    eprintln!(
        "n3's replicas caught up {:.1} s after the last add of the rounds, with {} more rounds",
        started.elapsed().as_secs_f64(),
        round - 10
    );
    let replicas = groups_here(&cluster, rebuilt).unwrap_or_default();
    eprintln!(
        "n3's groups: {}",
        serde_json::to_string(&replicas).unwrap_or_default()
    );

    // Another node dies with its disk and is removed: each partition's majority is the third
    // node and the rebuilt n3. The one killed leads a partition whose next view's primary is
    // n3 (the voter after it in the group's order), so n3 is elected there and serves that
    // partition's counters (a partition's shards follow its primary) from its own tables.
    let successor_is_rebuilt = |group: &Json| {
        let status = &group["status"];
        let voters: Vec<&str> = status["voters"]
            .as_array()
            .map(|voters| voters.iter().filter_map(Json::as_str).collect())
            .unwrap_or_default();
        let view = status["view"].as_u64().unwrap_or(0) as usize;
        !voters.is_empty() && voters[(view + 1) % voters.len()] == NODES[rebuilt]
    };
    let other = (0..NODES.len())
        .filter(|index| *index != rebuilt)
        .find(|index| {
            replicas.iter().any(|group| {
                group["status"]["primary"] == NODES[*index] && successor_is_rebuilt(group)
            })
        })
        .expect("a node leading a partition whose next primary is n3");
    let survivor = (0..NODES.len())
        .find(|index| *index != rebuilt && *index != other)
        .expect("a third node");
    cluster.kill(other);
    cluster.lose_disk(other);
    declare_lost(&cluster, survivor, NODES[other]);
    for id in ledger.ids() {
        for index in [survivor, rebuilt] {
            let value = eventually(&format!("{id} read through node {index}"), &cluster, || {
                read_through(&cluster, index, &token, &id)
            });
            ledger.check_read(&id, value, NODES[index]);
        }
    }
    // Some of them are served by n3 itself, from its rebuilt replicas' tables.
    let served = eventually("the counters' owners", &cluster, || {
        counters_served_by(&cluster, survivor, &ledger.ids())
    });
    eprintln!("served by: {served:?}");
    assert!(
        served.values().any(|node| node == NODES[rebuilt]),
        "n3 serves none of the counters: {served:?}"
    );
    // And they go on from there.
    add_rounds(&cluster, &token, &mut ledger, &[survivor, rebuilt], 0..1);
}
