//! Several entities under a deterministic simulation of the host, for an entity's author: a
//! dev-dependency that loads built components, sends them messages, lets them tell and ask each
//! other, moves virtual time so reminders fire, crashes the node between a commit and the
//! delivery of its outbox, duplicates and delays deliveries and restarts — every choice drawn
//! from one seed, so a failing run replays exactly. `docs/testing.md` is the guide.
//!
//! The simulation runs the host's own code, not a model of it: the wasmtime runtime
//! (`tessera-runtime`), the entity layer's cells, commits, outbox, receipts and dedup
//! (`tessera-entity`, `tessera-state`). What it replaces are the sources of nondeterminism: the
//! wall clock ([`VirtualClock`]), the disk (a redb database in memory that survives a simulated
//! crash) and the background delivery and reminder tasks, whose single steps ([`Sim::step`])
//! the seeded scheduler picks one at a time instead.
//!
//! [`Testkit`] holds the engine and the compiled components (compile once, simulate many
//! seeds); [`Sim`] is one simulated node from a seed; [`check`] runs a scenario over many
//! seeds and names the first that fails, with how to replay it.

mod check;
mod clock;
mod disk;
mod error;
mod faults;
mod node;
mod schedule;
mod sim;

pub use check::{CheckReport, Outcome, REPLAY_SEED_ENV, check};
pub use clock::{SIMULATION_EPOCH_MS, VirtualClock};
pub use error::{SimError, TestkitError};
pub use faults::Faults;
pub use sim::{SENDERS_SCANNED_MAX, Sim, TRACE_LINES_MAX};

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use tessera_runtime::{Plugin, Runtime, RuntimeConfig};

/// The tenant every simulated entity lives in.
pub const TENANT: &str = "sim";

/// Live instances one simulation may hold: a handful of entities per scenario, with room.
pub const SIM_INSTANCES_MAX: u32 = 256;

/// The engine and the components a simulation runs. Load each component once; every [`Sim`]
/// made from it (one per seed) reuses the compiled code. Clones share both.
///
/// ```no_run
/// use tessera_testkit::{Faults, Testkit};
/// let mut kit = Testkit::new().unwrap();
/// kit.load("accounts", "target/wasm-plugins/wasm32-wasip2/release/bank_account.wasm").unwrap();
/// let mut sim = kit.sim(7, Faults::none()).unwrap();
/// let balance: u64 = sim.ask("accounts", "alice", &serde_json::json!({"Deposit": 10})).unwrap();
/// assert_eq!(balance, 10);
/// ```
#[derive(Clone)]
pub struct Testkit {
    runtime: Arc<Runtime>,
    components: Arc<BTreeMap<String, Arc<Plugin>>>,
}

impl Testkit {
    /// An engine sized for simulations ([`SIM_INSTANCES_MAX`] instances), with no component.
    pub fn new() -> Result<Self, TestkitError> {
        let config = RuntimeConfig {
            instances_max: SIM_INSTANCES_MAX,
            ..RuntimeConfig::default()
        };
        let runtime =
            Runtime::new(config).map_err(|error| TestkitError::Engine(error.to_string()))?;
        Ok(Testkit {
            runtime: Arc::new(runtime),
            components: Arc::default(),
        })
    }

    /// Compiles the component at `path` (built with `tessera build` or
    /// `cargo build --target wasm32-wasip2 --release`) and runs it as `entity_type`.
    pub fn load(
        &mut self,
        entity_type: &str,
        path: impl AsRef<Path>,
    ) -> Result<&mut Self, TestkitError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|error| TestkitError::Read {
            path: path.display().to_string(),
            error: error.to_string(),
        })?;
        let plugin = self
            .runtime
            .load(&bytes)
            .map_err(|error| TestkitError::Load {
                path: path.display().to_string(),
                error: error.to_string(),
            })?;
        Arc::make_mut(&mut self.components).insert(entity_type.to_string(), plugin);
        Ok(self)
    }

    /// A new simulated node, empty, whose every choice comes from `seed`, with `faults`.
    pub fn sim(&self, seed: u64, faults: Faults) -> Result<Sim, SimError> {
        Sim::start(self.clone(), seed, faults)
    }

    /// The entity types loaded so far.
    pub fn entity_types(&self) -> impl Iterator<Item = &str> {
        self.components.keys().map(String::as_str)
    }
}
