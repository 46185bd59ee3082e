//! An owner stalls (SIGSTOP) with a backlog: clients keep asking one entity on it to store
//! megabyte values, each taking long enough that asks queue inside the entity layer behind the
//! one running. The operator declares the owner down and removes it (its state declared lost);
//! the entity's shard moves and starts a new lineage elsewhere. When the stalled owner wakes
//! (SIGCONT), its lease has long run out: the messages waiting in it commit nothing and answer
//! no value (`Router::may_serve` at commit and before the reply), so no client sees the old
//! lineage again, and the new owner holds every acknowledged write and nothing of the old
//! lineage.
//! Each node is this test binary re-run as a child (`tessera_tests::processes`).

use serde_json::json;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tessera_sharding::{FnvExtractor, ShardExtractor};
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
/// The default shard count of a type (`ShardingConfig::num_shards`).
const NUM_SHARDS: u32 = 128;
/// Keys each entity holds before the stall: a count the new lineage never reaches here.
const OLD_LINEAGE_KEYS: u64 = 100;
/// Clients holding asks open to the stalled owner.
const BACKLOG_CLIENTS: usize = 12;
/// Bytes each backlog ask stores: enough that a few of them queue behind the running one.
const FILL_BYTES: u64 = 1 << 20;
/// How far apart the test's clock reading right after SIGSTOP and the entity's last reading
/// before it may be (ms): the same clock, read a moment apart.
const CLOCK_SLACK_MS: u64 = 50;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by a_stalled_owner_woken_after_its_shard_moved_answers_no_value"]
fn stalled_owner_child_node() {
    run_child_if_asked();
}

/// One answer the stalled owner gave: when it arrived, the key it filled, its status, and the
/// keys the entity said it held.
struct Answer {
    at: Instant,
    key: u64,
    status: u16,
    keys: Option<u64>,
    /// The entity's clock when it ran the fill (ms since the epoch).
    ran_ms: Option<u64>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// Asks `ballast/id` through node `index` to fill key `key`; the keys it then holds.
fn fill(cluster: &Cluster, index: usize, token: &str, id: &str, key: u64, bytes: u64) -> Reply {
    let url = format!("{}/v1/entities/ballast/{id}/ask", cluster.url(index));
    post_json(&url, token, &json!({"Fill": {"key": key, "bytes": bytes}})).expect("answers")
}

#[test]
fn a_stalled_owner_woken_after_its_shard_moved_answers_no_value() {
    let cluster = Cluster::new(&VOTERS, VOTERS.len(), "stalled_owner_child_node");
    cluster.start_until_up(VOTERS.len());
    let primary = eventually("a primary", &cluster, || {
        cluster_status(&cluster, 0)?["primary"]
            .as_str()
            .map(str::to_string)
    });
    let primary = cluster.index_of(&primary);
    let token = eventually("a tenant", &cluster, || {
        create_tenant(&cluster, primary, "acme")
    });
    let plugin = std::fs::read(tessera_tests::BALLAST).expect("the ballast plugin");
    let url = format!("{}/v1/types/ballast/versions", cluster.url(primary));
    let reply = request("POST", &url, &token, Some(("application/wasm", plugin))).expect("deploy");
    assert_eq!(reply.status, 201, "deploy: {}", reply.body);
    for index in 0..VOTERS.len() {
        wait_bound(&cluster, index, &token, "ballast", 1);
    }
    let ids: Vec<String> = (0..24).map(|n| format!("b{n}")).collect();
    for id in &ids {
        let reply = fill(&cluster, primary, &token, id, 0, 1);
        assert_eq!(reply.status, 200, "{id}: {}", reply.body);
    }
    // A counter whose shard another node than the primary owns.
    let shards = get(
        &format!("{}/v1/cluster/shards", cluster.url(primary)),
        ADMIN,
    )
    .expect("the shard table")
    .json();
    let extractor = FnvExtractor::new(NUM_SHARDS);
    let owner_of = |id: &str| {
        let shard = extractor.shard_of(id);
        shards["shards"].as_array()?.iter().find_map(|row| {
            (row["type"] == "acme/ballast" && row["shard"] == shard)
                .then(|| row["node"].as_str().map(str::to_string))?
        })
    };
    let (entity, owner) = ids
        .iter()
        .find_map(|id| {
            let owner = owner_of(id)?;
            (owner != VOTERS[primary]).then(|| (id.clone(), cluster.index_of(&owner)))
        })
        .expect("some entity is owned by another node than the primary");
    for key in 0..OLD_LINEAGE_KEYS {
        let reply = fill(&cluster, owner, &token, &entity, key, 1);
        assert_eq!(reply.status, 200, "{}", reply.body);
    }

    let stop = AtomicBool::new(false);
    let answers = Mutex::new(Vec::<Answer>::new());
    // Deadlines longer than the stall, so the backlog is still wanted when the owner wakes.
    let ask_owner = format!(
        "{}/v1/entities/ballast/{entity}/ask?timeout_ms=25000",
        cluster.url(owner)
    );
    let (stalled_at, stalled_ms, resumed_at, acked_after) = std::thread::scope(|scope| {
        for client in 0..BACKLOG_CLIENTS as u64 {
            let (stop, answers, ask_owner, token) = (&stop, &answers, &ask_owner, &token);
            scope.spawn(move || {
                // Each client fills its own key (a fill is idempotent).
                let key = client;
                while !stop.load(Ordering::Relaxed) {
                    let message = json!({"Fill": {"key": key, "bytes": FILL_BYTES}});
                    let Some(reply) = post_json(ask_owner, token, &message) else {
                        continue;
                    };
                    let answer = Answer {
                        at: Instant::now(),
                        key,
                        status: reply.status,
                        keys: reply.json()["keys"].as_u64(),
                        ran_ms: reply.json()["at_ms"].as_u64(),
                    };
                    answers
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .push(answer);
                }
            });
        }
        std::thread::sleep(Duration::from_millis(300));
        cluster.pause(owner);
        let stalled_at = Instant::now();
        let stalled_ms = now_ms();

        declare_lost(&cluster, primary, VOTERS[owner]);
        // The shard moves: the entity starts a new lineage elsewhere.
        let mut acked_after = vec![0_u64];
        eventually("the entity served by another node", &cluster, || {
            let reply = fill(&cluster, primary, &token, &entity, 0, 1);
            (reply.status == 200).then_some(())
        });
        for key in 1..BACKLOG_CLIENTS as u64 {
            let reply = fill(&cluster, primary, &token, &entity, key, 1);
            assert_eq!(reply.status, 200, "{}", reply.body);
            acked_after.push(key);
        }
        cluster.resume(owner);
        let resumed_at = Instant::now();
        // The stalled owner works through its backlog now; the clients take its answers.
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
        (stalled_at, stalled_ms, resumed_at, acked_after)
    });

    let answers = answers
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let before: Vec<&Answer> = answers.iter().filter(|a| a.at < stalled_at).collect();
    assert!(
        before.iter().any(|a| a.status == 200 && a.ran_ms.is_some()),
        "the owner served the entity, saying when, before it stalled"
    );
    let after: Vec<&Answer> = answers.iter().filter(|a| a.at >= resumed_at).collect();
    assert!(
        after.len() >= BACKLOG_CLIENTS,
        "every held ask was answered after the owner woke: {} answers",
        after.len()
    );
    // A write of the old lineage acknowledged after the wake is one the stalled owner ran after
    // it was stopped (a reply it had already sent before may arrive late: it ran before).
    let stale: Vec<(u64, u64)> = after
        .iter()
        .filter(|a| a.status == 200 && a.keys.is_some_and(|keys| keys >= OLD_LINEAGE_KEYS))
        .filter_map(|a| a.ran_ms.map(|ran_ms| (a.key, ran_ms)))
        .filter(|(_, ran_ms)| *ran_ms > stalled_ms + CLOCK_SLACK_MS)
        .collect();
    assert!(
        stale.is_empty(),
        "the stalled owner acknowledged writes (key, ran at ms) of the lineage it no longer owns, \
         run after it was stopped at {stalled_ms}: {stale:?}"
    );
    // Answers after the wake that carry a value came from the new owner (forwarded). The new
    // lineage holds every key acknowledged in it, and nothing of the old lineage's keys.
    let forwarded: Vec<u64> = after
        .iter()
        .filter(|a| a.status == 200)
        .map(|a| a.key)
        .collect();
    let check = format!("{}/v1/entities/ballast/{entity}/ask", cluster.url(primary));
    let held = post_json(&check, &token, &json!("Check"))
        .expect("answers")
        .json();
    let keys = held["keys"].as_u64().expect("a key count");
    assert!(
        keys <= BACKLOG_CLIENTS as u64,
        "the new lineage holds {keys} keys: the old lineage's came back ({held})"
    );
    let wrong: Vec<u64> = held["wrong"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|key| key.as_u64())
        .collect();
    for key in acked_after.iter().chain(&forwarded) {
        assert!(
            !wrong.contains(key) && *key < keys,
            "acknowledged key {key} is missing from the new lineage: {held}"
        );
    }
}
