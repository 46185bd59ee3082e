//! The faults a run injects: partitions and armed crashes drawn each tick, the scenario's long
//! outage, crashes that lose a replica's unsynced writes and its machine's memory (or its whole
//! disk), restarts from the journal (or an empty one) onto a fresh machine, leadership
//! transfers asked for at random, and the end of the fault phase.

use super::{Down, Simulation, add_counters};
use crate::vsr::canary::Canary;
use crate::vsr::workload::Workload;
use tessera_consensus::journal::InMemoryJournal;
use tessera_consensus::message::ReplicaIndex;
use tessera_consensus::replica::Replica;

impl<W: Workload> Simulation<'_, W> {
    /// Takes the scenario's outage replica down for long at its start tick.
    pub(super) fn start_outage(&mut self) {
        let Some(outage) = self.scenario.outage else {
            return;
        };
        if outage.start_tick == self.now_tick {
            self.crash(usize::from(outage.replica), outage.downtime_ticks);
        }
    }

    pub(super) fn inject_faults(&mut self) {
        if self.rng.per_mille(self.scenario.partition_change_per_mille) {
            let count = self.replicas.len();
            match self.rng.below(4) {
                0 => self.network.heal(),
                1 => {
                    let side: Vec<bool> = (0..count).map(|_| self.rng.per_mille(500)).collect();
                    self.network.partition_symmetric(&side);
                }
                2 => self.network.partition_asymmetric(&mut self.rng, 300),
                _ => {
                    let isolated = self.rng.below(count as u64) as usize;
                    self.network.isolate(isolated);
                }
            }
        }
        if self.rng.per_mille(self.scenario.crash_per_mille) {
            let index = self.rng.below(self.replicas.len() as u64) as usize;
            let writes = self.rng.below(3) as u32;
            if let Some(replica) = self.replicas[index].as_mut() {
                replica.journal_mut().crash_after_writes(writes);
            }
        }
    }

    /// Now and then a replica asks for the primary's role (a node taking back the partitions
    /// it prefers to lead): the view change protocol started early, under every other fault.
    pub(super) fn take_primary_at_random(&mut self) -> Result<(), String> {
        if !self.rng.per_mille(self.scenario.take_primary_per_mille) {
            return Ok(());
        }
        let index = self.rng.below(self.replicas.len() as u64) as usize;
        let Some(replica) = self.replicas[index].as_mut() else {
            return Ok(());
        };
        let actions = replica.take_primary();
        self.primary_takeovers += 1;
        self.after_handler(index, actions)
    }

    pub(super) fn crash(&mut self, index: usize, downtime_ticks: u64) {
        let Some(replica) = self.replicas[index].take() else {
            return;
        };
        add_counters(&mut self.counters_of_crashed, &replica.counters());
        let (mut journal, machine) = replica.into_parts();
        let rng = &mut self.rng;
        journal.crash(&mut || rng.next_u64());
        self.down[index] = Some(Down {
            journal,
            machine: Some(machine),
            restart_tick: self.now_tick + downtime_ticks,
        });
        self.crashes += 1;
    }

    /// The disk of `index`, down after a crash, is lost: it restarts on an empty journal. At
    /// most one replica at a time is without its state, so the group stays within the failures
    /// it tolerates.
    pub(super) fn lose_disk(&mut self, index: usize) {
        if self.forgetting.iter().any(|forgetting| *forgetting) {
            return;
        }
        let Some(down) = self.down[index].as_mut() else {
            return;
        };
        down.journal = InMemoryJournal::new();
        down.machine = None;
        self.disk_lost[index] = true;
        self.forgetting[index] = true;
        self.disks_lost += 1;
        self.checker.on_disk_lost(index);
    }

    pub(super) fn restart_due(&mut self) -> Result<(), String> {
        for index in 0..self.down.len() {
            let due = self.down[index]
                .as_ref()
                .is_some_and(|down| down.restart_tick <= self.now_tick);
            if due || (!self.faults_on && self.down[index].is_some()) {
                self.restart(index)?;
            }
        }
        Ok(())
    }

    pub(super) fn restart(&mut self, index: usize) -> Result<(), String> {
        let Some(Down {
            journal, machine, ..
        }) = self.down[index].take()
        else {
            return Ok(());
        };
        let config = self.config(index as ReplicaIndex);
        let nonce = self.rng.next_u64();
        let machine = match machine {
            Some(crashed) => self.workload.machine_after_crash(crashed)?,
            None => self.workload.machine()?,
        };
        let disk_lost = std::mem::take(&mut self.disk_lost[index]);
        let replica = match (disk_lost, self.options.canary) {
            (true, Canary::VoteAfterDiskLoss) => Replica::format(config, journal, machine),
            (true, _) => Replica::start_empty(config, journal, machine, nonce),
            (false, _) => Replica::open(config, journal, machine, nonce),
        }
        .map_err(|error| format!("replica {index} failed to recover: {error}"))?;
        let mut replica = replica;
        self.workload.machine_opened(replica.state_machine_mut())?;
        self.checker
            .on_restart(index, replica.view(), replica.commit())?;
        self.replicas[index] = Some(replica);
        Ok(())
    }

    pub(super) fn stop_faults(&mut self) -> Result<(), String> {
        self.faults_on = false;
        self.network.heal();
        self.network.faults.loss_per_mille = 0;
        self.network.faults.duplicate_per_mille = 0;
        self.network.faults.corrupt_state_chunk_per_mille = 0;
        for replica in self.replicas.iter_mut().flatten() {
            replica.journal_mut().disarm();
        }
        self.restart_due()
    }
}
