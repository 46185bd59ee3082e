//! Forwarding between three `tessera node` processes under one tenant's large messages: while
//! a bulk tenant sends messages just under the API's default body limit (1 MiB) through every
//! node, and one too large to be forwarded at all (the nodes take bodies up to 16 MiB), another
//! tenant's small tells and asks, sent through every node in the same window, all succeed and
//! none is lost; the message too large to forward is refused alike through every node with
//! `413 payload_too_large`, whichever node owns its entity.
//!
//! Each node is this test binary re-run as a child (`tessera_tests::processes`).

use serde_json::json;
use std::thread;
use tessera_sharding::FORWARD_PAYLOAD_BYTES_MAX;
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Bodies the nodes take: far over the forwarding bound, so only that bound refuses.
const BODY_BYTES_MAX: usize = 16 << 20;
/// A bulk message's payload: just under the API's default body limit.
const BULK_PAYLOAD_BYTES: usize = (1 << 20) - 64;
/// Rounds of the window: each sends one bulk tell through every node, and a tell and an ask
/// to each small counter.
const ROUNDS: u64 = 6;
/// Small counters, and the threads that send to them (each its own counters).
const SMALL_COUNTERS: u64 = 12;
const SMALL_SENDERS: u64 = 2;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by large_messages_do_not_fail_other_tenants_forwards as its child processes"]
fn forwarding_child_node() {
    run_child_if_asked();
}

/// `bytes` bytes as one MessagePack `bin`, what the echo entity takes.
fn msgpack_bin(bytes: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(bytes + 5);
    body.push(0xc6);
    body.extend_from_slice(&u32::try_from(bytes).expect("a small payload").to_be_bytes());
    body.resize(bytes + 5, 0x5a);
    body
}

/// Sends `body` (MessagePack) to echo entity `id` through node `index` (`action` is `tell` or
/// `ask`).
fn to_echo(
    cluster: &Cluster,
    index: usize,
    token: &str,
    action: &str,
    id: &str,
    body: Vec<u8>,
) -> Reply {
    let url = format!("{}/v1/entities/echo/{id}/{action}", cluster.url(index));
    request("POST", &url, token, Some(("application/msgpack", body))).expect("the node answers")
}

/// Counter `id`'s value as its owner holds it, read through node `index`.
fn counter_value(cluster: &Cluster, index: usize, token: &str, id: &str) -> Option<u64> {
    let url = format!("{}/v1/entities/counter/{id}/state", cluster.url(index));
    let reply = get(&url, token)?;
    let entries = reply.json()["entries"].as_array()?.clone();
    Some(
        entries
            .first()
            .map_or(0, |entry| entry["value"].as_u64().unwrap_or(0)),
    )
}

#[test]
fn large_messages_do_not_fail_other_tenants_forwards() {
    let config = format!("[api]\nrequest_body_bytes_max = {BODY_BYTES_MAX}\n");
    let cluster = Cluster::new(&NODES, NODES.len(), "forwarding_child_node").with_tables(&config);
    cluster.start_until_up(NODES.len());
    let bulk = create_tenant(&cluster, 0, "bulk").expect("the bulk tenant");
    let small = create_tenant(&cluster, 0, "small").expect("the small tenant");
    let echo = std::fs::read(tessera_tests::ECHO).expect("the echo plugin");
    let url = format!("{}/v1/types/echo/versions", cluster.url(0));
    let reply = request("POST", &url, &bulk, Some(("application/wasm", echo))).expect("deploy");
    assert_eq!(reply.status, 201, "deploy echo: {}", reply.body);
    deploy_counter(&cluster, 0, &small, "counter", "");
    for index in 0..NODES.len() {
        wait_bound(&cluster, index, &bulk, "echo", 1);
        wait_bound(&cluster, index, &small, "counter", 1);
    }

    let (too_large, small_failures) = thread::scope(|scope| {
        let bulk_sender = scope.spawn(|| {
            let mut too_large = Vec::new();
            for round in 0..ROUNDS {
                for index in 0..NODES.len() {
                    let id = format!("b{round}-{index}");
                    let reply = to_echo(
                        &cluster,
                        index,
                        &bulk,
                        "tell",
                        &id,
                        msgpack_bin(BULK_PAYLOAD_BYTES),
                    );
                    assert_eq!(
                        reply.status, 202,
                        "bulk tell {id} via node {index}: {}",
                        reply.body
                    );
                }
                // Every round, the message that can never be forwarded, through one node.
                let index = round as usize % NODES.len();
                let action = if round % 2 == 0 { "tell" } else { "ask" };
                let body = msgpack_bin(FORWARD_PAYLOAD_BYTES_MAX + 1);
                too_large.push((
                    index,
                    action,
                    to_echo(&cluster, index, &bulk, action, "huge", body),
                ));
            }
            too_large
        });
        let small_senders: Vec<_> = (0..SMALL_SENDERS)
            .map(|sender| {
                let (cluster, small) = (&cluster, &small);
                scope.spawn(move || {
                    let mut failures = Vec::new();
                    for round in 0..ROUNDS {
                        for counter in (sender..SMALL_COUNTERS).step_by(SMALL_SENDERS as usize) {
                            let id = format!("s{counter}");
                            let index = ((round + counter) % NODES.len() as u64) as usize;
                            let url = format!("{}/v1/entities/counter/{id}", cluster.url(index));
                            let add = json!({"Add": 1});
                            let told =
                                post_json(&format!("{url}/tell"), small, &add).expect("answered");
                            let asked =
                                post_json(&format!("{url}/ask"), small, &add).expect("answered");
                            if told.status != 202 || asked.status != 200 {
                                failures.push(format!(
                                    "{id} via node {index}: tell {} {}, ask {} {}",
                                    told.status, told.body, asked.status, asked.body
                                ));
                            }
                        }
                    }
                    failures
                })
            })
            .collect();
        let too_large = bulk_sender.join().expect("the bulk sender");
        let failures: Vec<String> = small_senders
            .into_iter()
            .flat_map(|sender| sender.join().expect("a small sender"))
            .collect();
        (too_large, failures)
    });

    assert!(
        small_failures.is_empty(),
        "small messages failed: {small_failures:#?}"
    );
    for (index, action, reply) in too_large {
        assert_eq!(
            (reply.status, reply.json()["error"]["code"].clone()),
            (413, json!("payload_too_large")),
            "the {action} too large to forward, via node {index}: {}",
            reply.body
        );
    }
    // Every small tell arrived: each counter reaches its tells and asks, two a round.
    for counter in 0..SMALL_COUNTERS {
        let id = format!("s{counter}");
        eventually(&format!("{id} counts every add"), &cluster, || {
            let value = counter_value(&cluster, 0, &small, &id)?;
            assert!(value <= 2 * ROUNDS, "{id} counted {value} adds");
            (value == 2 * ROUNDS).then_some(())
        });
    }
    for index in 0..NODES.len() {
        let metrics = get(&format!("{}/metrics", cluster.url(index)), ADMIN).expect("metrics");
        assert!(
            metrics
                .body
                .lines()
                .any(|line| line == "tessera_region_tells_dropped_total 0"),
            "no tell accepted by node {index} was dropped: {}",
            metrics.body
        );
    }
}
