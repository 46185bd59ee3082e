//! Shards across `tessera node` processes, under load: 1,000 counters spread over three nodes
//! and asked through every node; a fourth node joins while clients keep asking and is given
//! shards — with their state — without one failed ask and with every counter's value
//! continuous; it leaves gracefully under the same load, handing every shard back; `kill -9`
//! of an owner that is not the metadata primary leaves its shards answering
//! `shard_unavailable` (never a wrong or reset value) until it restarts with their state; and
//! `kill -9` of the metadata primary moves the coordinator, which goes on allocating.
//! Remembered entities restart on the node their shard moved to.

use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
const VOTERS: usize = 3;
const JOINER: usize = 3;
const COUNTERS: usize = 1_000;
/// Remembered entities of the `memo` type.
const MEMOS: usize = 200;
/// Client threads asking while nodes join and leave.
const CLIENTS: usize = 4;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by shards_move_with_their_state_under_load as its child processes"]
fn sharding_child_node() {
    run_child_if_asked();
}

/// What the clients saw: the value each counter must have, and every failure.
#[derive(Default)]
struct Ledger {
    values: BTreeMap<usize, u64>,
    failures: Vec<String>,
    asks: u64,
}

type Shared = Arc<Mutex<Ledger>>;

fn id(counter: usize) -> String {
    format!("k{counter}")
}

/// Asks every counter through the nodes in `via` (spread), `rounds` times, in `CLIENTS`
/// threads, each owning every `CLIENTS`-th counter; checks each answer against the ledger.
fn ask_all(cluster: &Cluster, token: &str, via: &[usize], ledger: &Shared) {
    thread::scope(|scope| {
        for client in 0..CLIENTS {
            scope.spawn(move || {
                for counter in (client..COUNTERS).step_by(CLIENTS) {
                    ask_once(cluster, token, via[counter % via.len()], counter, ledger);
                }
            });
        }
    });
}

/// One `{"Add":1}` to `counter` through node `index`, checked and recorded.
fn ask_once(cluster: &Cluster, token: &str, index: usize, counter: usize, ledger: &Shared) {
    let reply = ask_counter(cluster, index, token, &id(counter), 1);
    let mut ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
    ledger.asks += 1;
    if reply.status != 200 {
        let failure = format!(
            "{} via node {index}: {} {}",
            id(counter),
            reply.status,
            reply.body
        );
        ledger.failures.push(failure);
        return;
    }
    let expected = ledger.values.get(&counter).copied().unwrap_or(0) + 1;
    if reply.json() != json!(expected) {
        let failure = format!(
            "{} via node {index}: {} where {expected} was due (a lost or repeated add)",
            id(counter),
            reply.body
        );
        ledger.failures.push(failure);
    }
    ledger.values.insert(counter, expected);
}

/// Clients that ask counters through `via` until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Load {
    fn start(cluster: &Arc<Cluster>, token: &str, via: &[usize], ledger: &Shared) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..CLIENTS)
            .map(|client| {
                let (cluster, ledger, stop) = (cluster.clone(), ledger.clone(), stop.clone());
                let (token, via) = (token.to_string(), via.to_vec());
                thread::spawn(move || {
                    let mut turn = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let counter = client + CLIENTS * (turn % (COUNTERS / CLIENTS));
                        ask_once(&cluster, &token, via[turn % via.len()], counter, &ledger);
                        turn += 1;
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            thread.join().expect("a client thread");
        }
    }
}

fn shards_of(status: &serde_json::Value, node: &str) -> u64 {
    status["members"]
        .as_array()
        .and_then(|members| members.iter().find(|member| member["node"] == node))
        .and_then(|member| member["shards"].as_u64())
        .unwrap_or(0)
}

fn take_failures(ledger: &Shared) -> (Vec<String>, u64) {
    let mut ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
    let asks = std::mem::take(&mut ledger.asks);
    (std::mem::take(&mut ledger.failures), asks)
}

#[test]
fn shards_move_with_their_state_under_load() {
    let cluster = Arc::new(Cluster::new(&NODES, VOTERS, "sharding_child_node"));
    for index in 0..VOTERS {
        cluster.start(index);
    }
    for index in 0..VOTERS {
        eventually("three members up", &cluster, || {
            (members_up(&cluster_status(&cluster, index)?) == VOTERS).then_some(())
        });
    }
    let token = eventually("a tenant", &cluster, || create_tenant(&cluster, 0, "acme"));
    deploy_counter(&cluster, 0, &token, "counter", "");
    for index in 0..VOTERS {
        wait_bound(&cluster, index, &token, "counter", 1);
    }

    // 1,000 counters spread over the three nodes, each asked through every node in turn.
    let ledger: Shared = Arc::default();
    for round in 0..VOTERS {
        let via: Vec<usize> = (0..VOTERS).map(|index| (index + round) % VOTERS).collect();
        ask_all(&cluster, &token, &via, &ledger);
    }
    let (failures, _) = take_failures(&ledger);
    assert!(
        failures.is_empty(),
        "{} failures: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let status = cluster_status(&cluster, 0).expect("status");
    for node in &NODES[..VOTERS] {
        assert!(shards_of(&status, node) > 0, "{node} owns shards: {status}");
    }

    // Remembered entities of a second type, touched once and never again: after their shards
    // move, the new owner restarts them from the remembered ids that moved with the state.
    deploy_counter(&cluster, 0, &token, "memo", "?remember=true");
    for index in 0..VOTERS {
        wait_bound(&cluster, index, &token, "memo", 1);
    }
    for memo in 0..MEMOS {
        let url = format!(
            "{}/v1/entities/memo/m{memo}/ask",
            cluster.url(memo % VOTERS)
        );
        let reply = post_json(&url, &token, &json!({"Add": 1})).expect("memo answers");
        assert_eq!(reply.status, 200, "m{memo}: {}", reply.body);
    }

    // A fourth node joins while clients keep asking through the first three: it is given
    // shards, their state with them, and no ask fails or sees a value out of step.
    cluster.start(JOINER);
    let load = Load::start(&cluster, &token, &[0, 1, 2], &ledger);
    eventually("the joiner owns shards", &cluster, || {
        let status = cluster_status(&cluster, 0)?;
        (members_up(&status) == NODES.len() && shards_of(&status, NODES[JOINER]) >= 16)
            .then_some(())
    });
    // Let the rebalance settle under load: the joiner's share stops growing.
    let mut settled = 0;
    eventually("the rebalance settles", &cluster, || {
        thread::sleep(Duration::from_millis(500));
        let shards = shards_of(&cluster_status(&cluster, 0)?, NODES[JOINER]);
        let stable = shards == settled;
        settled = shards;
        stable.then_some(())
    });
    load.stop();
    let (failures, asks) = take_failures(&ledger);
    assert!(asks > 0, "the clients asked during the join");
    assert!(
        failures.is_empty(),
        "{} of {asks} asks failed while a node joined: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    // Every counter, asked through every node including the joiner, has its value.
    ask_all(&cluster, &token, &[0, 1, 2, 3], &ledger);
    let (failures, _) = take_failures(&ledger);
    assert!(
        failures.is_empty(),
        "after the join: {:?}",
        &failures[..failures.len().min(5)]
    );
    let moved = metric_sum(
        &cluster,
        JOINER,
        "tessera_region_shard_parts_installed_total",
    );
    assert!(
        moved >= 16.0,
        "the joiner installed the shards' state: {moved}"
    );

    // The joiner runs remembered entities it was never sent a message for.
    eventually(
        "remembered entities restarted on the joiner",
        &cluster,
        || {
            let reply = get(&format!("{}/v1/status", cluster.url(JOINER)), &token)?;
            let status = reply.json();
            let memo = status["types"]
                .as_array()?
                .iter()
                .find(|ty| ty["entity_type"] == "memo")?
                .clone();
            let remembered = memo["remembered_entities"].as_u64()?;
            (remembered > 0 && memo["live_entities"].as_u64()? >= remembered).then_some(())
        },
    );
    for memo in 0..MEMOS {
        let url = format!("{}/v1/entities/memo/m{memo}/ask", cluster.url(JOINER));
        let reply = post_json(&url, &token, &json!({"Add": 1})).expect("memo answers");
        assert_eq!(reply.status, 200, "m{memo}: {}", reply.body);
        assert_eq!(reply.json(), json!(2), "m{memo} kept its state");
    }

    // The joiner leaves gracefully under load: every shard it owns is handed back with its
    // state before the process exits.
    let load = Load::start(&cluster, &token, &[0, 1, 2], &ledger);
    let exit = cluster.terminate(JOINER);
    assert!(exit.success(), "the joiner exits cleanly: {exit:?}");
    eventually("the joiner removed", &cluster, || {
        let status = cluster_status(&cluster, 0)?;
        let members = status["members"].as_array()?;
        (!members.iter().any(|member| member["node"] == NODES[JOINER])).then_some(())
    });
    thread::sleep(Duration::from_millis(500));
    load.stop();
    let (failures, asks) = take_failures(&ledger);
    assert!(asks > 0, "the clients asked during the leave");
    assert!(
        failures.is_empty(),
        "{} of {asks} asks failed while a node left: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    ask_all(&cluster, &token, &[0, 1, 2], &ledger);
    let (failures, _) = take_failures(&ledger);
    assert!(
        failures.is_empty(),
        "after the leave: {:?}",
        &failures[..failures.len().min(5)]
    );

    // kill -9 of an owner that is not the metadata primary: its shards answer
    // shard_unavailable — never a wrong or reset value — until it is back with their state.
    let status = cluster_status(&cluster, 0).expect("status");
    let primary = status["primary"].as_str().expect("a primary").to_string();
    let victim = (0..VOTERS)
        .find(|index| NODES[*index] != primary && shards_of(&status, NODES[*index]) > 0)
        .expect("an owner that is not the primary");
    cluster.kill(victim);
    let survivor = (0..VOTERS)
        .find(|index| *index != victim)
        .expect("a survivor");
    eventually("the killed owner seen unreachable", &cluster, || {
        let status = cluster_status(&cluster, survivor)?;
        (reachable(&status, NODES[victim]) == Some(false)).then_some(())
    });
    let ledger_before: BTreeMap<usize, u64> = ledger
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values
        .clone();
    let mut unavailable = 0;
    for counter in 0..COUNTERS {
        let reply = ask_counter(&cluster, survivor, &token, &id(counter), 1);
        let due = ledger_before.get(&counter).copied().unwrap_or(0) + 1;
        match reply.status {
            200 => {
                assert_eq!(
                    reply.json(),
                    json!(due),
                    "{} through a survivor",
                    id(counter)
                );
                ledger
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .values
                    .insert(counter, due);
            }
            503 => {
                assert_eq!(
                    reply.json()["error"]["code"],
                    "shard_unavailable",
                    "{}: {}",
                    id(counter),
                    reply.body
                );
                unavailable += 1;
            }
            other => panic!("{}: {other} {}", id(counter), reply.body),
        }
    }
    assert!(unavailable > 0, "the killed node owned counters");
    assert!(unavailable < COUNTERS, "the survivors served theirs");
    cluster.start(victim);
    eventually("the restarted owner reachable", &cluster, || {
        let status = cluster_status(&cluster, survivor)?;
        (reachable(&status, NODES[victim]) == Some(true)).then_some(())
    });
    wait_bound(&cluster, victim, &token, "counter", 1);
    let probe = (0..COUNTERS)
        .find(|counter| {
            let due = ledger_before.get(counter).copied().unwrap_or(0);
            let ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
            ledger.values.get(counter) == Some(&due)
        })
        .expect("a counter that was unavailable");
    let reply = eventually("the restarted owner serves", &cluster, || {
        let reply = ask_counter(&cluster, survivor, &token, &id(probe), 1);
        (reply.status == 200).then_some(reply)
    });
    let due = ledger_before.get(&probe).copied().unwrap_or(0) + 1;
    assert_eq!(reply.json(), json!(due), "{} kept its state", id(probe));
    ledger
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values
        .insert(probe, due);
    ask_all(&cluster, &token, &[0, 1, 2], &ledger);
    let (failures, _) = take_failures(&ledger);
    assert!(
        failures.is_empty(),
        "after the owner's restart every counter has its value: {:?}",
        &failures[..failures.len().min(5)]
    );

    // kill -9 of the metadata primary, which runs the coordinator: a new primary takes over
    // and allocation goes on there. (Every shard of `counter` is allocated by now, so the
    // fresh entities are of a second type, deployed before the kill, whose shards are new.)
    deploy_counter(&cluster, survivor, &token, "tally", "");
    let primary_index = cluster.index_of(&primary);
    let survivor = (0..VOTERS)
        .find(|index| *index != primary_index)
        .expect("a survivor");
    wait_bound(&cluster, survivor, &token, "tally", 1);
    cluster.kill(primary_index);
    // Once the survivors see it gone (a shard allocated to it before that would wait for it,
    // with whatever state it took), new shards go to the living.
    eventually("the killed primary seen unreachable", &cluster, || {
        let status = cluster_status(&cluster, survivor)?;
        (reachable(&status, NODES[primary_index]) == Some(false)).then_some(())
    });
    for fresh in 0..16 {
        let url = format!("{}/v1/entities/tally/t{fresh}/ask", cluster.url(survivor));
        let reply = eventually(
            "a fresh shard allocated after the failover",
            &cluster,
            || {
                let reply = post_json(&url, &token, &json!({"Add": 1}))?;
                (reply.status == 200).then_some(reply)
            },
        );
        assert_eq!(reply.json(), json!(1), "tally t{fresh}");
    }
    let status = cluster_status(&cluster, survivor).expect("status");
    assert_ne!(status["primary"], json!(primary), "a new primary: {status}");
}
