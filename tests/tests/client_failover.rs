//! `tessera-client` against a three-node cluster in which a node is killed with `kill -9`
//! while clients ask counters through all three addresses (and the node is later restarted),
//! with entity state on its owners' disks and with the partition plane serving (the node
//! killed then is the primary of the most partitions):
//! every ask ends — in a value or an error — and no acknowledged add is lost or applied twice
//! (each counter's answers strictly increase, by one per add unless an earlier ask ended with an
//! unknown outcome); tells whose idempotency keys are sent twice run once. Each node is this
//! test binary re-run as a child (`tessera_tests::processes`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tessera_client::{Client, Error, ErrorKind, Retry};
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Counters asked at once, each by one task, so its answers can be checked in order.
const COUNTERS: usize = 12;
/// The counter the keyed tells add to.
const TOLD: &str = "told";

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by the tests below as their child processes"]
fn failover_child_node() {
    run_child_if_asked();
}

/// One client per node, each trying the nodes from a different one first, patient enough to
/// wait out a shard whose owner is being restarted.
fn clients(cluster: &Cluster, token: &str) -> Vec<Client> {
    (0..NODES.len())
        .map(|first| {
            let urls = (0..NODES.len()).map(|offset| cluster.url((first + offset) % NODES.len()));
            Client::builder()
                .nodes(urls)
                .token(token)
                .request_timeout(Duration::from_secs(10))
                .retry(Retry {
                    attempts_max: 400,
                    backoff_initial: Duration::from_millis(20),
                    backoff_max: Duration::from_millis(300),
                    elapsed_max: PATIENCE,
                })
                .build()
                .expect("a client")
        })
        .collect()
}

/// What one counter's asker saw.
#[derive(Debug, Default)]
struct Ledger {
    /// The last value an ask answered.
    acknowledged: i64,
    /// Asks that ended with an unknown outcome (the add may have run) since that answer.
    unknown_since: i64,
    answered: usize,
    /// The longest time between two answers (or from the start to the first): how long the
    /// counter was not served.
    longest_gap: Duration,
    /// Errors by kind, for the report.
    errors: BTreeMap<String, usize>,
}

/// Asks counter `id` to add one until `stop`, checking every answer against the last.
async fn ask_until(client: Client, id: String, stop: Arc<AtomicBool>) -> Ledger {
    let mut ledger = Ledger::default();
    let mut last_answer = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let asked = client
            .ask::<_, i64>("counter", &id, &serde_json::json!({"Add": 1}))
            .await;
        match asked {
            Ok(value) => {
                let floor = ledger.acknowledged + 1;
                let ceiling = floor + ledger.unknown_since;
                assert!(
                    (floor..=ceiling).contains(&value),
                    "{id}: answered {value} after {} (with {} unknown outcomes): an add lost or \
                     applied twice",
                    ledger.acknowledged,
                    ledger.unknown_since
                );
                ledger.acknowledged = value;
                ledger.unknown_since = 0;
                ledger.answered += 1;
                ledger.longest_gap = ledger.longest_gap.max(last_answer.elapsed());
                last_answer = Instant::now();
            }
            Err(error) => {
                let kind = match &error {
                    Error::Interrupted { .. } | Error::TimedOut { .. } => {
                        ledger.unknown_since += 1;
                        "unknown outcome".to_string()
                    }
                    Error::Api(refusal) if refusal.kind() == ErrorKind::Timeout => {
                        ledger.unknown_since += 1;
                        "timeout".to_string()
                    }
                    Error::Api(refusal) if refusal.kind().is_transient() => {
                        format!("{} (retries spent)", refusal.code())
                    }
                    other => panic!("{id}: an ask failed with {other}"),
                };
                *ledger.errors.entry(kind).or_default() += 1;
            }
        }
    }
    ledger
}

/// Tells `told` one add per key, each key sent twice (as an application that lost the first
/// answer would), until `stop`; the keys whose tells were answered, and those that failed.
async fn tell_until(client: Client, stop: Arc<AtomicBool>) -> (usize, usize) {
    let (mut committed, mut failed) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        let key = tessera_client::new_idempotency_key();
        let message = serde_json::json!({"Add": 1});
        let first = client.tell_with_key("counter", TOLD, &message, &key).await;
        let second = client.tell_with_key("counter", TOLD, &message, &key).await;
        if first.is_ok() || second.is_ok() {
            committed += 1;
        } else {
            failed += 1;
        }
    }
    (committed, failed)
}

/// The owner of some shards that is not the metadata primary.
fn an_owner_not_primary(cluster: &Cluster) -> usize {
    let status = cluster_status(cluster, 0).expect("status");
    let primary = status["primary"].as_str().expect("a primary").to_string();
    (0..NODES.len())
        .find(|index| {
            NODES[*index] != primary
                && status["members"].as_array().is_some_and(|members| {
                    members.iter().any(|member| {
                        member["node"] == NODES[*index] && member["shards"].as_u64() > Some(0)
                    })
                })
        })
        .expect("an owner that is not the primary")
}

#[test]
fn asks_through_a_killed_node_end_and_count_once() {
    let cluster = Cluster::new(&NODES, NODES.len(), "failover_child_node");
    cluster.start_until_up(NODES.len());
    asks_end_and_count_once(&cluster, an_owner_not_primary);
}

/// Partitions of three replicas, the killed node the primary of the most of them, mid-load.
const PARTITIONS: usize = 6;

#[test]
fn asks_through_a_killed_partition_primary_end_and_count_once() {
    let cluster =
        Cluster::new(&NODES, NODES.len(), "failover_child_node").with_partitions(PARTITIONS);
    cluster.start_until_up(NODES.len());
    asks_end_and_count_once(&cluster, the_primary_of_the_most_partitions);
}

/// The node that leads the most partitions' groups, as every group's replicas agree.
fn the_primary_of_the_most_partitions(cluster: &Cluster) -> usize {
    let led = eventually("every partition's group has a primary", cluster, || {
        let url = format!("{}/v1/cluster/partitions", cluster.url(0));
        let answer = get(&url, ADMIN)?.json();
        let groups = answer["partitions"].as_array()?;
        let primaries: Vec<&str> = groups
            .iter()
            .filter_map(|here| here["status"]["primary"].as_str())
            .collect();
        (groups.len() == PARTITIONS && primaries.len() == PARTITIONS).then(|| {
            (0..NODES.len())
                .map(|index| primaries.iter().filter(|p| **p == NODES[index]).count())
                .collect::<Vec<usize>>()
        })
    });
    (0..NODES.len())
        .max_by_key(|index| led[*index])
        .expect("three nodes")
}

/// Clients ask counters through every node while `victim(cluster)` is killed and restarted:
/// every ask ends, no acknowledged add is lost or applied twice, keyed tells run once.
fn asks_end_and_count_once(cluster: &Cluster, victim: fn(&Cluster) -> usize) {
    let token = eventually("a tenant", cluster, || create_tenant(cluster, 0, "acme"));
    deploy_counter(cluster, 0, &token, "counter", "");
    for index in 0..NODES.len() {
        wait_bound(cluster, index, &token, "counter", 1);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let clients = clients(cluster, &token);
    let stop = Arc::new(AtomicBool::new(false));
    let askers: Vec<_> = (0..COUNTERS)
        .map(|counter| {
            let client = clients[counter % clients.len()].clone();
            runtime.spawn(ask_until(client, format!("c-{counter}"), stop.clone()))
        })
        .collect();
    let teller = runtime.spawn(tell_until(clients[1].clone(), stop.clone()));

    // Load before, during and after the kill; the killed node comes back with its shards.
    let phase = |what: &str| {
        eprintln!("{what}");
        std::thread::sleep(Duration::from_secs(2));
    };
    phase("asking");
    let victim = victim(cluster);
    cluster.kill(victim);
    phase("killed");
    let survivor = (victim + 1) % NODES.len();
    eventually("the killed node seen unreachable", cluster, || {
        let status = cluster_status(cluster, survivor)?;
        (reachable(&status, NODES[victim]) == Some(false)).then_some(())
    });
    phase("seen unreachable");
    cluster.start(victim);
    eventually("the restarted node reachable", cluster, || {
        let status = cluster_status(cluster, survivor)?;
        (reachable(&status, NODES[victim]) == Some(true)).then_some(())
    });
    wait_bound(cluster, victim, &token, "counter", 1);
    phase("restarted");
    stop.store(true, Ordering::Relaxed);

    let deadline = Instant::now() + PATIENCE;
    let ledgers: Vec<Ledger> = askers
        .into_iter()
        .map(|asker| runtime.block_on(asker).expect("the asker finished"))
        .collect();
    let (committed, failed) = runtime.block_on(teller).expect("the teller finished");
    assert!(Instant::now() < deadline, "every ask ended in time");

    // Every counter ends where its answers say: no acknowledged add lost, none run twice.
    let client = &clients[0];
    for (counter, ledger) in ledgers.iter().enumerate() {
        eprintln!("c-{counter}: {ledger:?}");
        assert!(ledger.answered > 0, "c-{counter} was served");
        let value: i64 = runtime
            .block_on(client.ask("counter", &format!("c-{counter}"), &"Get"))
            .expect("read back");
        let ceiling = ledger.acknowledged + ledger.unknown_since;
        assert!(
            (ledger.acknowledged..=ceiling).contains(&value),
            "c-{counter} is {value}, answered {} with {} unknown outcomes after",
            ledger.acknowledged,
            ledger.unknown_since
        );
    }
    let answered: usize = ledgers.iter().map(|ledger| ledger.answered).sum();
    let longest = ledgers.iter().map(|ledger| ledger.longest_gap).max();
    eprintln!(
        "{answered} asks answered; tells: {committed} keys committed, {failed} failed; the \
         longest a counter went unanswered: {longest:?}"
    );

    // Keys sent twice ran once.
    assert!(committed > 0, "tells were committed");
    let told: i64 = runtime
        .block_on(client.ask("counter", TOLD, &"Get"))
        .expect("read back");
    let committed = committed as i64;
    assert!(
        (committed..=committed + failed as i64).contains(&told),
        "{told} adds for {committed} keys committed (each sent twice), {failed} failed"
    );
}
