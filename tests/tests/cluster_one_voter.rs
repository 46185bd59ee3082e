//! A cluster of one voter whose config leaves the partition plane to its defaults, in one
//! process: it places every partition on itself at once (a first placement waits for as many
//! members as there are voters, when fewer than the replication factor), and it is not
//! ready (`GET /v1/ready`) until the partitions are placed and their groups run here; from
//! then on a counter's adds commit through its partition's group of one replica.

use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_contract::EntityAddress;
use tessera_host::node::{ClusterConfig, Node};
use tessera_metadata::TypeOptions;
use tessera_sharding::PARTITIONS_CLUSTER_DEFAULT;
use tessera_tests::{from_msgpack, to_msgpack};

const ADMIN: &str = "one-voter-test-admin-token";
const TENANT: &str = "acme";
const NODE: &str = "n1";
/// How long the node may take to become ready, or to serve a counter, on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

async fn open(dir: &std::path::Path) -> Arc<Node> {
    let mut config = tessera_tests::node_config(&dir.join(NODE), ADMIN, 50);
    config.node_id = NODE.into();
    config.cluster = Some(ClusterConfig::new(
        "one-voter",
        "127.0.0.1:0".parse().expect("an address"),
        dir.join("certs"),
        vec![NODE.into()],
    ));
    Node::open(config).await.expect("the node opens")
}

/// Waits until the node says it is ready; every reason it gave before, in order, once each.
async fn until_ready(node: &Node) -> Vec<String> {
    let deadline = Instant::now() + PATIENCE;
    let mut reasons: Vec<String> = Vec::new();
    loop {
        let readiness = node.readiness().expect("readiness");
        if readiness.ready {
            return reasons;
        }
        let reason = readiness.reason.expect("a node that is not ready says why");
        if reasons.last() != Some(&reason) {
            reasons.push(reason);
        }
        assert!(Instant::now() < deadline, "not ready: {reasons:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn add(node: &Node, id: &str) -> Result<i64, String> {
    let address = EntityAddress::new(TENANT, "counter", id);
    let reply = node
        .ask(
            &address,
            to_msgpack(&json!({"Add": 1})),
            Duration::from_secs(5),
        )
        .await
        .map_err(|error| error.to_string())?;
    from_msgpack(&reply)?
        .as_i64()
        .ok_or_else(|| "not a number".to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_voter_cluster_is_ready_once_its_partitions_serve() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    tessera_cluster::create_dev_cluster(&dir.path().join("certs"), &[NODE]).expect("certificates");
    let node = open(dir.path()).await;
    let reasons = until_ready(&node).await;
    eprintln!("not ready before, because: {reasons:?}");
    let groups = node.partitions_here();
    assert_eq!(groups.len(), PARTITIONS_CLUSTER_DEFAULT as usize);
    assert!(groups.iter().all(|group| group.replicas == [NODE]));

    node.create_tenant(TENANT, None).await.expect("a tenant");
    let plugin = std::fs::read(tessera_tests::COUNTER).expect("the counter plugin");
    node.deploy(TENANT, "counter", plugin, TypeOptions::default())
        .await
        .expect("the counter deployed");
    // Ready means an entity's partition has its replica here: the first add commits.
    let before = commits(&node);
    for id in ["c1", "c2", "c3"] {
        assert_eq!(add(&node, id).await, Ok(1), "{id}");
        assert_eq!(add(&node, id).await, Ok(2), "{id}");
    }
    let committed = commits(&node) - before;
    assert!(
        committed >= 6,
        "six sequential adds are six ops of the partitions' groups, not {committed}"
    );
}

/// Ops committed by every partition group of the node, together.
fn commits(node: &Node) -> u64 {
    node.partitions_here()
        .iter()
        .map(|group| group.status.commit)
        .sum()
}
