//! What a host reads of a [`Replica`]: its op, commit and view numbers, its log and checkpoint,
//! its counters and client table, and its state machine and journal, for the hosts that drain
//! or inspect them.

use super::checkpoint::Checkpoint;
use super::client_table::ClientTable;
use super::journal::Journal;
use super::message::{Entry, OpNumber, Status, ViewNumber};
use super::replica::{Counters, Replica};
use super::state_machine::StateMachine;

impl<J: Journal, S: StateMachine> Replica<J, S> {
    /// The highest op in the log.
    pub fn op(&self) -> OpNumber {
        self.log.op()
    }

    /// The highest op known committed (never decreases while the replica runs).
    pub fn commit(&self) -> OpNumber {
        self.commit
    }

    /// The highest op applied to the state machine.
    pub fn applied(&self) -> OpNumber {
        self.applied
    }

    /// How many ticks ago this replica last knew itself part of a working group: a primary,
    /// when a quorum (itself included) last acknowledged it; a backup, when it last heard its
    /// primary. `None` outside normal operation (a view change, recovery).
    pub fn quorum_contact_ticks_ago(&self) -> Option<u64> {
        if self.status != Status::Normal {
            return None;
        }
        if !self.is_primary() {
            return Some(self.now_ticks.saturating_sub(self.primary_heard_tick));
        }
        let own = usize::from(self.config.replica);
        let mut heard: Vec<u64> = self
            .peer_heard_tick
            .iter()
            .enumerate()
            .map(|(replica, tick)| {
                if replica == own {
                    self.now_ticks
                } else {
                    *tick
                }
            })
            .collect();
        heard.sort_unstable_by(|left, right| right.cmp(left));
        let quorum_tick = heard.get(self.config.quorum().saturating_sub(1))?;
        Some(self.now_ticks.saturating_sub(*quorum_tick))
    }

    /// A primary in normal operation: per replica, the highest op it acknowledged in this
    /// view (its own entry: its log's op). `None` on a backup or outside normal operation.
    pub fn acknowledged(&self) -> Option<&[OpNumber]> {
        (self.status == Status::Normal && self.is_primary()).then_some(self.acks.as_slice())
    }

    /// The current view.
    pub fn view(&self) -> ViewNumber {
        self.view
    }

    /// The view the log belongs to.
    pub fn log_view(&self) -> ViewNumber {
        self.log_view
    }

    /// The protocol status.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The part of the replicated log the replica holds: ops `log_base() + 1..=op()`.
    pub fn log(&self) -> &[Entry] {
        self.log.entries()
    }

    /// The op just below the first entry of [`Replica::log`].
    pub fn log_base(&self) -> OpNumber {
        self.log.base()
    }

    /// The latest checkpoint (op 0: the empty state of a new cluster).
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// Whether the replica is fetching a checkpoint from a peer (state transfer, whole or in
    /// parts).
    pub fn is_fetching_state(&self) -> bool {
        self.fetching_state()
    }

    /// What the replica has refused so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The client table, for inspection.
    pub fn client_table(&self) -> &ClientTable {
        &self.clients
    }

    /// The state machine, for inspection.
    pub fn state_machine(&self) -> &S {
        &self.state_machine
    }

    /// The state machine, mutably, for a host that drains what it reported (the catalog's
    /// applied commands). Changing its state here would break replication.
    pub fn state_machine_mut(&mut self) -> &mut S {
        &mut self.state_machine
    }

    /// The journal, for a host that needs to inspect it (the simulator arms crashes with it).
    pub fn journal_mut(&mut self) -> &mut J {
        &mut self.journal
    }

    /// Stops the replica and hands back its journal (what survives a crash).
    pub fn into_journal(self) -> J {
        self.journal
    }

    /// The journal and the state machine, as a crash leaves them (the simulator keeps a
    /// machine whose state is durable in a store of its own).
    pub fn into_parts(self) -> (J, S) {
        (self.journal, self.state_machine)
    }
}
