//! Entity-to-entity tells, each delivery mode beside the others, measured in the same run; the
//! ratios are printed at the end.
//!
//! One round: 200 relays each get 25 `TellAdd`s (pipelined), and each relay tells its own
//! counter `{"Add": 1}`; the round ends when the counters have handled all 5,000 tells.
//!
//! - effectively-once tells (durable outbox, group commit, receipts) vs today's at-most-once
//!   tells (sent from memory after the commit) — target >= 50 % of the at-most-once rate and
//!   >= 20,000 tells/s;
//! - vs effectively-once with one durable transaction per commit (no group commit);
//! - redelivery after a restart: the time for a node reopened with 1,000 committed but
//!   undelivered tells to deliver them all.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_contract::{EntityAddress, Envelope, TypeKey};
use tessera_entity::{Entities, EntityConfig, EntityParts, TellDelivery, TypeBinding, TypeTable};
use tessera_runtime::InstanceLimits;
use tessera_state::{EntityState, GroupCommitConfig, LocalState, StateStore};
use tessera_tests::to_msgpack as json_to_msgpack;

const SENDERS: usize = 200;
const TELLS_PER_SENDER: usize = 25;
const TELLS_PER_ROUND: u64 = (SENDERS * TELLS_PER_SENDER) as u64;
const PENDING_AT_RESTART: usize = 1_000;

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn binding(plugin: &str) -> TypeBinding {
    TypeBinding {
        plugin: tessera_tests::plugin(plugin),
        version: 1,
        limits: InstanceLimits::default(),
        passivate_idle: None,
        mailbox_capacity: 1024,
        tenant_live_entities_max: None,
        remember: false,
    }
}

fn entities(state: Arc<LocalState>, tells: TellDelivery) -> Entities {
    let types = Arc::new(TypeTable::default());
    types.bind(
        TypeKey::new("bench", "relay"),
        binding(tessera_tests::RELAY),
    );
    types.bind(
        TypeKey::new("bench", "counter"),
        binding(tessera_tests::COUNTER),
    );
    Entities::standalone(EntityParts {
        runtime: tessera_tests::shared_runtime(),
        state,
        types,
        remember: None,
        config: EntityConfig {
            tells,
            ..EntityConfig::default()
        },
    })
}

fn open_store(dir: &std::path::Path) -> StateStore {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match StateStore::open(&dir.join("bench.redb")) {
            Ok(store) => return store,
            // The last backend's writer thread has not let go of the file yet.
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(error) => panic!("the store does not open: {error}"),
        }
    }
}

/// Messages the counters have handled so far.
fn counter_messages(entities: &Entities) -> u64 {
    entities
        .all_counters()
        .into_iter()
        .filter(|(key, _)| key.entity_type == "counter")
        .map(|(_, counters)| counters.messages.sum())
        .sum()
}

/// Sends `per_sender` tells through each relay and returns once the counters handled them.
async fn round(entities: &Entities, per_sender: usize) -> Duration {
    let before = counter_messages(entities);
    let started = Instant::now();
    for _ in 0..per_sender {
        for sender in 0..SENDERS {
            let tell = serde_json::json!({"TellAdd": {
                "entity_type": "counter", "id": format!("c{sender}"), "amount": 1
            }});
            let relay = EntityAddress::new("bench", "relay", format!("r{sender}"));
            let envelope = Envelope::tell(json_to_msgpack(&tell));
            if entities.deliver(relay, 0, envelope).is_err() {
                panic!("a relay refused a message");
            }
        }
    }
    let expected = before + (SENDERS * per_sender) as u64;
    while counter_messages(entities) < expected {
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    started.elapsed()
}

fn bench_modes(c: &mut Criterion) -> Vec<(String, f64)> {
    let rt = tokio_runtime();
    let mut group = c.benchmark_group("entity_tells");
    group.throughput(Throughput::Elements(TELLS_PER_ROUND));
    group.sample_size(10);
    let mut rates = Vec::new();
    for (name, tells, grouped) in [
        ("effectively_once", TellDelivery::EffectivelyOnce, true),
        ("at_most_once", TellDelivery::AtMostOnce, true),
        (
            "effectively_once_one_txn_per_commit",
            TellDelivery::EffectivelyOnce,
            false,
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = open_store(dir.path());
        let state = if grouped {
            Arc::new(LocalState::new(store, GroupCommitConfig::default()))
        } else {
            Arc::new(LocalState::unbatched(store))
        };
        let entities = rt.block_on(async {
            let entities = entities(state, tells);
            entities.start_messaging();
            round(&entities, 1).await; // activate every relay and counter first
            entities
        });
        let mut per_tell_ns = 0.0;
        group.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iterations {
                        total += round(&entities, TELLS_PER_SENDER).await;
                    }
                    per_tell_ns = total.as_secs_f64() * 1e9 / (iterations * TELLS_PER_ROUND) as f64;
                    total
                })
            })
        });
        rt.block_on(entities.stop_all());
        rates.push((name.to_string(), 1e9 / per_tell_ns));
    }
    group.finish();
    rates
}

/// Commits `PENDING_AT_RESTART` tells with delivery stopped, reopens the store in a fresh
/// directory of entities and times until every tell is delivered.
fn redelivery_after_restart(rt: &tokio::runtime::Runtime) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let state = Arc::new(LocalState::new(
            open_store(dir.path()),
            GroupCommitConfig::default(),
        ));
        let entities = entities(state.clone(), TellDelivery::EffectivelyOnce);
        // Delivery not started: the tells stay in the outboxes, as after a crash.
        let per_sender = PENDING_AT_RESTART / SENDERS;
        let mut replies = Vec::new();
        for _ in 0..per_sender {
            for sender in 0..SENDERS {
                let tell = serde_json::json!({"TellAdd": {
                    "entity_type": "counter", "id": format!("c{sender}"), "amount": 1
                }});
                let relay = EntityAddress::new("bench", "relay", format!("r{sender}"));
                let (envelope, reply) = Envelope::ask(json_to_msgpack(&tell));
                if entities.deliver(relay, 0, envelope).is_err() {
                    panic!("a relay refused a message");
                }
                replies.push(reply);
            }
        }
        for reply in replies {
            reply.await.unwrap().unwrap();
        }
        assert_eq!(
            state.pending_messages().unwrap().0,
            PENDING_AT_RESTART as u64
        );
        entities.stop_all().await;
    });
    rt.block_on(async {
        let state = Arc::new(LocalState::new(
            open_store(dir.path()),
            GroupCommitConfig::default(),
        ));
        let entities = entities(state.clone(), TellDelivery::EffectivelyOnce);
        let started = Instant::now();
        entities.start_messaging();
        while counter_messages(&entities) < PENDING_AT_RESTART as u64 {
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        let elapsed = started.elapsed();
        entities.stop_all().await;
        elapsed
    })
}

fn benches(c: &mut Criterion) {
    let rates = bench_modes(c);
    let rt = tokio_runtime();
    let restarts: Vec<Duration> = (0..5).map(|_| redelivery_after_restart(&rt)).collect();
    let rate = |name: &str| {
        rates
            .iter()
            .find(|(found, _)| found == name)
            .map_or(0.0, |(_, rate)| *rate)
    };
    let (once, at_most_once, unbatched) = (
        rate("effectively_once"),
        rate("at_most_once"),
        rate("effectively_once_one_txn_per_commit"),
    );
    println!("\nentity tells (same run, 2 worker threads each):");
    println!("  effectively-once, group commit:      {once:.0} tells/s (target >= 20,000)");
    println!("  at-most-once (baseline):             {at_most_once:.0} tells/s");
    println!("  effectively-once, one txn per commit: {unbatched:.0} tells/s");
    println!(
        "  effectively-once / at-most-once = {:.2} (target >= 0.50)",
        once / at_most_once
    );
    println!(
        "  group commit / one txn per commit = {:.1}x",
        once / unbatched
    );
    let mut sorted = restarts.clone();
    sorted.sort();
    println!(
        "  redelivery of {PENDING_AT_RESTART} tells after a restart: median {:?} (min {:?}, max {:?})",
        sorted[sorted.len() / 2],
        sorted[0],
        sorted[sorted.len() - 1]
    );
}

criterion_group!(messaging_benches, benches);
criterion_main!(messaging_benches);
