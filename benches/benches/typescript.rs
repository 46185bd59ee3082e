//! The TypeScript counter (`plugins/counter-ts`, componentize-js) against the Rust counter, in
//! the same run on the same engine: the component's size and compile time, activation time
//! (a `"Get"` to a fresh entity: instantiate, `activate` reading its state, `handle`; no write,
//! so no commit in the time), the time of a `"Get"` to a live entity, and the resident memory
//! each live entity holds after an `{"Add":1}` (which writes). Printed as a table with the
//! TypeScript/Rust ratio.
//!
//! Not a criterion timing benchmark (the TypeScript component takes seconds to compile, and
//! memory is not a time): it times each phase itself and reads the process's resident set
//! from `/proc/self/statm`. Skipped, saying so, where npm is not installed. Run with
//! `cargo bench -p tessera-benches --bench typescript`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_contract::{EntityAddress, Envelope, TypeKey};
use tessera_entity::{Entities, EntityConfig, EntityParts, TypeBinding, TypeTable};
use tessera_runtime::{InstanceLimits, Plugin, Runtime, RuntimeConfig};
use tessera_state::{GroupCommitConfig, LocalState, StateStore};
use tessera_tests::{resident_bytes, to_msgpack};

/// Fresh entities activated one at a time, for the activation latency.
const ACTIVATIONS: usize = 200;
/// Messages to one live entity, one at a time, for the message latency.
const MESSAGES: usize = 2_000;
/// Entities kept live (each holding its instance) for the memory per entity.
const LIVE_ENTITIES: usize = 300;

struct Measured {
    component_bytes: usize,
    compile: Duration,
    activation_median: Duration,
    activation_p99: Duration,
    message_median: Duration,
    resident_per_entity: u64,
}

/// An entity directory of its own store, running `plugin` as type `name`.
fn entities(runtime: Arc<Runtime>, plugin: Arc<Plugin>, dir: &Path, name: &str) -> Entities {
    let types = Arc::new(TypeTable::default());
    types.bind(
        TypeKey::new("bench", name),
        TypeBinding {
            plugin,
            version: 1,
            limits: InstanceLimits::default(),
            passivate_idle: None,
            mailbox_capacity: 16,
            tenant_live_entities_max: None,
            remember: false,
        },
    );
    let store = StateStore::open(&dir.join(format!("{name}.redb"))).unwrap();
    Entities::standalone(EntityParts {
        runtime,
        state: Arc::new(LocalState::new(store, GroupCommitConfig::default())),
        types,
        remember: None,
        config: EntityConfig::default(),
    })
}

async fn ask(entities: &Entities, name: &str, id: &str, payload: &[u8]) -> Duration {
    let started = Instant::now();
    let (envelope, reply) = Envelope::ask(payload.to_vec());
    if let Err(refused) = entities.deliver(EntityAddress::new("bench", name, id), 0, envelope) {
        panic!("delivery refused: {}", refused.0);
    }
    reply.await.unwrap().unwrap();
    started.elapsed()
}

fn percentile(samples: &mut [Duration], fraction: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * fraction) as usize]
}

/// Latencies on one directory, then resident memory on a fresh one (a stopped directory
/// takes no more messages).
async fn measure(runtime: Arc<Runtime>, plugin: Arc<Plugin>, dir: &Path, name: &str) -> Measured {
    let add = to_msgpack(&serde_json::json!({"Add": 1}));
    let get = to_msgpack(&serde_json::json!("Get"));
    let timed = entities(runtime.clone(), plugin.clone(), &dir.join("timed"), name);
    let mut activations = Vec::with_capacity(ACTIVATIONS);
    for index in 0..ACTIVATIONS {
        activations.push(ask(&timed, name, &format!("fresh-{index}"), &get).await);
    }
    let mut messages = Vec::with_capacity(MESSAGES);
    for _ in 0..MESSAGES {
        messages.push(ask(&timed, name, "fresh-0", &get).await);
    }
    timed.stop_all().await;
    drop(timed);
    let held = entities(runtime, plugin, &dir.join("held"), name);
    let before = resident_bytes();
    for index in 0..LIVE_ENTITIES {
        ask(&held, name, &format!("live-{index}"), &add).await;
    }
    let resident = resident_bytes().saturating_sub(before);
    assert_eq!(held.live_count(), LIVE_ENTITIES);
    held.stop_all().await;
    Measured {
        component_bytes: 0,
        compile: Duration::ZERO,
        activation_median: percentile(&mut activations, 0.5),
        activation_p99: percentile(&mut activations, 0.99),
        message_median: percentile(&mut messages, 0.5),
        resident_per_entity: resident / LIVE_ENTITIES as u64,
    }
}

fn main() {
    if std::env::args().any(|arg| arg == "--test" || arg == "--list") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(counter_ts) =
        tessera_tests::typescript::counter_ts(dir.path(), "the TypeScript benchmark")
    else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let runtime = Arc::new(
        Runtime::new(RuntimeConfig {
            instances_max: (LIVE_ENTITIES + 100) as u32,
            ..RuntimeConfig::default()
        })
        .unwrap(),
    );
    let mut rows = Vec::new();
    for (name, path) in [
        ("counter", PathBuf::from(tessera_tests::COUNTER)),
        ("counter-ts", counter_ts),
    ] {
        let bytes = std::fs::read(&path).expect("the component was built");
        let started = Instant::now();
        let plugin = runtime.load(&bytes).expect("the component loads");
        let compile = started.elapsed();
        let phase_dir = dir.path().join(name);
        for phase in ["timed", "held"] {
            std::fs::create_dir_all(phase_dir.join(phase)).unwrap();
        }
        let measured = rt.block_on(measure(runtime.clone(), plugin, &phase_dir, name));
        rows.push(Measured {
            component_bytes: bytes.len(),
            compile,
            ..measured
        });
    }
    let (rust, typescript) = (&rows[0], &rows[1]);
    println!("TypeScript (componentize-js) against Rust, same run, same engine:");
    println!("| | Rust `counter` | TypeScript `counter-ts` | TypeScript / Rust |");
    println!("| --- | ---: | ---: | ---: |");
    let mib = |bytes: usize| bytes as f64 / f64::from(1 << 20);
    println!(
        "| component | {:.2} MiB | {:.2} MiB | {:.0}x |",
        mib(rust.component_bytes),
        mib(typescript.component_bytes),
        typescript.component_bytes as f64 / rust.component_bytes as f64
    );
    let row = |label: &str, rust: Duration, typescript: Duration| {
        println!(
            "| {label} | {rust:.2?} | {typescript:.2?} | {:.1}x |",
            typescript.as_secs_f64() / rust.as_secs_f64()
        );
    };
    row(
        "compile (once per version)",
        rust.compile,
        typescript.compile,
    );
    row(
        &format!("activation, median of {ACTIVATIONS}"),
        rust.activation_median,
        typescript.activation_median,
    );
    row(
        &format!("activation, p99 of {ACTIVATIONS}"),
        rust.activation_p99,
        typescript.activation_p99,
    );
    row(
        &format!("message to a live entity, median of {MESSAGES}"),
        rust.message_median,
        typescript.message_median,
    );
    println!(
        "| resident memory per live entity ({LIVE_ENTITIES} live) | {:.0} KiB | {:.0} KiB | {:.1}x |",
        rust.resident_per_entity as f64 / 1024.0,
        typescript.resident_per_entity as f64 / 1024.0,
        typescript.resident_per_entity as f64 / rust.resident_per_entity.max(1) as f64
    );
}
