//! Reading an entity's state in a cluster of three `tessera node` processes: counters written
//! through one node are read (`GET /v1/entities/{type}/{id}/state`, what the CLI's `state`
//! calls) through every node, and every node answers what the entity's owner holds — not its
//! own, empty or stale, copy.
//!
//! Each node is this test binary re-run as a child (`tessera_tests::processes`).

use serde_json::json;
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Counters written through the first node; their shards spread over all three.
const COUNTERS: u64 = 16;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by state_reads_through_every_node_see_the_owners_state as its child processes"]
fn state_reads_child_node() {
    run_child_if_asked();
}

/// Counter `id`'s state entries as node `index` answers them (a 200 asserted).
fn read_state(cluster: &Cluster, index: usize, token: &str, id: &str) -> serde_json::Value {
    let url = format!("{}/v1/entities/counter/{id}/state", cluster.url(index));
    let reply = get(&url, token).expect("the node answers");
    assert_eq!(reply.status, 200, "{id} via node {index}: {}", reply.body);
    reply.json()["entries"].clone()
}

#[test]
fn state_reads_through_every_node_see_the_owners_state() {
    let cluster = Cluster::new(&NODES, NODES.len(), "state_reads_child_node");
    cluster.start_until_up(NODES.len());
    let token = create_tenant(&cluster, 0, "acme").expect("a tenant through node 1");
    deploy_counter(&cluster, 0, &token, "counter", "");
    for index in 0..NODES.len() {
        wait_bound(&cluster, index, &token, "counter", 1);
    }

    // Written through node 1 only: counter c<n> holds n + 1.
    for counter in 0..COUNTERS {
        let reply = ask_counter(&cluster, 0, &token, &format!("c{counter}"), counter + 1);
        assert_eq!(reply.status, 200, "c{counter}: {}", reply.body);
        assert_eq!(reply.json(), json!(counter + 1), "c{counter}");
    }
    let status = cluster_status(&cluster, 0).expect("status");
    let owners = status["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter(|member| member["shards"].as_u64().unwrap_or(0) > 0)
        .count();
    assert!(
        owners > 1,
        "the counters' shards are on more nodes than the one written through: {status}"
    );

    // Read through every node: each answers what the owner holds.
    for counter in 0..COUNTERS {
        let id = format!("c{counter}");
        let expected = json!([{"key": "value", "value": counter + 1}]);
        for (index, node) in NODES.iter().enumerate() {
            let entries = read_state(&cluster, index, &token, &id);
            assert_eq!(entries, expected, "{id} read via node {node}");
        }
    }
    // An entity that never wrote has no state, through any node.
    for (index, node) in NODES.iter().enumerate() {
        let entries = read_state(&cluster, index, &token, "never-written");
        assert_eq!(entries, json!([]), "via node {node}");
    }
}
