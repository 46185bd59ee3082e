//! Entity runtime benchmarks, each beside the raw wasmtime baseline it is judged against,
//! measured in the same run; the ratios are printed at the end.
//!
//! - activation (instantiate + activate) vs raw `InstancePre::instantiate` (target <= 2x);
//! - one message through an entity cell vs a raw typed call of `handle`, same 64-byte payload
//!   (target <= 3x), both as an ask round trip and pipelined;
//! - state-committing messages per second with group commit vs one durable transaction per
//!   message (target >= 20x and >= 50,000 messages/s).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_benches::baseline::RawInstance;
use tessera_contract::{EntityAddress, Envelope, NoRoutes, TypeKey};
use tessera_entity::{Entities, EntityConfig, EntityParts, TypeBinding, TypeTable};
use tessera_runtime::{Activation, EntityContext, InstanceLimits};
use tessera_state::{EntityState, GroupCommitConfig, LocalState, StateStore};
use tessera_tests::to_msgpack as json_to_msgpack;

const PAYLOAD_BYTES: usize = 64;
const ENTITIES_FOR_COMMITS: usize = 1_000;
const MESSAGES_PER_ENTITY: usize = 20;

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A 64-byte MessagePack `bin` payload (the echo plugin replies with it).
fn payload() -> Vec<u8> {
    let bytes = serde_bytes::ByteBuf::from(vec![0x5a; PAYLOAD_BYTES - 2]);
    let encoded = rmp_serde::to_vec_named(&bytes).expect("encodes");
    assert_eq!(encoded.len(), PAYLOAD_BYTES);
    encoded
}

fn entities(state: Arc<LocalState>, plugin: &str, entity_type: &str) -> Entities {
    let types = Arc::new(TypeTable::default());
    types.bind(
        TypeKey::new("bench", entity_type),
        TypeBinding {
            plugin: tessera_tests::plugin(plugin),
            version: 1,
            limits: InstanceLimits::default(),
            passivate_idle: None,
            mailbox_capacity: 1024,
            tenant_live_entities_max: None,
            remember: false,
        },
    );
    Entities::standalone(EntityParts {
        runtime: tessera_tests::shared_runtime(),
        state,
        types,
        remember: None,
        config: EntityConfig::default(),
    })
}

/// A group-committing state backend in `dir`.
fn local_state(dir: &tempfile::TempDir) -> Arc<LocalState> {
    let store = StateStore::open(&dir.path().join("bench.redb")).unwrap();
    Arc::new(LocalState::new(store, GroupCommitConfig::default()))
}

fn per_op(total: Duration, iterations: u64) -> f64 {
    total.as_secs_f64() * 1e9 / iterations as f64
}

struct Ratios(Vec<(String, f64, f64, String)>);

impl Ratios {
    fn add(&mut self, name: &str, measured_ns: f64, baseline_ns: f64, target: &str) {
        self.0.push((
            name.to_string(),
            measured_ns,
            baseline_ns,
            target.to_string(),
        ));
    }
}

fn bench_activation(c: &mut Criterion, ratios: &mut Ratios) {
    let rt = tokio_runtime();
    let dir = tempfile::tempdir().unwrap();
    let state: Arc<dyn EntityState> = local_state(&dir);
    let runtime = tessera_tests::shared_runtime();
    let plugin = tessera_tests::plugin(tessera_tests::COUNTER);
    let mut group = c.benchmark_group("activation");
    let mut raw_ns = 0.0;
    let mut entity_ns = 0.0;
    group.bench_function("raw_instance_pre_instantiate", |b| {
        b.iter_custom(|iterations| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    let instance = RawInstance::instantiate(&runtime, &plugin, state.clone())
                        .await
                        .unwrap();
                    drop(instance);
                }
                let elapsed = started.elapsed();
                raw_ns = per_op(elapsed, iterations);
                elapsed
            })
        })
    });
    group.bench_function("entity_instantiate_and_activate", |b| {
        b.iter_custom(|iterations| {
            rt.block_on(async {
                let address = EntityAddress::new("bench", "counter", "a");
                let started = Instant::now();
                for _ in 0..iterations {
                    let context = EntityContext {
                        state: state.clone(),
                        router: Arc::new(NoRoutes),
                        entity_state_bytes: 0,
                        last_timer: 0,
                        interrupt: Arc::default(),
                        clock: Arc::new(tessera_runtime::SystemClock),
                    };
                    let mut instance = runtime
                        .instantiate(&plugin, address.clone(), InstanceLimits::default(), context)
                        .await
                        .unwrap();
                    instance.activate(Activation::Restarted).await.unwrap();
                    drop(instance);
                }
                let elapsed = started.elapsed();
                entity_ns = per_op(elapsed, iterations);
                elapsed
            })
        })
    });
    group.finish();
    ratios.add("activation / raw instantiate", entity_ns, raw_ns, "<= 2x");
}

fn bench_message(c: &mut Criterion, ratios: &mut Ratios) {
    let rt = tokio_runtime();
    let dir = tempfile::tempdir().unwrap();
    let state = local_state(&dir);
    let entities = entities(state.clone(), tessera_tests::ECHO, "echo");
    let runtime = tessera_tests::shared_runtime();
    let plugin = tessera_tests::plugin(tessera_tests::ECHO);
    let payload = payload();
    let address = EntityAddress::new("bench", "echo", "e");
    let mut raw = rt
        .block_on(RawInstance::instantiate(&runtime, &plugin, state))
        .unwrap();
    let (mut raw_ns, mut ask_ns, mut pipelined_ns) = (0.0, 0.0, 0.0);
    let mut group = c.benchmark_group("message_64_bytes");
    group.throughput(Throughput::Elements(1));
    group.bench_function("raw_typed_handle_call", |b| {
        b.iter_custom(|iterations| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    let reply = raw.handle(&payload).await.unwrap();
                    debug_assert_eq!(reply.len(), PAYLOAD_BYTES);
                }
                let elapsed = started.elapsed();
                raw_ns = per_op(elapsed, iterations);
                elapsed
            })
        })
    });
    group.bench_function("entity_cell_ask_round_trip", |b| {
        b.iter_custom(|iterations| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    entities
                        .ask(address.clone(), 0, payload.clone(), Duration::from_secs(5))
                        .await
                        .unwrap();
                }
                let elapsed = started.elapsed();
                ask_ns = per_op(elapsed, iterations);
                elapsed
            })
        })
    });
    group.bench_function("entity_cell_pipelined", |b| {
        b.iter_custom(|iterations| {
            rt.block_on(async {
                let started = Instant::now();
                let mut pending = Vec::with_capacity(512);
                for index in 0..iterations {
                    let (envelope, reply) = Envelope::ask(payload.clone());
                    if entities.deliver(address.clone(), 0, envelope).is_err() {
                        panic!("the echo cell refused a message");
                    }
                    pending.push(reply);
                    if pending.len() == 512 || index + 1 == iterations {
                        for reply in pending.drain(..) {
                            reply.await.unwrap().unwrap();
                        }
                    }
                }
                let elapsed = started.elapsed();
                pipelined_ns = per_op(elapsed, iterations);
                elapsed
            })
        })
    });
    group.finish();
    ratios.add("cell ask round trip / raw handle", ask_ns, raw_ns, "<= 3x");
    ratios.add("cell pipelined / raw handle", pipelined_ns, raw_ns, "<= 3x");
}

/// Sends `MESSAGES_PER_ENTITY` state-writing messages to each of `ENTITIES_FOR_COMMITS`
/// counters at once and waits for every reply; returns the time per message.
async fn commit_round(entities: &Entities, add: &[u8]) -> Duration {
    let started = Instant::now();
    let mut replies = Vec::with_capacity(ENTITIES_FOR_COMMITS * MESSAGES_PER_ENTITY);
    for round in 0..MESSAGES_PER_ENTITY {
        for entity in 0..ENTITIES_FOR_COMMITS {
            let (envelope, reply) = Envelope::ask(add.to_vec());
            let address = EntityAddress::new("bench", "counter", format!("c{entity}"));
            if entities.deliver(address, 0, envelope).is_err() {
                panic!("a counter refused a message");
            }
            replies.push(reply);
        }
        let _ = round;
    }
    for reply in replies {
        reply.await.unwrap().unwrap();
    }
    started.elapsed()
}

fn bench_commits(c: &mut Criterion, ratios: &mut Ratios) {
    let rt = tokio_runtime();
    let add = json_to_msgpack(&serde_json::json!({"Add": 1}));
    let messages = (ENTITIES_FOR_COMMITS * MESSAGES_PER_ENTITY) as u64;
    let mut group = c.benchmark_group("state_commits");
    group.throughput(Throughput::Elements(messages));
    group.sample_size(10);
    let (mut group_ns, mut direct_ns) = (0.0, 0.0);
    for (name, grouped) in [
        ("group_commit", true),
        ("one_transaction_per_message", false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(&dir.path().join("bench.redb")).unwrap();
        let state = if grouped {
            Arc::new(LocalState::new(store, GroupCommitConfig::default()))
        } else {
            Arc::new(LocalState::unbatched(store))
        };
        let entities = entities(state, tessera_tests::COUNTER, "counter");
        rt.block_on(commit_round(&entities, &add)); // activate every counter first
        group.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iterations {
                        total += commit_round(&entities, &add).await;
                    }
                    let per_message = per_op(total, iterations * messages);
                    if grouped {
                        group_ns = per_message
                    } else {
                        direct_ns = per_message
                    }
                    total
                })
            })
        });
        rt.block_on(entities.stop_all());
    }
    group.finish();
    ratios.add(
        "group commit msg/s vs one txn per message (speed-up)",
        direct_ns,
        group_ns,
        ">= 20x",
    );
    println!(
        "state_commits: group commit {:.0} msg/s, one txn per message {:.0} msg/s (target >= 50,000 msg/s)",
        1e9 / group_ns,
        1e9 / direct_ns
    );
}

fn benches(c: &mut Criterion) {
    let mut ratios = Ratios(Vec::new());
    bench_activation(c, &mut ratios);
    bench_message(c, &mut ratios);
    bench_commits(c, &mut ratios);
    println!("\nratios (measured / baseline, same run):");
    for (name, measured, baseline, target) in ratios.0 {
        println!(
            "  {name}: {measured:.0} ns vs {baseline:.0} ns = {:.2}x (target {target})",
            measured / baseline
        );
    }
}

criterion_group!(runtime_benches, benches);
criterion_main!(runtime_benches);
