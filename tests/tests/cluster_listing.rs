//! Listing a type's entities in a cluster of three `tessera node` processes: the ids written
//! through one node live on all three (their shards spread), and every node lists all of them,
//! once each, in id order, page by page — merged from the nodes that own them. The dashboard's
//! overview through any node counts all three members.
//!
//! Each node is this test binary re-run as a child (`tessera_tests::processes`).

use serde_json::{Value as Json, json};
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Counters that write state, and counters that are only remembered.
const WRITTEN: usize = 30;
const REMEMBERED_ONLY: usize = 10;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by every_node_lists_every_entity_once_in_order as its child processes"]
fn listing_child_node() {
    run_child_if_asked();
}

/// One page through node `index`, once it answers 200.
fn page(cluster: &Cluster, index: usize, token: &str, query: &str) -> Option<Json> {
    let url = format!("{}/v1/types/counter/entities{query}", cluster.url(index));
    let reply = get(&url, token)?;
    (reply.status == 200).then(|| reply.json())
}

fn ids(page: &Json) -> Vec<String> {
    page["ids"]
        .as_array()
        .map(|ids| {
            ids.iter()
                .filter_map(|id| Some(id.as_str()?.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_node_lists_every_entity_once_in_order() {
    let cluster = Cluster::new(&NODES, NODES.len(), "listing_child_node");
    cluster.start_until_up(NODES.len());
    let token = create_tenant(&cluster, 0, "acme").expect("a tenant through node 1");
    deploy_counter(&cluster, 0, &token, "counter", "?remember=true");
    for index in 0..NODES.len() {
        wait_bound(&cluster, index, &token, "counter", 1);
    }
    let mut expected = Vec::new();
    for n in 0..WRITTEN {
        let id = format!("w{n:02}");
        let reply = ask_counter(&cluster, 0, &token, &id, 1);
        assert_eq!(reply.status, 200, "{id}: {}", reply.body);
        expected.push(id);
    }
    for n in 0..REMEMBERED_ONLY {
        let id = format!("r{n:02}");
        let url = format!("{}/v1/entities/counter/{id}/ask", cluster.url(0));
        let reply = post_json(&url, &token, &json!("Get")).expect("the node answers");
        assert_eq!(reply.status, 200, "{id}: {}", reply.body);
        expected.push(id);
    }
    expected.sort();
    let status = cluster_status(&cluster, 0).expect("status");
    let owners = status["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter(|member| member["shards"].as_u64().unwrap_or(0) > 0)
        .count();
    assert_eq!(
        owners,
        NODES.len(),
        "the counters' shards are on every node: {status}"
    );

    // Remembered ids are written behind on their owners: wait until every node lists them.
    for (index, node) in NODES.iter().enumerate() {
        let all = eventually("every id listed", &cluster, || {
            let all = page(&cluster, index, &token, "?limit=1000")?;
            (ids(&all).len() == expected.len()).then_some(all)
        });
        assert_eq!(ids(&all), expected, "through {node}");
        assert_eq!(all["total"], json!(expected.len()), "through {node}");
    }

    // Page by page through the second node: the same ids, each once.
    let mut walked = Vec::new();
    let mut query = "?limit=7".to_string();
    loop {
        let page = page(&cluster, 1, &token, &query).expect("a page");
        assert!(ids(&page).len() <= 7, "{page}");
        walked.extend(ids(&page));
        match page["next_after"].as_str() {
            Some(after) => query = format!("?limit=7&after={after}"),
            None => break,
        }
    }
    assert_eq!(walked, expected);

    // The dashboard's overview through the third node: three members, each with counters.
    let overview = get(&format!("{}/v1/overview", cluster.url(2)), ADMIN).expect("overview");
    assert_eq!(overview.status, 200, "{}", overview.body);
    let overview = overview.json();
    let nodes: Vec<&str> = overview["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter_map(|node| node["node"].as_str())
        .collect();
    assert_eq!(nodes, NODES, "{overview}");
    let counter = overview["types"]
        .as_array()
        .expect("types")
        .iter()
        .find(|ty| ty["type"] == "counter")
        .cloned()
        .expect("the counter type");
    assert_eq!(
        counter["live_entities"],
        json!(expected.len()),
        "{overview}"
    );
}
