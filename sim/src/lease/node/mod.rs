//! One machine and the node process running on it, sans-IO: fed messages and ticks with the
//! real time, it reads its own drifting clock and answers with messages in an [`Outbox`]. This
//! module owns the process life cycle (join, renew, leave, crash, restart, removal); [`shards`]
//! owns what the node does with shards (serving rule, handoffs, installs, client requests).
//!
//! What survives a crash is [`Durable`]: the member identity, the leave intent, shard states
//! (with their handoff status) and the record of completed handoffs. Everything else — the
//! lease above all — is volatile, so a restarted node serves nothing until a renewal commits.

mod shards;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use super::clock::DriftingClock;
use super::log::Refusal;
use super::message::{Endpoint, Message};
use super::options::{Canary, SHARDS_MAX};
use super::table::{Entry, MemberId, MemberStatus};
use tessera_sharding::lease::{Lease, LeaseConfig, Renewal};

/// Messages one step of one node may send: a few per shard (state, install report, handoff
/// report) plus the lease and membership commands.
pub const OUTBOX_MAX: usize = 4 * SHARDS_MAX + 8;

/// How often a node asks the log for the table, on its own clock. Independent of renewals: a
/// renewal answer says nothing about the table, as in the host, so a node may serve under a
/// valid lease with a stale table — which the coordinator's rules must allow for.
const TABLE_FETCH_EVERY_MS: u64 = 2_000;

/// A message applied by a serving node: what the checker records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppliedAck {
    pub id: u64,
    pub shard: usize,
    pub lineage: u64,
    pub member: MemberId,
}

/// What one step of a node produced.
#[derive(Debug, Default)]
pub struct Outbox {
    /// Messages to send.
    pub sends: Vec<(Endpoint, Message)>,
    /// Messages applied (and acknowledged) in this step.
    pub applied: Vec<AppliedAck>,
}

impl Outbox {
    fn send(&mut self, to: Endpoint, message: Message) {
        assert!(
            self.sends.len() < OUTBOX_MAX,
            "a node step sends at most OUTBOX_MAX messages"
        );
        self.sends.push((to, message));
    }
}

/// A shard's state held by a node.
#[derive(Clone, Debug)]
struct Slot {
    /// The generation of the entry this state was installed for.
    generation: u64,
    lineage: u64,
    applied: BTreeSet<u64>,
    /// Set once a handoff began: the node serves the shard no more.
    handing_off: Option<(MemberId, u64)>,
}

/// What survives a crash.
#[derive(Debug)]
struct Durable {
    member: MemberId,
    wants_to_leave: bool,
    slots: BTreeMap<usize, Slot>,
    /// Per shard, the latest generation this node completed a handoff for.
    retired: BTreeMap<usize, u64>,
}

/// The running process: volatile.
#[derive(Debug)]
struct Process {
    boot: u64,
    lease: Lease,
    /// The newest entry learned per shard.
    view: Vec<Option<Entry>>,
    joined: bool,
    status: Option<MemberStatus>,
    next_renewal_ms: u64,
    next_fetch_ms: u64,
}

/// One machine.
#[derive(Debug)]
pub struct Node {
    machine: usize,
    clock: DriftingClock,
    config: LeaseConfig,
    canary: Option<Canary>,
    shards: usize,
    boots: u64,
    durable: Durable,
    process: Option<Process>,
    departed: bool,
}

impl Node {
    /// A machine that is not running yet (a spare, or not started).
    pub fn new(
        machine: usize,
        clock: DriftingClock,
        config: LeaseConfig,
        shards: usize,
        canary: Option<Canary>,
    ) -> Node {
        Node {
            machine,
            clock,
            config,
            canary,
            shards,
            boots: 0,
            durable: Durable {
                member: MemberId {
                    machine,
                    incarnation: 0,
                },
                wants_to_leave: false,
                slots: BTreeMap::new(),
                retired: BTreeMap::new(),
            },
            process: None,
            departed: true,
        }
    }

    /// The member this machine is (or last was).
    pub fn member(&self) -> MemberId {
        self.durable.member
    }

    /// Whether a process runs.
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// Whether the machine is down after a crash (and will restart).
    pub fn is_crashed(&self) -> bool {
        self.process.is_none() && !self.departed
    }

    /// Whether the machine is not part of the cluster (never joined, or left).
    pub fn is_departed(&self) -> bool {
        self.departed
    }

    /// The status the node last heard for itself.
    pub fn known_status(&self) -> Option<MemberStatus> {
        self.process.as_ref().and_then(|process| process.status)
    }

    /// Starts the machine as a new member (the next incarnation), with no state.
    pub fn join_as_new_member(&mut self, real_ms: u64) {
        self.durable.member.incarnation += 1;
        self.durable.wants_to_leave = false;
        self.durable.slots.clear();
        self.durable.retired.clear();
        self.departed = false;
        self.boot(real_ms);
    }

    /// The process dies: volatile memory is gone.
    pub fn crash(&mut self) {
        self.process = None;
    }

    /// A crashed machine's process starts again (with an invalid lease).
    pub fn restart(&mut self, real_ms: u64) {
        if self.is_crashed() {
            self.boot(real_ms);
        }
    }

    /// The node decides to leave gracefully.
    pub fn request_leave(&mut self) {
        self.durable.wants_to_leave = true;
    }

    fn boot(&mut self, real_ms: u64) {
        self.boots += 1;
        self.process = Some(Process {
            boot: self.boots,
            lease: Lease::new(self.config),
            view: vec![None; self.shards],
            joined: false,
            status: None,
            next_renewal_ms: self.clock.local_ms(real_ms),
            next_fetch_ms: self.clock.local_ms(real_ms),
        });
    }

    /// Periodic work: ask for the table every [`TABLE_FETCH_EVERY_MS`]; join until joined, then
    /// renew every `renew_every_ms` of local time; ask to leave until leaving; resend the state
    /// transfers still waiting for an answer.
    pub fn tick(&mut self, real_ms: u64, out: &mut Outbox) {
        let now_ms = self.clock.local_ms(real_ms);
        let member = self.durable.member;
        let wants_to_leave = self.durable.wants_to_leave;
        let Some(process) = self.process.as_mut() else {
            return;
        };
        if now_ms >= process.next_fetch_ms {
            process.next_fetch_ms = now_ms + TABLE_FETCH_EVERY_MS;
            out.send(Endpoint::Log, Message::FetchTable);
        }
        if now_ms < process.next_renewal_ms {
            return;
        }
        process.next_renewal_ms = now_ms + self.config.renew_every_ms;
        let boot = process.boot;
        if !process.joined {
            out.send(Endpoint::Log, Message::Join { member, boot });
            return;
        }
        let renewal = process.lease.renewal_sent(now_ms);
        out.send(
            Endpoint::Log,
            Message::Renew {
                member,
                boot,
                renewal,
            },
        );
        if wants_to_leave && process.status != Some(MemberStatus::Leaving) {
            out.send(Endpoint::Log, Message::Leave { member, boot });
        }
        self.resend_transfers(out);
    }

    /// Handles one message; `real_ms` is the real time of its arrival.
    pub fn receive(&mut self, message: Message, real_ms: u64, out: &mut Outbox) {
        if self.process.is_none() {
            return;
        }
        let member = self.durable.member;
        match message {
            Message::RenewOk {
                member: to,
                boot,
                renewal,
                status,
            } if to == member => {
                self.renewal_committed(boot, renewal, status, real_ms);
            }
            Message::Refused {
                member: to,
                boot,
                refusal,
            } if to == member => self.refused(boot, refusal, real_ms),
            Message::JoinOk { member: to, boot } if to == member => {
                let now_ms = self.clock.local_ms(real_ms);
                if let Some(process) = self.process.as_mut().filter(|process| process.boot == boot)
                {
                    process.joined = true;
                    process.next_renewal_ms = now_ms;
                }
            }
            Message::TableUpdate { table } => self.learn(&table.entries, out),
            Message::HandOff {
                source,
                shard,
                generation,
                target,
            } if source == member => {
                self.begin_handoff(shard, generation, target, out);
            }
            Message::StateTransfer {
                target,
                source,
                shard,
                generation,
                state,
            } if target == member => {
                self.install_transfer(source, shard, generation, state, out);
            }
            Message::TransferDone {
                source,
                shard,
                generation,
            } if source == member => {
                self.finish_handoff(shard, generation, out);
            }
            Message::Request { id, shard, hops } => self.request(id, shard, hops, real_ms, out),
            _ => {}
        }
    }

    /// The log committed a renewal of this process: extend the lease (unless the answer was
    /// meant for an earlier process).
    fn renewal_committed(
        &mut self,
        boot: u64,
        renewal: Renewal,
        status: MemberStatus,
        real_ms: u64,
    ) {
        let now_ms = self.clock.local_ms(real_ms);
        let Some(process) = self.process.as_mut().filter(|process| process.boot == boot) else {
            return;
        };
        if self.canary == Some(Canary::LeaseFromReceipt) {
            process
                .lease
                .renewal_committed(process.lease.renewal_sent(now_ms));
        } else {
            process.lease.renewal_committed(renewal);
        }
        process.status = Some(status);
    }

    /// The log refused a command: stop serving; if removed, this identity is finished.
    fn refused(&mut self, boot: u64, refusal: Refusal, real_ms: u64) {
        let Some(process) = self.process.as_mut() else {
            return;
        };
        // A removal is final whichever process asked; other refusals concern one process.
        if refusal != Refusal::Removed && process.boot != boot {
            return;
        }
        process.lease.revoke();
        match refusal {
            Refusal::Down => process.status = Some(MemberStatus::Down),
            Refusal::Unknown => process.joined = false,
            Refusal::Removed if self.durable.wants_to_leave => {
                self.durable.slots.clear();
                self.durable.retired.clear();
                self.process = None;
                self.departed = true;
            }
            Refusal::Removed => self.join_as_new_member(real_ms),
        }
    }
}
