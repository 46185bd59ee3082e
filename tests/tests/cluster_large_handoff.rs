//! A shard whose entity holds more state than one mesh frame carries (80 MiB) moves between
//! `tessera node` processes: the node that owns it leaves gracefully, the shard is handed off
//! with its state streamed in bounded parts, and the entity answers on its new owner with
//! every byte of that state. Before handoffs streamed, the entity travelled in one part, which
//! no frame could carry: the transfer never progressed, and after the leave the entity's ask
//! timed out (504) instead of answering.

use serde_json::json;
use std::time::Instant;
use tessera_sharding::{FnvExtractor, ShardExtractor, ShardingConfig};
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
const VOTERS: usize = 3;
/// The node that owns the large entity, then leaves (voters stay members).
const LEAVER: usize = 3;
/// One value per message, as large as a message may write (4 MiB) with its key and the key
/// count: with what a part spends on its framing, more than one part holds, so each value
/// crosses in chunks.
const VALUE_BYTES: u64 = (4 << 20) - 256;
/// 21 values: 84 MiB, more than a mesh frame.
const KEYS: u64 = 21;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by an_entity_larger_than_a_mesh_frame_moves_with_its_state as its child processes"]
fn large_handoff_child_node() {
    run_child_if_asked();
}

fn ballast(
    cluster: &Cluster,
    index: usize,
    token: &str,
    id: &str,
    message: serde_json::Value,
) -> Reply {
    let url = format!("{}/v1/entities/ballast/{id}/ask", cluster.url(index));
    post_json(&url, token, &message).expect("the node answers")
}

/// The node that owns `id`'s shard of `ballast`, as the coordinator's table says.
fn owner(cluster: &Cluster, id: &str) -> Option<String> {
    let shard = FnvExtractor::new(ShardingConfig::default().num_shards).shard_of(id);
    let reply = get(&format!("{}/v1/cluster/shards", cluster.url(0)), ADMIN)?;
    let shards = reply.json();
    shards["shards"]
        .as_array()?
        .iter()
        .find(|row| row["type"] == "acme/ballast" && row["shard"] == shard)
        .and_then(|row| Some(row["node"].as_str()?.to_string()))
}

#[test]
fn an_entity_larger_than_a_mesh_frame_moves_with_its_state() {
    let cluster = Cluster::new(&NODES, VOTERS, "large_handoff_child_node");
    cluster.start_until_up(VOTERS);
    cluster.start(LEAVER);
    for index in 0..NODES.len() {
        eventually("every member up", &cluster, || {
            (members_up(&cluster_status(&cluster, index)?) == NODES.len()).then_some(())
        });
    }
    let token = eventually("a tenant", &cluster, || create_tenant(&cluster, 0, "acme"));
    // Room for the entity's state, and CPU time to read 84 MiB back in one message.
    let quotas = json!({"entity_state_bytes_max": 256 << 20, "message_deadline_ms": 20_000});
    let url = format!("{}/v1/tenants/acme/quotas", cluster.url(0));
    let bytes = serde_json::to_vec(&quotas).expect("json");
    let reply = request("PUT", &url, ADMIN, Some(("application/json", bytes))).expect("quotas");
    assert_eq!(reply.status, 200, "quotas: {}", reply.body);
    let plugin = std::fs::read(tessera_tests::BALLAST).expect("the ballast plugin");
    let url = format!("{}/v1/types/ballast/versions", cluster.url(0));
    let reply = request("POST", &url, &token, Some(("application/wasm", plugin))).expect("deploy");
    assert_eq!(reply.status, 201, "deploy: {}", reply.body);
    for index in 0..NODES.len() {
        wait_bound(&cluster, index, &token, "ballast", 1);
    }

    // New shards go to the node with the fewest: some entity's lands on the leaver.
    let id = (0..64)
        .map(|index| format!("b{index}"))
        .find(|id| {
            let reply = ballast(&cluster, 0, &token, id, json!("Ping"));
            assert_eq!(reply.status, 200, "{id}: {}", reply.body);
            owner(&cluster, id).as_deref() == Some(NODES[LEAVER])
        })
        .unwrap_or_else(|| {
            let shards = get(&format!("{}/v1/cluster/shards", cluster.url(0)), ADMIN);
            panic!(
                "no entity on the leaver: {:?}",
                shards.map(|reply| reply.body)
            )
        });
    for key in 0..KEYS {
        let fill = json!({"Fill": {"key": key, "bytes": VALUE_BYTES}});
        let reply = ballast(&cluster, 0, &token, &id, fill);
        assert_eq!(reply.status, 200, "fill {key}: {}", reply.body);
    }
    let held = json!({"keys": KEYS, "bytes": KEYS * VALUE_BYTES, "wrong": []});
    let reply = ballast(&cluster, 0, &token, &id, json!("Check"));
    assert_eq!(reply.json(), held, "{id} on the leaver");

    let started = Instant::now();
    let exit = cluster.terminate(LEAVER);
    let took = started.elapsed();
    assert!(
        exit.success(),
        "the leaver handed its shards off and exited: {exit:?}"
    );
    let now = owner(&cluster, &id).expect("an owner");
    assert_ne!(now, NODES[LEAVER], "the shard moved");
    let reply = ballast(&cluster, 0, &token, &id, json!("Check"));
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json(), held, "{id} on {now} holds every byte");
    let index = cluster.index_of(&now);
    let installed = metric_sum(
        &cluster,
        index,
        "tessera_region_shard_parts_installed_total",
    );
    assert!(
        installed >= KEYS as f64,
        "{now} installed the parts: {installed}"
    );
    eprintln!(
        "{} bytes of one entity handed off ({installed} parts installed); the leave took {took:?}",
        KEYS * VALUE_BYTES
    );
}
