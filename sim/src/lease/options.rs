//! What a run is asked to do ([`SimOptions`], with an optional [`Canary`] that breaks one rule
//! on purpose) and what it hands back: a [`SeedReport`] counting what happened, or the first
//! [`Violation`] the checker found.

use std::fmt;

use tessera_sharding::lease::LeaseConfig;

/// Machines a run may have; bounds every per-machine table.
pub const MACHINES_MAX: usize = 16;

/// Shards a run may have; bounds every per-shard table.
pub const SHARDS_MAX: usize = 64;

/// A deliberate bug. Each must be caught by the checker in a good fraction of seeds, which
/// shows the checks can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Canary {
    /// Nodes serve whether or not their lease is valid.
    IgnoreLease,
    /// The coordinator gives a removed owner's shards away at once.
    ReassignWithoutWait,
    /// Holders measure a renewal's validity from when its answer arrived.
    LeaseFromReceipt,
    /// A new owner serves a shard before the state arrives.
    ServeBeforeInstall,
    /// The log takes a deposed coordinator's decisions (no epoch or generation fence).
    NoCoordinatorFence,
}

impl Canary {
    /// Every canary.
    pub const ALL: [Canary; 5] = [
        Canary::IgnoreLease,
        Canary::ReassignWithoutWait,
        Canary::LeaseFromReceipt,
        Canary::ServeBeforeInstall,
        Canary::NoCoordinatorFence,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Canary::IgnoreLease => "ignore-lease",
            Canary::ReassignWithoutWait => "reassign-without-wait",
            Canary::LeaseFromReceipt => "lease-from-receipt",
            Canary::ServeBeforeInstall => "serve-before-install",
            Canary::NoCoordinatorFence => "no-coordinator-fence",
        }
    }

    /// The canary called `name`, if any.
    pub fn from_name(name: &str) -> Option<Canary> {
        Canary::ALL.into_iter().find(|canary| canary.name() == name)
    }
}

/// How one run goes.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The deliberate bug, if any.
    pub canary: Option<Canary>,
    /// Real time during which faults are injected and clients send new messages.
    pub faulty_ms: u64,
    /// Real time after every fault healed, by the end of which every shard must be served
    /// again and every client message acknowledged.
    pub settle_ms: u64,
    /// Machines that may ever run (spares join later).
    pub machines: usize,
    /// Members at the start.
    pub initial_members: usize,
    /// Shards.
    pub shards: usize,
    /// Lease timing used by every node and the coordinator.
    pub lease: LeaseConfig,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            canary: None,
            faulty_ms: 40_000,
            settle_ms: 30_000,
            machines: 6,
            initial_members: 4,
            shards: 12,
            lease: LeaseConfig::default(),
        }
    }
}

impl SimOptions {
    /// Refuses options the simulation cannot run.
    pub fn validate(&self) -> Result<(), String> {
        self.lease.validate()?;
        if self.machines == 0 || self.machines > MACHINES_MAX {
            return Err(format!("machines must be in 1..={MACHINES_MAX}"));
        }
        if self.initial_members == 0 || self.initial_members > self.machines {
            return Err("initial_members must be in 1..=machines".to_string());
        }
        if self.shards == 0 || self.shards > SHARDS_MAX {
            return Err(format!("shards must be in 1..={SHARDS_MAX}"));
        }
        Ok(())
    }
}

/// What happened in one run that passed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeedReport {
    /// Graceful moves committed.
    pub moves: u64,
    /// Shards restarted fresh on a new owner after their owner was removed.
    pub fresh_restarts: u64,
    /// Operator removals of members.
    pub removals: u64,
    /// Graceful leaves that finished (member removed after handing everything off).
    pub leaves: u64,
    /// New members that joined after the start.
    pub joins: u64,
    /// Operator "down" declarations.
    pub downs: u64,
    /// Partitions started.
    pub partitions: u64,
    /// Process crashes.
    pub crashes: u64,
    /// Coordinator failovers.
    pub failovers: u64,
    /// Decisions a deposed coordinator submitted after it was deposed, and how many the log
    /// took (none while the fence holds).
    pub deposed_decisions: u64,
    /// Of those, the ones the log committed.
    pub deposed_committed: u64,
    /// Lease renewals committed.
    pub renewals: u64,
    /// Lease renewals refused.
    pub renewals_refused: u64,
    /// Client messages sent for the first time.
    pub client_messages: u64,
    /// Acknowledgements of a message applied now.
    pub acks_applied: u64,
    /// Acknowledgements of a message found already applied.
    pub acks_duplicate: u64,
    /// Messages applied again in a newer lineage after the older one was declared lost.
    pub reapplied_after_loss: u64,
    /// Network messages sent (copies counted once).
    pub messages_sent: u64,
    /// Messages dropped because too many were in flight.
    pub messages_dropped_full: u64,
}

impl SeedReport {
    /// Adds `other`'s counts into `self`.
    pub fn add(&mut self, other: &SeedReport) {
        self.moves += other.moves;
        self.fresh_restarts += other.fresh_restarts;
        self.removals += other.removals;
        self.leaves += other.leaves;
        self.joins += other.joins;
        self.downs += other.downs;
        self.partitions += other.partitions;
        self.crashes += other.crashes;
        self.failovers += other.failovers;
        self.deposed_decisions += other.deposed_decisions;
        self.deposed_committed += other.deposed_committed;
        self.renewals += other.renewals;
        self.renewals_refused += other.renewals_refused;
        self.client_messages += other.client_messages;
        self.acks_applied += other.acks_applied;
        self.acks_duplicate += other.acks_duplicate;
        self.reapplied_after_loss += other.reapplied_after_loss;
        self.messages_sent += other.messages_sent;
        self.messages_dropped_full += other.messages_dropped_full;
    }
}

/// What the checker found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViolationKind {
    /// Two or more members served `shard` at the same instant.
    TwoServers { shard: usize, members: Vec<String> },
    /// Message `id` was applied twice within one lineage of `shard`'s state.
    AppliedTwice {
        id: u64,
        shard: usize,
        lineage: u64,
        first: String,
        second: String,
        first_at_ms: u64,
    },
    /// After the faults healed, `shard` was not served within the settle time.
    NotServedAfterHeal { shard: usize },
    /// After the faults healed, client messages stayed unacknowledged.
    UnacknowledgedAfterHeal { count: usize, example_id: u64 },
    /// The options could not be run.
    InvalidOptions(String),
}

/// The first problem found in a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The run's seed.
    pub seed: u64,
    /// Real time of the finding.
    pub at_ms: u64,
    /// What was found.
    pub kind: ViolationKind,
}

impl Violation {
    /// Whether this is a safety violation (not a liveness or options problem).
    pub fn is_safety(&self) -> bool {
        matches!(
            self.kind,
            ViolationKind::TwoServers { .. } | ViolationKind::AppliedTwice { .. }
        )
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "seed {} at {} ms: ", self.seed, self.at_ms)?;
        match &self.kind {
            ViolationKind::TwoServers { shard, members } => {
                write!(
                    formatter,
                    "shard {shard} served by {} at once",
                    members.join(" and ")
                )
            }
            ViolationKind::AppliedTwice {
                id,
                shard,
                lineage,
                first,
                second,
                first_at_ms,
            } => write!(
                formatter,
                "message {id} applied twice to shard {shard} (lineage {lineage}): by {first} at \
                 {first_at_ms} ms, then by {second}"
            ),
            ViolationKind::NotServedAfterHeal { shard } => {
                write!(
                    formatter,
                    "shard {shard} not served after the faults healed"
                )
            }
            ViolationKind::UnacknowledgedAfterHeal { count, example_id } => write!(
                formatter,
                "{count} client messages unacknowledged after the faults healed (e.g. {example_id})"
            ),
            ViolationKind::InvalidOptions(reason) => write!(formatter, "invalid options: {reason}"),
        }
    }
}
