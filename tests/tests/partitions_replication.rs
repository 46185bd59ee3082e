//! A type's own replication factor, through three node processes whose cluster keeps three
//! replicas of each of its six partitions: a type deployed with `replication_factor=1` gets a
//! family of six partitions of its own, one replica each, spread over the nodes, while the
//! counter keeps three. A deploy that asks a type for another factor than its first deploy
//! did, or for one out of bounds, is refused and changes nothing. Then a node is killed
//! (`kill -9`): every counter still serves with every acknowledged add, the single-replica
//! entities whose partition was on it answer a retryable error and the others serve — and
//! once it is back, every single-replica entity has every acknowledged add. Each node is this
//! test binary re-run as a child (`tessera_tests::processes`).

use serde_json::{Value as Json, json};
use std::collections::BTreeMap;
use tessera_sharding::{FnvExtractor, ShardExtractor, ShardingConfig};
use tessera_tests::cluster::*;
use tessera_tests::partition_plane::{PARTITIONS, placed_partitions, serving_cluster};
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Entities of each type: enough that every node holds some single-replica entity.
const ENTITIES: usize = 24;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by the tests of this file as their child processes"]
fn partitions_replication_child_node() {
    run_child_if_asked();
}

/// Every placed partition and its replicas as node `index` shows them, once `expected`
/// partitions are placed.
fn placement(
    cluster: &Cluster,
    index: usize,
    expected: usize,
) -> Option<BTreeMap<u64, Vec<String>>> {
    placed_partitions(cluster, index).filter(|placed| placed.len() == expected)
}

fn ask(
    cluster: &Cluster,
    index: usize,
    token: &str,
    entity_type: &str,
    id: usize,
    body: &Json,
) -> Option<Reply> {
    let url = format!("{}/v1/entities/{entity_type}/e{id}/ask", cluster.url(index));
    post_json(&url, token, body)
}

/// Entity `id`'s value read through node `index`, once it answers.
fn value(cluster: &Cluster, index: usize, token: &str, entity_type: &str, id: usize) -> u64 {
    let reply = eventually(&format!("{entity_type}/e{id} read"), cluster, || {
        ask(cluster, index, token, entity_type, id, &json!("Get"))
            .filter(|reply| reply.status == 200)
    });
    reply.json().as_u64().expect("a counter's value")
}

/// Adds `add` to entity `id` through node `index`, which must acknowledge it at once with the
/// value it reaches; that value.
fn add(
    cluster: &Cluster,
    index: usize,
    token: &str,
    entity_type: &str,
    id: usize,
    before: u64,
    add: u64,
) -> u64 {
    let reply =
        ask(cluster, index, token, entity_type, id, &json!({"Add": add})).expect("answered");
    assert_eq!(reply.status, 200, "{entity_type}/e{id}: {}", reply.body);
    assert_eq!(
        reply.json().as_u64(),
        Some(before + add),
        "{entity_type}/e{id} answers its value after the add"
    );
    before + add
}

#[test]
fn a_type_keeps_its_own_replication_factor_and_its_replicas_fail_alone() {
    let (cluster, token) = serving_cluster(Cluster::new(
        &NODES,
        NODES.len(),
        "partitions_replication_child_node",
    ));
    deploy_counter(&cluster, 0, &token, "single", "?replication_factor=1");
    for index in 0..NODES.len() {
        wait_bound(&cluster, index, &token, "single", 1);
    }

    // Refused, changing nothing: another factor than the type keeps, or one out of bounds.
    let plugin = std::fs::read(tessera_tests::COUNTER).expect("the counter plugin");
    for (entity_type, factor) in [("single", 3), ("counter", 1), ("other", 8), ("other", 0)] {
        let url = format!(
            "{}/v1/types/{entity_type}/versions?replication_factor={factor}",
            cluster.url(1)
        );
        let reply = request(
            "POST",
            &url,
            &token,
            Some(("application/wasm", plugin.clone())),
        )
        .expect("deploy answered");
        assert_eq!(
            reply.status, 400,
            "{entity_type} at {factor}: {}",
            reply.body
        );
        assert!(reply.body.contains("replication_factor"), "{}", reply.body);
    }
    let types = get(&format!("{}/v1/types", cluster.url(0)), &token).expect("types");
    let types = types.json();
    let names: Vec<&str> = types["types"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|record| record["name"].as_str())
        .collect();
    assert_eq!(names, ["counter", "single"], "nothing more was deployed");
    let replication: Vec<&Json> = types["types"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|record| &record["replication"])
        .collect();
    assert_eq!(
        replication,
        [
            &json!({"factor": 3, "own": false}),
            &json!({"factor": 1, "own": true})
        ],
        "each type shows the replicas that keep its entities"
    );

    // The single-replica family: six more partitions, one replica each, two on each node; the
    // cluster's six keep three replicas.
    let mut acknowledged: BTreeMap<(&str, usize), u64> = BTreeMap::new();
    for id in 0..ENTITIES {
        for entity_type in ["counter", "single"] {
            let before = value(&cluster, id % NODES.len(), &token, entity_type, id);
            let after = add(
                &cluster,
                (id + 1) % NODES.len(),
                &token,
                entity_type,
                id,
                before,
                id as u64 + 1,
            );
            acknowledged.insert((entity_type, id), after);
        }
    }
    let placed = eventually("both families placed", &cluster, || {
        placement(&cluster, 0, 2 * PARTITIONS)
    });
    let mut singles_on: BTreeMap<&str, usize> = BTreeMap::new();
    for (partition, replicas) in &placed {
        if (*partition as usize) < PARTITIONS {
            assert_eq!(
                replicas.len(),
                NODES.len(),
                "partition {partition}: {replicas:?}"
            );
        } else {
            assert!((*partition as usize) < 2 * PARTITIONS, "{partition}");
            assert_eq!(replicas.len(), 1, "partition {partition}: {replicas:?}");
            let node = NODES
                .iter()
                .find(|node| **node == replicas[0])
                .expect("a member");
            *singles_on.entry(node).or_default() += 1;
        }
    }
    assert_eq!(
        singles_on.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "the single-replica partitions spread evenly: {placed:?}"
    );

    // n3 killed: the counters serve on the others with every acknowledged add; each
    // single-replica entity either serves its acknowledged value or, its one replica dead,
    // answers a retryable error.
    cluster.kill(2);
    for id in 0..ENTITIES {
        let index = id % 2;
        let before = value(&cluster, index, &token, "counter", id);
        assert_eq!(before, acknowledged[&("counter", id)], "counter/e{id}");
        let after = add(&cluster, index, &token, "counter", id, before, 1);
        acknowledged.insert(("counter", id), after);
    }
    // Which single-replica entities lived on n3: those of a partition placed on it alone.
    let shards = FnvExtractor::new(ShardingConfig::default().num_shards);
    let mut unavailable = 0;
    for id in 0..ENTITIES {
        let partition =
            (PARTITIONS as u32 + shards.shard_of(&format!("e{id}")) % PARTITIONS as u32) as u64;
        let on_dead_node = placed[&partition] == ["n3"];
        let reply = ask(&cluster, id % 2, &token, "single", id, &json!("Get")).expect("answered");
        if on_dead_node {
            assert_eq!(reply.status, 503, "single/e{id}: {}", reply.body);
            unavailable += 1;
        } else {
            assert_eq!(reply.status, 200, "single/e{id}: {}", reply.body);
            assert_eq!(
                reply.json().as_u64(),
                Some(acknowledged[&("single", id)]),
                "single/e{id}"
            );
        }
    }
    assert!(
        unavailable > 0,
        "some single-replica entity lived on n3 (2 of its 6 partitions)"
    );

    // Back, its replicas have every acknowledged add of their entities.
    cluster.start(2);
    for id in 0..ENTITIES {
        for entity_type in ["counter", "single"] {
            let read = value(&cluster, id % NODES.len(), &token, entity_type, id);
            assert_eq!(
                read,
                acknowledged[&(entity_type, id)],
                "{entity_type}/e{id}"
            );
        }
    }
}
