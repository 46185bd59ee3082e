//! One run: the world that owns every node, the log, the coordinator, the clients and the
//! network, pops events in real-time order, routes what each step sends, and runs the checks
//! after every event. Fault injection lives in [`super::faults`], the log's command handling in
//! [`super::log_service`].

use super::checker::{AckLedger, check_single_serving};
use super::client::Clients;
use super::clock::DriftingClock;
use super::coordinator::Coordinator;
use super::log::MetadataLog;
use super::message::{Endpoint, Message, ReplyKind};
use super::network::{LinkFaults, Topology};
use super::node::{Node, Outbox};
use super::options::{SeedReport, SimOptions, Violation, ViolationKind};
use super::queue::{Event, EventQueue};
use super::table::MemberId;
use crate::rng::SimRng;

/// How often each node process looks at its clock.
const NODE_TICK_MS: u64 = 100;

/// How often the coordinator instance decides.
const COORDINATOR_TICK_MS: u64 = 100;

/// How often clients send.
const CLIENT_TICK_MS: u64 = 20;

/// How often faults may strike.
pub(super) const FAULT_TICK_MS: u64 = 250;

/// How long a deposed coordinator stays stalled, at most, before it wakes and goes on
/// deciding on the table as it last read it (a SIGSTOPped metadata primary resumed).
pub(super) const DEPOSED_STALL_MS_MAX: u64 = 10_000;

/// How long a deposed coordinator goes on deciding, at most, once awake, before it notices.
pub(super) const DEPOSED_FOR_MS_MAX: u64 = 3_000;

/// At the end of a run every shard must have been served within this window.
const SERVED_WITHIN_MS: u64 = 5_000;

/// Everything in one run.
pub(super) struct World {
    pub(super) seed: u64,
    pub(super) options: SimOptions,
    pub(super) real_ms: u64,
    pub(super) rng: SimRng,
    pub(super) queue: EventQueue,
    pub(super) topology: Topology,
    pub(super) links: LinkFaults,
    pub(super) nodes: Vec<Node>,
    pub(super) log: MetadataLog,
    pub(super) coordinator: Option<Coordinator>,
    /// A coordinator deposed by a failover that has not noticed yet: it goes on deciding on
    /// its copy of the table as it last read it, until `until_ms`; its decisions reach the log
    /// with its epoch (`MetadataLog::decide_as`), and nothing it sends reaches a node (a
    /// region acts only on what the catalog committed).
    pub(super) deposed: Option<Deposed>,
    pub(super) clients: Clients,
    pub(super) ledger: AckLedger,
    pub(super) last_served_ms: Vec<Option<u64>>,
    pub(super) healed: bool,
    pub(super) report: SeedReport,
    violation: Option<ViolationKind>,
}

/// A deposed coordinator and what it believes.
pub(super) struct Deposed {
    pub(super) coordinator: Coordinator,
    pub(super) belief: MetadataLog,
    pub(super) epoch: u64,
    /// When it wakes from its stall and decides again.
    pub(super) wakes_ms: u64,
    pub(super) until_ms: u64,
}

/// Runs one seed to its end, or to the first violation.
///
/// ```
/// use tessera_sim::lease::{SimOptions, run_seed};
/// let options = SimOptions { faulty_ms: 5_000, settle_ms: 20_000, ..SimOptions::default() };
/// let report = run_seed(1, &options).expect("the protocol is safe");
/// assert!(report.renewals > 0);
/// ```
pub fn run_seed(seed: u64, options: &SimOptions) -> Result<SeedReport, Violation> {
    if let Err(reason) = options.validate() {
        return Err(Violation {
            seed,
            at_ms: 0,
            kind: ViolationKind::InvalidOptions(reason),
        });
    }
    World::new(seed, options.clone()).run()
}

impl World {
    fn new(seed: u64, options: SimOptions) -> World {
        let mut rng = SimRng::new(seed);
        let drift_ppm = options.lease.drift_ppm;
        let mut nodes: Vec<Node> = (0..options.machines)
            .map(|machine| {
                let clock = DriftingClock::random(&mut rng, drift_ppm);
                Node::new(
                    machine,
                    clock,
                    options.lease,
                    options.shards,
                    options.canary,
                )
            })
            .collect();
        let initial: Vec<MemberId> = nodes
            .iter_mut()
            .take(options.initial_members)
            .map(|node| {
                node.join_as_new_member(0);
                node.member()
            })
            .collect();
        let coordinator_clock = DriftingClock::random(&mut rng, drift_ppm);
        let mut queue = EventQueue::default();
        for machine in 0..options.machines {
            queue.schedule(rng.below(NODE_TICK_MS), Event::NodeTick { machine });
        }
        queue.schedule(0, Event::CoordinatorTick);
        queue.schedule(0, Event::ClientTick);
        queue.schedule(FAULT_TICK_MS, Event::FaultTick);
        queue.schedule(options.faulty_ms, Event::Heal);
        World {
            seed,
            real_ms: 0,
            topology: Topology::healed(options.machines),
            links: LinkFaults::stormy(options.machines),
            log: {
                let log = MetadataLog::new(&initial, options.shards);
                if options.canary == Some(super::Canary::NoCoordinatorFence) {
                    log.without_fence()
                } else {
                    log
                }
            },
            deposed: None,
            coordinator: Some(Coordinator::start(
                coordinator_clock,
                options.lease,
                0,
                options.canary,
            )),
            clients: Clients::new(options.machines, options.shards),
            ledger: AckLedger::default(),
            last_served_ms: vec![None; options.shards],
            healed: false,
            report: SeedReport::default(),
            violation: None,
            nodes,
            queue,
            rng,
            options,
        }
    }

    fn run(mut self) -> Result<SeedReport, Violation> {
        let end_ms = self.options.faulty_ms + self.options.settle_ms;
        while let Some((at_ms, event)) = self.queue.pop() {
            if at_ms > end_ms {
                break;
            }
            self.real_ms = at_ms;
            self.handle(event);
            self.check()?;
        }
        self.real_ms = end_ms;
        self.check_liveness()?;
        self.report.reapplied_after_loss = self.ledger.reapplied_after_loss;
        Ok(self.report)
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver { from, to, message } => self.deliver(from, to, message),
            Event::NodeTick { machine } => {
                let mut out = Outbox::default();
                if let Some(node) = self.nodes.get_mut(machine) {
                    node.tick(self.real_ms, &mut out);
                }
                self.route_node(machine, out);
                self.queue
                    .schedule(self.real_ms + NODE_TICK_MS, Event::NodeTick { machine });
            }
            Event::CoordinatorTick => {
                self.coordinator_tick();
                self.queue
                    .schedule(self.real_ms + COORDINATOR_TICK_MS, Event::CoordinatorTick);
            }
            Event::CoordinatorStart => self.start_coordinator(),
            Event::ClientTick => {
                let (sends, created) = self.clients.tick(self.real_ms, &mut self.rng, !self.healed);
                self.report.client_messages += created;
                self.route(Endpoint::Client, sends);
                self.queue
                    .schedule(self.real_ms + CLIENT_TICK_MS, Event::ClientTick);
            }
            Event::FaultTick => {
                if !self.healed {
                    self.inject_fault();
                    self.queue
                        .schedule(self.real_ms + FAULT_TICK_MS, Event::FaultTick);
                }
            }
            Event::Heal => self.heal(),
        }
    }

    fn deliver(&mut self, from: Endpoint, to: Endpoint, message: Message) {
        match to {
            Endpoint::Log => self.at_log(from, message),
            Endpoint::Machine(machine) => {
                let mut out = Outbox::default();
                if let Some(node) = self.nodes.get_mut(machine) {
                    node.receive(message, self.real_ms, &mut out);
                }
                self.route_node(machine, out);
            }
            Endpoint::Client => {
                if let Message::Reply { id, .. } = message {
                    self.clients.acknowledged(id);
                }
            }
        }
    }

    fn coordinator_tick(&mut self) {
        if !self.topology.log_available() {
            return;
        }
        let Some(coordinator) = self.coordinator.as_mut() else {
            return;
        };
        let mut sends = Vec::new();
        let counts = coordinator.tick(&mut self.log, self.real_ms, &mut sends);
        self.report.moves += counts.moves;
        self.report.fresh_restarts += counts.fresh_restarts;
        self.report.leaves += counts.leaves;
        self.route(Endpoint::Log, sends);
        self.deposed_tick();
    }

    /// The deposed coordinator decides on its stale copy; each decision goes to the log with
    /// its epoch. Committed ones (only without the fence) are announced like any change.
    fn deposed_tick(&mut self) {
        let Some(deposed) = self.deposed.as_mut() else {
            return;
        };
        if self.real_ms >= deposed.until_ms {
            self.deposed = None;
            return;
        }
        if self.real_ms < deposed.wakes_ms {
            return;
        }
        let before = deposed.belief.table().clone();
        let mut unheard = Vec::new();
        deposed
            .coordinator
            .tick(&mut deposed.belief, self.real_ms, &mut unheard);
        let after = deposed.belief.table().clone();
        let epoch = deposed.epoch;
        let mut committed = false;
        for (shard, (old, new)) in before.entries.iter().zip(&after.entries).enumerate() {
            if old == new {
                continue;
            }
            self.report.deposed_decisions += 1;
            if self.log.decide_as(epoch, shard, old.generation, *new) {
                self.report.deposed_committed += 1;
                committed = true;
            }
        }
        if committed {
            let mut sends = Vec::new();
            super::coordinator::announce(&self.log, &mut sends);
            self.route(Endpoint::Log, sends);
        }
    }

    /// A new coordinator instance, with its own clock and an empty memory.
    pub(super) fn start_coordinator(&mut self) {
        self.log.seat_coordinator();
        let clock = DriftingClock::random(&mut self.rng, self.options.lease.drift_ppm);
        let canary = self.options.canary;
        self.coordinator = Some(Coordinator::start(
            clock,
            self.options.lease,
            self.real_ms,
            canary,
        ));
    }

    /// Records what a node applied, then sends what it sent.
    fn route_node(&mut self, machine: usize, out: Outbox) {
        for ack in &out.applied {
            self.report.acks_applied += 1;
            if let Err(violation) = self.ledger.record(ack, self.real_ms) {
                self.violation.get_or_insert(violation);
            }
        }
        for (_, message) in &out.sends {
            if let Message::Reply {
                kind: ReplyKind::Duplicate,
                ..
            } = message
            {
                self.report.acks_duplicate += 1;
            }
        }
        self.route(Endpoint::Machine(machine), out.sends);
    }

    pub(super) fn route(&mut self, from: Endpoint, sends: Vec<(Endpoint, Message)>) {
        for (to, message) in sends {
            self.send(from, to, message);
        }
    }

    /// Puts one message on the network: its fate is decided now.
    fn send(&mut self, from: Endpoint, to: Endpoint, message: Message) {
        self.report.messages_sent += 1;
        if !self.topology.can_send(from, to) {
            return;
        }
        let copies = self.links.copies(&mut self.rng);
        for _ in 0..copies {
            let at_ms = self.real_ms + self.links.delay_ms(&mut self.rng, to);
            let message = message.clone();
            if !self
                .queue
                .schedule(at_ms, Event::Deliver { from, to, message })
            {
                self.report.messages_dropped_full += 1;
            }
        }
    }

    fn violation(&self, kind: ViolationKind) -> Violation {
        Violation {
            seed: self.seed,
            at_ms: self.real_ms,
            kind,
        }
    }

    fn check(&mut self) -> Result<(), Violation> {
        if let Some(kind) = self.violation.take() {
            return Err(self.violation(kind));
        }
        let mut served = vec![false; self.options.shards];
        check_single_serving(&self.nodes, self.options.shards, self.real_ms, &mut served)
            .map_err(|kind| self.violation(kind))?;
        for (last, now_served) in self.last_served_ms.iter_mut().zip(served) {
            if now_served {
                *last = Some(self.real_ms);
            }
        }
        Ok(())
    }

    /// After the faults healed: every shard served lately, every message acknowledged.
    fn check_liveness(&self) -> Result<(), Violation> {
        let recent_ms = self.real_ms.saturating_sub(SERVED_WITHIN_MS);
        for (shard, last) in self.last_served_ms.iter().enumerate() {
            if last.is_none_or(|last| last < recent_ms) {
                return Err(self.violation(ViolationKind::NotServedAfterHeal { shard }));
            }
        }
        match self.clients.unacknowledged() {
            (0, _) => Ok(()),
            (count, example) => Err(self.violation(ViolationKind::UnacknowledgedAfterHeal {
                count,
                example_id: example.unwrap_or(0),
            })),
        }
    }
}
