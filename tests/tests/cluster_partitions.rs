//! The partition plane's placement in a cluster of three `tessera node` processes with
//! `sharding.partitions.count` set: the coordinator, on the metadata primary, commits a
//! placement through the replicated catalog, every node shows the same one in `/v1/cluster`
//! (every partition on three distinct members, each member the preferred primary of as many
//! partitions as the others).
//!
//! Each node is this test binary re-run as a child (`tessera_tests::processes`).

use std::collections::BTreeMap;
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const PARTITIONS: usize = 6;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by every_node_shows_the_coordinators_placement as its child processes"]
fn partitions_child_node() {
    run_child_if_asked();
}

/// `(partition, replicas)` as node `index` shows them, once every partition is placed.
fn placement(cluster: &Cluster, index: usize) -> Option<BTreeMap<u64, Vec<String>>> {
    let status = cluster_status(cluster, index)?;
    let partitions = status["partitions"].as_array()?;
    let placed: BTreeMap<u64, Vec<String>> = partitions
        .iter()
        .filter_map(|partition| {
            let replicas = partition["replicas"]
                .as_array()?
                .iter()
                .filter_map(|node| Some(node.as_str()?.to_string()))
                .collect();
            Some((partition["partition"].as_u64()?, replicas))
        })
        .collect();
    let complete = placed.len() == PARTITIONS
        && placed
            .values()
            .all(|replicas: &Vec<String>| replicas.len() == NODES.len());
    complete.then_some(placed)
}

#[test]
fn every_node_shows_the_coordinators_placement() {
    let cluster = Cluster::new(&NODES, NODES.len(), "partitions_child_node")
        .with_tables(&format!("[sharding.partitions]\ncount = {PARTITIONS}\n"));
    cluster.start_until_up(NODES.len());
    let first = eventually("every partition placed on three members", &cluster, || {
        placement(&cluster, 0)
    });
    for replicas in first.values() {
        let mut distinct = replicas.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), NODES.len(), "{replicas:?}");
    }
    let mut preferred: BTreeMap<&str, usize> = BTreeMap::new();
    for replicas in first.values() {
        *preferred.entry(replicas[0].as_str()).or_default() += 1;
    }
    assert_eq!(
        preferred.values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "preferred primaries spread evenly: {preferred:?}"
    );
    for index in 1..NODES.len() {
        let seen = eventually("the same placement on every node", &cluster, || {
            placement(&cluster, index).filter(|placed| *placed == first)
        });
        assert_eq!(seen, first);
    }
}
