//! What the simulated cluster replicates and how its answers are judged: a [`Workload`] names
//! the [`StateMachine`] every replica runs, draws each client request, reads each reply, and
//! checks the whole run against its own model at the end. The runner stays generic over it, so
//! the consensus layer never names a machine defined above it: the key-value workload
//! ([`super::key_value::KeyValueWorkload`]) lives here, the catalog's lives in `metadata`.

use std::collections::BTreeMap;
use std::fmt::Debug;

use super::canary::Canary;
use super::history::History;
use crate::rng::SimRng;
use tessera_consensus::message::{ClientId, OpNumber, Request};
use tessera_consensus::state_machine::StateMachine;

/// The requests each committed op carried, as (client, request number), in log order; the
/// first report of an op is kept (the agreement check holds the rest to the same entry).
pub type CommittedOrder = BTreeMap<OpNumber, Vec<(ClientId, u64)>>;

/// What a workload's final check counted, for the run's summary. A workload with nothing to
/// count in a field leaves it zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkloadCounts {
    /// Acknowledged replies compared with the workload's model.
    pub replies_checked: u64,
    /// Committed requests the state machine refused (an error answer, not a fault).
    pub refusals: u64,
    /// Committed cluster-membership commands.
    pub membership_commands: u64,
}

/// What a request becomes at the replica it reaches ([`Workload::at_replica`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AtReplica {
    /// The replica handles the request carrying these bytes.
    Submit(Vec<u8>),
    /// The node answers at once with these result bytes; the replica never sees the request.
    Answer(Vec<u8>),
}

/// A state machine plus the requests that exercise it and the check that judges it.
///
/// Implementations must be deterministic: everything random comes from the [`SimRng`] passed in,
/// so a seed replays identically.
pub trait Workload: Sync {
    /// What every replica replicates.
    type Machine: StateMachine;
    /// A request as the history records it.
    type Operation: Clone + Debug;
    /// A reply as the history records it.
    type Answer: Clone + Debug;

    /// The name `vsr-sim --machine` knows it by.
    fn name(&self) -> &'static str;

    /// A fresh, empty machine: for a new replica, and for a replica restarting after a crash
    /// (which loses whatever the machine held in memory; the replica rebuilds it from its
    /// checkpoint and journal).
    fn machine(&self) -> Result<Self::Machine, String>;

    /// The machine a replica restarts with after a crash that kept its disk, given the machine
    /// as the crash left it. By default a fresh one ([`Workload::machine`]); a machine that
    /// keeps its state durable in a store of its own (its snapshot only refers to it) keeps
    /// that store, emptied as a node's group driver empties it, and its replica restores the
    /// journal's checkpoint from it.
    fn machine_after_crash(&self, crashed: Self::Machine) -> Result<Self::Machine, String> {
        drop(crashed);
        self.machine()
    }

    /// Called once a restarted replica opened on its journal with `machine` (a node's group
    /// driver does the same: `GroupMachine::restarted`). Nothing by default.
    fn machine_opened(&self, machine: &mut Self::Machine) -> Result<(), String> {
        let _ = machine;
        Ok(())
    }

    /// Everything `machine` holds, for comparing replicas after a run: by default its
    /// snapshot.
    fn state_of(&self, machine: &Self::Machine) -> Vec<u8> {
        machine.snapshot()
    }

    /// The next request of `client`, numbered `request_number`.
    fn next_operation(
        &self,
        rng: &mut SimRng,
        client: ClientId,
        request_number: u64,
    ) -> Self::Operation;

    /// The bytes a request carries.
    fn encode(&self, operation: &Self::Operation) -> Vec<u8>;

    /// Reads a reply's bytes; an error fails the run (a reply no machine could have sent).
    fn decode_answer(&self, bytes: &[u8]) -> Result<Self::Answer, String>;

    /// What a client's request becomes at the replica it reaches, given that replica's state
    /// machine and whether it is the primary of a normal view. By default the request goes to
    /// the replica as sent. A workload whose requests are executed at the node they reach (the
    /// partition plane: the node runs the entity against its own copy of the state and the
    /// group orders the outcome) rewrites it from that copy, or answers it there.
    fn at_replica(
        &self,
        _machine: &Self::Machine,
        _is_primary: bool,
        _canary: Canary,
        request: &Request,
    ) -> AtReplica {
        AtReplica::Submit(request.operation.clone())
    }

    /// Judges the state every replica converged to (they hold the same, checked before),
    /// against the clients' `history`. Nothing to judge by default.
    fn check_final_state(
        &self,
        _machine: &Self::Machine,
        _history: &History<Self::Operation, Self::Answer>,
    ) -> Result<(), String> {
        Ok(())
    }

    /// Judges the run after convergence: the clients' `history` and the `committed` order.
    fn check(
        &self,
        history: &History<Self::Operation, Self::Answer>,
        committed: &CommittedOrder,
    ) -> Result<WorkloadCounts, String>;
}
