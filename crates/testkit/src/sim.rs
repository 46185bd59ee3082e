//! One simulated node driven from a seed ([`Sim`]): the client side (ask, tell, read state),
//! time (advance the virtual clock), faults (crash and restart) and the scheduler's steps, each
//! a single delivery, acknowledgement or reminder firing made through the entity layer's own
//! stepping API. Every step is recorded in a trace; the same seed and scenario give the same
//! trace.

use super::clock::VirtualClock;
use super::disk::MemoryDisk;
use super::error::SimError;
use super::faults::Faults;
use super::node::Node;
use super::schedule::{Action, DELAY_STEPS_MAX, LateDuplicates, Progress};
use super::{TENANT, Testkit};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;
use tessera_contract::EntityAddress;
use tessera_entity::{DELIVERY_BATCH_MAX, EntitiesStats, ReminderAttempt, TellAttempt};
use tessera_runtime::Clock;

/// Senders with a non-empty outbox, and due reminders, one step looks at: a scenario with more
/// has its later ones wait for the earlier to drain, as on a node whose services are full.
pub const SENDERS_SCANNED_MAX: usize = 256;

/// Lines a trace keeps; a run past it records a last line saying so, and nothing more.
pub const TRACE_LINES_MAX: usize = 100_000;

/// How long a client message waits for its reply, in real time: a guest that loops hits its
/// CPU deadline long before.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a passivation may take to finish `deactivate`, in real time.
const PASSIVATION_WAIT_MAX: Duration = Duration::from_secs(10);

/// A simulated node with its entities, driven from a seed.
///
/// ```no_run
/// use serde_json::json;
/// use tessera_testkit::{Faults, Testkit};
/// let mut kit = Testkit::new().unwrap();
/// kit.load("accounts", "bank_account.wasm").unwrap();
/// let mut sim = kit.sim(42, Faults::all()).unwrap();
/// sim.tell("accounts", "alice", &json!({"Deposit": 100})).unwrap();
/// sim.tell("accounts", "alice", &json!({"Transfer": {"to": "bob", "amount": 30}})).unwrap();
/// sim.run_until_quiet(10_000).unwrap();
/// assert_eq!(sim.state::<u64>("accounts", "bob", "balance").unwrap(), Some(30));
/// ```
pub struct Sim {
    kit: Testkit,
    seed: u64,
    faults: Faults,
    rng: StdRng,
    scenario_rng: StdRng,
    clock: VirtualClock,
    disk: MemoryDisk,
    /// The running life of the node; `None` only if a restart failed.
    node: Option<Node>,
    progress: Progress,
    late: LateDuplicates,
    trace: Vec<String>,
    steps: u64,
    crashes: u64,
}

impl Sim {
    pub(crate) fn start(kit: Testkit, seed: u64, faults: Faults) -> Result<Sim, SimError> {
        let clock = VirtualClock::default();
        let disk = MemoryDisk::default();
        let node = Node::start(&kit, &disk, &clock)?;
        Ok(Sim {
            kit,
            seed,
            faults,
            rng: StdRng::seed_from_u64(seed),
            // The scenario's own draws come from the seed too, but from a stream apart, so a
            // scenario that draws more does not shift the scheduler's choices.
            scenario_rng: StdRng::seed_from_u64(seed ^ 0x5eed_5eed_5eed_5eed),
            clock,
            disk,
            node: Some(node),
            progress: Progress::default(),
            late: LateDuplicates::default(),
            trace: Vec::new(),
            steps: 0,
            crashes: 0,
        })
    }

    /// The seed this run replays from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Random numbers for the scenario itself (amounts, which entity next), from the seed.
    pub fn rng(&mut self) -> &mut StdRng {
        &mut self.scenario_rng
    }

    /// The address of entity `id` of `entity_type` in the simulation's tenant.
    pub fn address(entity_type: &str, id: &str) -> EntityAddress {
        EntityAddress::new(TENANT, entity_type, id)
    }

    /// Sends `message` to `entity_type/id` as a client and returns the decoded reply, once the
    /// entity committed the message (its tells wait in its outbox for [`step`](Self::step)).
    pub fn ask<R: DeserializeOwned>(
        &mut self,
        entity_type: &str,
        id: &str,
        message: &impl Serialize,
    ) -> Result<R, SimError> {
        let reply = self.send(entity_type, id, message)?;
        rmp_serde::from_slice(&reply).map_err(|error| SimError::Codec(error.to_string()))
    }

    /// Sends `message` to `entity_type/id` as a client and waits until it is committed.
    pub fn tell(
        &mut self,
        entity_type: &str,
        id: &str,
        message: &impl Serialize,
    ) -> Result<(), SimError> {
        self.send(entity_type, id, message).map(drop)
    }

    fn send(
        &mut self,
        entity_type: &str,
        id: &str,
        message: &impl Serialize,
    ) -> Result<Vec<u8>, SimError> {
        let payload =
            rmp_serde::to_vec_named(message).map_err(|error| SimError::Codec(error.to_string()))?;
        let to = Self::address(entity_type, id);
        let node = self.node()?;
        let reply =
            node.runtime
                .block_on(node.entities.ask(to.clone(), 0, payload, CLIENT_TIMEOUT));
        let outcome = match &reply {
            Ok(_) => "ok".to_string(),
            Err(error) => format!("{:?}: {}", error.kind, error.message),
        };
        self.record(format!("client -> {to}: {outcome}"));
        Ok(reply?)
    }

    /// Passivates `entity_type/id` as the host does when it is idle or evicted: `deactivate`
    /// runs and the instance is dropped; its state and reminders stay. Waits until it is gone.
    pub fn passivate(&mut self, entity_type: &str, id: &str) -> Result<(), SimError> {
        let entity = Self::address(entity_type, id);
        let node = self.node()?;
        node.entities.passivate(&entity)?;
        let entities = &node.entities;
        // The cell deactivates on its own task; give it the runtime until it has left.
        let gone = node.runtime.block_on(async {
            let started = std::time::Instant::now();
            while entities.is_live(&entity) {
                if started.elapsed() > PASSIVATION_WAIT_MAX {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            true
        });
        if !gone {
            return Err(SimError::Message(tessera_contract::MessageError::new(
                tessera_contract::ErrorKind::Timeout,
                format!("{entity} did not passivate within {PASSIVATION_WAIT_MAX:?}"),
            )));
        }
        self.record(format!("passivate {entity}"));
        Ok(())
    }

    /// The committed value of `key` of `entity_type/id`, decoded.
    pub fn state<T: DeserializeOwned>(
        &self,
        entity_type: &str,
        id: &str,
        key: &str,
    ) -> Result<Option<T>, SimError> {
        let entity = Self::address(entity_type, id);
        let bytes = self
            .node()?
            .entities
            .state()
            .get(&entity, key)
            .map_err(|error| SimError::Store(error.to_string()))?;
        bytes
            .map(|bytes| rmp_serde::from_slice(&bytes))
            .transpose()
            .map_err(|error| SimError::Codec(error.to_string()))
    }

    /// Now on the virtual clock, in ms since the Unix epoch (what guests read from `now-ms`).
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Moves virtual time `ms` forward: reminders due by then fire in later steps.
    pub fn advance(&mut self, ms: u64) {
        self.clock.advance(ms);
        self.record(format!("advance {ms} ms"));
    }

    /// When the earliest held reminder is due, if any.
    pub fn next_due_ms(&self) -> Result<Option<u64>, SimError> {
        self.node()?
            .entities
            .state()
            .next_due()
            .map_err(|error| SimError::Store(error.to_string()))
    }

    /// Outbox entries and reminders the store holds.
    pub fn pending(&self) -> Result<(u64, u64), SimError> {
        self.node()?
            .entities
            .state()
            .pending_messages()
            .map_err(|error| SimError::Store(error.to_string()))
    }

    /// Crashes the node now and restarts it: instances and delivery's unacknowledged progress
    /// are lost, everything committed stays; delivery resumes from the outboxes.
    pub fn crash(&mut self) -> Result<(), SimError> {
        self.crashes += 1;
        self.progress.forget();
        // The old life ends before the next opens the disk.
        if let Some(node) = self.node.take() {
            node.stop();
        }
        self.node = Some(Node::start(&self.kit, &self.disk, &self.clock)?);
        self.record("crash and restart".to_string());
        Ok(())
    }

    /// The entity layer's counters in this life of the node (a crash starts them over).
    pub fn stats(&self) -> Result<&EntitiesStats, SimError> {
        Ok(self.node()?.entities.stats())
    }

    fn node(&self) -> Result<&Node, SimError> {
        self.node.as_ref().ok_or(SimError::Stopped)
    }

    /// What happened so far, one line per client message, step and fault.
    pub fn trace(&self) -> &[String] {
        &self.trace
    }

    /// Crashes so far.
    pub fn crashes(&self) -> u64 {
        self.crashes
    }

    /// Scheduler steps so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Steps until nothing is left to deliver or fire now, at most `steps_max`; returns the
    /// steps taken. Reminders not yet due stay (move time with [`advance`](Self::advance)).
    pub fn run_until_quiet(&mut self, steps_max: u64) -> Result<u64, SimError> {
        for taken in 0..steps_max {
            if !self.step()? {
                return Ok(taken);
            }
        }
        Err(SimError::NotQuiet { steps: steps_max })
    }

    /// One scheduling step, chosen from the seed: maybe a fault, then the next delivery of a
    /// sender, the acknowledgement of a sender's delivered tells, or the firing of a due
    /// reminder. False if nothing was left to do now.
    pub fn step(&mut self) -> Result<bool, SimError> {
        let mut actions = self.actions()?;
        if actions.is_empty() && self.progress.any_delayed() {
            // Nothing else can move: the held-back senders' time is up.
            self.progress.delayed.clear();
            actions = self.actions()?;
        }
        if actions.is_empty() {
            return Ok(false);
        }
        self.steps += 1;
        self.progress.tick();
        if self.roll(self.faults.crash_per_mille) {
            self.crash()?;
            return Ok(true);
        }
        let action = actions[self.rng.random_range(0..actions.len())].clone();
        match action {
            Action::Deliver(sender, entry) => self.deliver(sender, entry)?,
            Action::Acknowledge(sender) => self.acknowledge(sender)?,
            Action::Fire(entity, timer) => self.fire(entity, timer)?,
        }
        Ok(true)
    }

    /// What may happen now, in a deterministic order.
    fn actions(&self) -> Result<Vec<Action>, SimError> {
        let state = self.node()?.entities.state();
        let store = |error: tessera_state::StoreError| SimError::Store(error.to_string());
        let mut actions = Vec::new();
        for sender in state
            .outbox_senders(None, SENDERS_SCANNED_MAX)
            .map_err(store)?
        {
            if self.progress.is_delayed(&sender) {
                continue;
            }
            let outbox = state.outbox(&sender, DELIVERY_BATCH_MAX).map_err(store)?;
            if let Some(next) = self.progress.next_of(&sender, &outbox) {
                actions.push(Action::Deliver(sender.clone(), next.clone()));
            }
            if self.progress.delivered.contains_key(&sender) {
                actions.push(Action::Acknowledge(sender));
            }
        }
        let now = self.clock.now_ms();
        for due in state
            .due_reminders(now, None, SENDERS_SCANNED_MAX)
            .map_err(store)?
        {
            actions.push(Action::Fire(due.entity, due.timer));
        }
        Ok(actions)
    }

    fn deliver(
        &mut self,
        sender: EntityAddress,
        entry: tessera_state::OutboxEntry,
    ) -> Result<(), SimError> {
        if self.roll(self.faults.delay_per_mille) {
            let steps = self.rng.random_range(1..=DELAY_STEPS_MAX);
            self.progress.delayed.insert(sender.clone(), steps);
            self.record(format!("delay {sender} for {steps} steps"));
            return Ok(());
        }
        let attempt = self.attempt(&sender, &entry, "deliver")?;
        if matches!(attempt, TellAttempt::Retry(_)) {
            return Ok(());
        }
        if self.roll(self.faults.duplicate_per_mille) {
            // Its acknowledgement was lost: the service sends it again.
            self.attempt(&sender, &entry, "duplicate")?;
        }
        self.progress
            .delivered
            .entry(sender)
            .or_default()
            .push(entry);
        Ok(())
    }

    fn attempt(
        &mut self,
        sender: &EntityAddress,
        entry: &tessera_state::OutboxEntry,
        what: &str,
    ) -> Result<TellAttempt, SimError> {
        let node = self.node()?;
        let attempt = node
            .runtime
            .block_on(node.entities.deliver_tell(sender, entry));
        self.record(format!(
            "{what} {sender}#{} -> {}: {}",
            entry.seq,
            entry.to,
            tell_outcome(&attempt)
        ));
        Ok(attempt)
    }

    fn acknowledge(&mut self, sender: EntityAddress) -> Result<(), SimError> {
        let delivered = self.progress.delivered.remove(&sender).unwrap_or_default();
        let seqs = delivered.iter().map(|entry| entry.seq).collect::<Vec<_>>();
        let node = self.node()?;
        node.runtime
            .block_on(node.entities.acknowledge_tells(&sender, seqs.clone()))
            .map_err(|error| SimError::Store(error.to_string()))?;
        self.record(format!("acknowledge {sender} {seqs:?}"));
        for entry in delivered {
            self.late.keep(&sender, entry);
        }
        if self.late.len() > 0 && self.roll(self.faults.duplicate_per_mille) {
            let index = self.rng.random_range(0..self.late.len());
            if let Some((sender, entry)) = self.late.get(index).cloned() {
                self.attempt(&sender, &entry, "late duplicate")?;
            }
        }
        Ok(())
    }

    fn fire(&mut self, entity: EntityAddress, timer: u64) -> Result<(), SimError> {
        let times = if self.roll(self.faults.duplicate_per_mille) {
            2
        } else {
            1
        };
        for _ in 0..times {
            let node = self.node()?;
            let attempt = node
                .runtime
                .block_on(node.entities.fire_reminder(&entity, timer));
            let outcome = match &attempt {
                ReminderAttempt::Fired => "fired".to_string(),
                ReminderAttempt::Gone => "gone".to_string(),
                ReminderAttempt::Retry(error) => format!("retry ({:?})", error.kind),
                ReminderAttempt::GivenUp(error) => format!("given up ({:?})", error.kind),
                _ => format!("{attempt:?}"),
            };
            self.record(format!("fire {entity} timer {timer}: {outcome}"));
        }
        Ok(())
    }

    fn roll(&mut self, per_mille: u32) -> bool {
        per_mille > 0 && self.rng.random_range(0..1000) < per_mille
    }

    fn record(&mut self, line: String) {
        match self.trace.len() {
            n if n < TRACE_LINES_MAX => self.trace.push(line),
            n if n == TRACE_LINES_MAX => self.trace.push("(trace full)".to_string()),
            _ => {}
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            node.stop();
        }
    }
}

fn tell_outcome(attempt: &TellAttempt) -> String {
    match attempt {
        TellAttempt::Acknowledged => "acknowledged".to_string(),
        TellAttempt::Retry(error) => format!("retry ({:?})", error.kind),
        TellAttempt::DeadLetter(error) => format!("dead letter ({:?})", error.kind),
        _ => format!("{attempt:?}"),
    }
}
