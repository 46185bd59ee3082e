//! The state machine every replica of a partition group runs: committed [`PartitionOp`]s
//! applied in op order to the partition's own redb database — the same tables, written by the
//! same code, as a node's local commits ([`StateStore`]) — plus each entity's stamp.
//!
//! An apply is one redb transaction that is not synced: the group's journal is what makes a
//! committed op durable (one fsync of the journal covers every prepare it holds). A checkpoint
//! ([`StateMachine::snapshot`]) makes the database durable as a savepoint and carries only a
//! reference to it (`savepoint`); at every start the replica rolls the database back to the
//! savepoint its journal's checkpoint names and applies the journal's log above it, so what
//! unsynced transactions left in the file after a crash is never read.

use super::checkpoint;
use super::image_stream::{self, ImageRows, Staging};
use super::moving::{self, Phase};
use super::op::{PartitionOp, PartitionResult};
use super::savepoint::{self, Snapshot};
use super::stamps::{STAMPS, key3, read_stamp};
use crate::error::StoreError;
use crate::remember::RememberOp;
use crate::shard_transfer::{SHARD_TRANSFER_CHUNKS, ShardPart, ShardScope, install_rows, unstage};
use crate::tables::{StateStore, apply_remember_ops, apply_write_sets};
use crate::write_set::WriteSet;
use redb::backends::InMemoryBackend;
use redb::{Durability, ReadableTable};
use std::path::Path;
use std::sync::Mutex;
use std::sync::{Arc, OnceLock};
use tessera_consensus::message::checksum_bytes_from;
use tessera_consensus::state_machine::{ImageReader, RestoreError, StateMachine};
use tessera_contract::{EntityAddress, TypeKey};

/// The page cache of one partition's database. Redb's default (1 GiB) is per database, and a
/// node runs a database per partition replica it holds (dozens), each caching what it reads
/// and writes: a node's memory would grow with its partitions' state.
pub const PARTITION_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// A partition's entities as the group's committed ops left them, in a redb database of its
/// own.
///
/// ```
/// use tessera_consensus::state_machine::StateMachine;
/// use tessera_contract::EntityAddress;
/// use tessera_state::WriteSet;
/// use tessera_state::partition::{PartitionMachine, PartitionOp, PartitionResult};
///
/// let counter = EntityAddress::new("t", "counter", "c1");
/// let mut machine = PartitionMachine::in_memory().unwrap();
/// let mut writes = WriteSet::new(counter.clone());
/// writes.put("value", vec![1]);
/// let expect = machine.stamp(&counter).unwrap();
/// let op = PartitionOp::write(writes.clone(), expect, 11, 1_000, vec![1]).unwrap();
/// let first = PartitionResult::decode(&machine.apply(&op.encode()));
/// assert_eq!(first, PartitionResult::Applied { reply: vec![1] });
/// // The same message run again against the copy it first read is refused: it is stale.
/// let stale = PartitionOp::write(writes, 0, 12, 1_000, vec![1]).unwrap();
/// let second = PartitionResult::decode(&machine.apply(&stale.encode()));
/// assert_eq!(second, PartitionResult::Conflict { stamp: 11 });
/// assert_eq!(machine.get(&counter, "value").unwrap(), Some(vec![1]));
/// ```
pub struct PartitionMachine {
    store: StateStore,
    /// Where the group is in a move (`moving`), as its tables say.
    phase: Phase,
    /// The phase it starts in, empty: [`Phase::Filling`] for a move's new group.
    initial: Phase,
    /// A storage failure that made this copy unlike the other replicas': set once, never
    /// cleared (the group stops on this node).
    fault: OnceLock<String>,
    /// Requests applied since the empty state: names a checkpoint alike on every replica.
    applied: u64,
    /// The savepoint of the last checkpoint (`savepoint`), once one was taken or restored.
    last_savepoint: Mutex<Option<u64>>,
    /// A peer's image being staged (state transfer in parts, `image_stream`).
    staging: Staging,
    /// The rows are still to be emptied ([`PartitionMachine::forget`]).
    clear_pending: bool,
}

impl std::fmt::Debug for PartitionMachine {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("PartitionMachine")
            .field("fault", &self.fault.get())
            .finish_non_exhaustive()
    }
}

impl PartitionMachine {
    /// A machine whose database lives in memory (the simulator, tests).
    pub fn in_memory() -> Result<Self, StoreError> {
        let database = redb::Builder::new()
            .create_with_backend(InMemoryBackend::new())
            .map_err(|error| StoreError::Open(error.to_string()))?;
        Self::from_database(database)
    }

    /// A machine whose database is the file at `path`, created if missing. The file is the
    /// replica's state as of its journal's last checkpoint: the group driver empties the
    /// machine's rows ([`PartitionMachine::clear`]) and the replica then restores that
    /// checkpoint, which rolls the file back to it (see the module doc).
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| StoreError::Open(e.to_string()))?;
        }
        let database = redb::Builder::new()
            .set_cache_size(PARTITION_CACHE_BYTES)
            .create(path)
            .map_err(|e| StoreError::Open(e.to_string()))?;
        Self::from_database(database)
    }

    fn from_database(database: redb::Database) -> Result<Self, StoreError> {
        let store = StateStore::from_database(Arc::new(database))?;
        let transaction = store.database().begin_write().map_err(StoreError::io)?;
        transaction.open_table(STAMPS).map_err(StoreError::io)?;
        transaction
            .open_table(SHARD_TRANSFER_CHUNKS)
            .map_err(StoreError::io)?;
        moving::create_tables(&transaction)?;
        transaction.commit().map_err(StoreError::io)?;
        Ok(PartitionMachine {
            store,
            phase: Phase::Serving,
            initial: Phase::Serving,
            fault: OnceLock::new(),
            applied: 0,
            last_savepoint: Mutex::new(None),
            staging: Staging::default(),
            clear_pending: false,
        })
    }

    /// This machine as a move's new group ([`Phase::Filling`] when empty): it serves nothing
    /// until a sealed replica's image fills it and it opens (see `moving`).
    pub fn filling(mut self) -> Result<Self, StoreError> {
        self.initial = Phase::Filling;
        self.clear()?;
        Ok(self)
    }

    /// Where the group is in a move.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The partition's tables, for reads: state keys, metadata, outbox, reminders, receipts.
    pub fn store(&self) -> &StateStore {
        &self.store
    }

    /// The committed value of `key` for `entity`.
    pub fn get(&self, entity: &EntityAddress, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.store.get(entity, key)
    }

    /// The stamp of the last write applied to `entity`; 0 if it was never written.
    pub fn stamp(&self, entity: &EntityAddress) -> Result<u64, StoreError> {
        read_stamp(&self.store, entity)
    }

    /// The plugin version `entity` last committed under.
    pub fn version(&self, entity: &EntityAddress) -> Result<Option<u32>, StoreError> {
        Ok(self.store.meta(entity)?.version)
    }

    /// The storage failure that stopped this copy, if one did.
    pub fn fault(&self) -> Option<&str> {
        self.fault.get().map(String::as_str)
    }

    /// Removes every row: the empty state a replica rebuilds from. The checkpoints' savepoints
    /// stay, so the replica can still restore the one its journal names.
    pub fn clear(&mut self) -> Result<(), StoreError> {
        checkpoint::clear(&self.store, self.initial)?;
        self.staging.clear(&self.store)?;
        self.clear_pending = false;
        self.phase = self.initial;
        self.applied = 0;
        *self.last_savepoint() = None;
        Ok(())
    }

    /// Forgets the state, as [`PartitionMachine::clear`] does, but leaves the rows to be
    /// emptied later: a restart's restore of its journal's checkpoint replaces every row anyway
    /// (emptying a 64 MiB partition first took 75 of a restart's 80 ms). They are emptied by
    /// [`PartitionMachine::settle`], and before an op applies, if no restore came first; until
    /// then reads see the old rows (the group driver settles as soon as the replica opened,
    /// before anything reads).
    pub fn forget(&mut self) {
        self.phase = self.initial;
        self.applied = 0;
        *self.last_savepoint() = None;
        self.staging = Staging::default();
        self.clear_pending = true;
    }

    /// Empties the rows a [`PartitionMachine::forget`] left, unless a restore replaced them.
    pub fn settle(&mut self) -> Result<(), StoreError> {
        if self.clear_pending {
            self.clear()?;
        }
        Ok(())
    }

    /// Every row as it stands now, as an image ([`StateMachine::restore`] takes it, and a
    /// move's new group is filled with it).
    pub fn image(&self) -> Result<Vec<u8>, StoreError> {
        checkpoint::encode(&self.store)
    }

    fn last_savepoint(&self) -> std::sync::MutexGuard<'_, Option<u64>> {
        self.last_savepoint
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_fault(&self, fault: String) {
        tracing::error!(%fault, "a partition replica's storage failed: its copy stops here");
        let _ = self.fault.set(fault);
    }

    /// Applies a decoded op (see [`StateMachine::apply`]).
    pub(super) fn apply_op(&mut self, op: PartitionOp) -> PartitionResult {
        if let Err(error) = self.settle() {
            self.set_fault(format!(
                "the partition's rows could not be emptied: {error}"
            ));
        }
        self.applied += 1;
        if let Some(fault) = self.fault.get() {
            return PartitionResult::StorageFailed(fault.clone());
        }
        let result = match (self.phase, op) {
            (_, PartitionOp::Seal) => self.apply_seal(),
            (
                Phase::Filling,
                PartitionOp::Fill {
                    checksum,
                    index,
                    bytes,
                },
            ) => self.apply_fill(checksum, index, &bytes),
            (_, PartitionOp::Fill { .. }) => Ok(PartitionResult::Opened),
            (Phase::Filling, PartitionOp::Open { checksum, pieces }) => {
                self.apply_open(checksum, pieces)
            }
            (Phase::Serving, PartitionOp::Open { .. }) => {
                Ok(PartitionResult::Applied { reply: Vec::new() })
            }
            (Phase::Sealed, _) => Ok(PartitionResult::Sealed),
            (Phase::Filling, _) => Ok(PartitionResult::Filling),
            (Phase::Serving, op) => self.apply_entity_op(op),
        };
        result.unwrap_or_else(|error| {
            let fault = error.to_string();
            self.set_fault(fault.clone());
            PartitionResult::StorageFailed(fault)
        })
    }

    /// Applies an op of a serving group's entities.
    fn apply_entity_op(&mut self, op: PartitionOp) -> Result<PartitionResult, StoreError> {
        match op {
            PartitionOp::Write {
                expect,
                stamp,
                at_ms,
                writes,
                reply,
            } => self.apply_write(expect, stamp, at_ms, &writes, reply),
            PartitionOp::Settle { at_ms, writes } => self.apply_settle(at_ms, &writes),
            PartitionOp::Remember { ops } => self.apply_remember(&ops),
            PartitionOp::Install {
                stamp,
                type_key,
                shard,
                part,
            } => self.apply_install(stamp, type_key, shard, &part),
            PartitionOp::Check {
                entity,
                expect,
                reply,
            } => self.stamp(&entity).map(|current| {
                if current == expect {
                    PartitionResult::Checked { reply }
                } else {
                    PartitionResult::Conflict { stamp: current }
                }
            }),
            PartitionOp::Seal | PartitionOp::Fill { .. } | PartitionOp::Open { .. } => Ok(
                PartitionResult::Malformed("a move's op is not an entity op".into()),
            ),
        }
    }

    /// A write transaction whose commit is not synced (see the module doc).
    fn unsynced(&self) -> Result<redb::WriteTransaction, StoreError> {
        let mut transaction = self
            .store
            .database()
            .begin_write()
            .map_err(StoreError::io)?;
        transaction
            .set_durability(Durability::None)
            .map_err(StoreError::io)?;
        Ok(transaction)
    }

    fn apply_seal(&mut self) -> Result<PartitionResult, StoreError> {
        match self.phase {
            Phase::Filling => Ok(PartitionResult::Filling),
            Phase::Sealed => Ok(PartitionResult::Applied { reply: Vec::new() }),
            Phase::Serving => {
                let transaction = self.unsynced()?;
                moving::set_phase(&transaction, Phase::Sealed)?;
                transaction.commit().map_err(StoreError::io)?;
                self.phase = Phase::Sealed;
                Ok(PartitionResult::Applied { reply: Vec::new() })
            }
        }
    }

    fn apply_fill(
        &self,
        checksum: u64,
        index: u32,
        bytes: &[u8],
    ) -> Result<PartitionResult, StoreError> {
        if bytes.len() > moving::FILL_BYTES_MAX {
            let reason = format!("a fill of {} bytes", bytes.len());
            return Ok(PartitionResult::Malformed(reason));
        }
        let transaction = self.unsynced()?;
        moving::stage(&transaction, checksum, index, bytes)?;
        transaction.commit().map_err(StoreError::io)?;
        Ok(PartitionResult::Applied { reply: Vec::new() })
    }

    /// Installs the staged image and serves; a piece missing, a whole that does not match
    /// or does not decode leaves the group filling and its rows as they were.
    fn apply_open(&mut self, checksum: u64, pieces: u32) -> Result<PartitionResult, StoreError> {
        match moving::piece(&self.store, checksum, 0)? {
            None => Ok(PartitionResult::Filling),
            Some(first) if image_stream::is_stream(&first) => self.open_stream(checksum, pieces),
            Some(_) => self.open_whole(checksum, pieces),
        }
    }

    /// Opens with a stream of rows (`image_stream`), staged piece by piece apart from the live
    /// rows and swapped in once every piece is in and the whole matches `checksum`; the
    /// stream's apply count is the sealed group's, not this one's, and is not taken. A state
    /// transfer staging meanwhile starts again (its staged rows are dropped).
    fn open_stream(&mut self, checksum: u64, pieces: u32) -> Result<PartitionResult, StoreError> {
        self.staging = Staging::default();
        let mut sum = None;
        let mut offset = 0;
        for index in 0..pieces {
            let Some(piece) = moving::piece(&self.store, checksum, index)? else {
                return self.keep_filling(None);
            };
            sum = Some(checksum_bytes_from(sum, &piece));
            if let Err(error) = self.staging.stage(&self.store, offset, &piece) {
                return self.keep_filling(Some(error.to_string()));
            }
            offset += piece.len() as u64;
        }
        if sum != Some(checksum) {
            return self.keep_filling(None);
        }
        if let Err(error) = self.staging.install(&self.store) {
            return self.keep_filling(Some(error.to_string()));
        }
        // The image is a sealed replica's: this group serves.
        let transaction = self.unsynced()?;
        moving::reset(&transaction, Phase::Serving)?;
        transaction.commit().map_err(StoreError::io)?;
        self.phase = Phase::Serving;
        Ok(PartitionResult::Applied { reply: Vec::new() })
    }

    /// An open that cannot install: the staged rows are dropped and the group keeps filling.
    fn keep_filling(&mut self, error: Option<String>) -> Result<PartitionResult, StoreError> {
        if let Some(error) = error {
            tracing::warn!(%error, "a move's image does not install: the group keeps filling");
        }
        self.staging.clear(&self.store)?;
        Ok(PartitionResult::Filling)
    }

    /// Opens with a whole image (`checkpoint`), as an earlier build's leader fills.
    fn open_whole(&mut self, checksum: u64, pieces: u32) -> Result<PartitionResult, StoreError> {
        let transaction = self.unsynced()?;
        let Some(image) = moving::assemble(&transaction, checksum, pieces)? else {
            return Ok(PartitionResult::Filling);
        };
        if let Err(error) = checkpoint::restore_into(&transaction, &image) {
            tracing::warn!(%error, "a move's image does not install: the group keeps filling");
            return Ok(PartitionResult::Filling);
        }
        // The image is a sealed replica's: this group serves.
        moving::reset(&transaction, Phase::Serving)?;
        transaction.commit().map_err(StoreError::io)?;
        self.phase = Phase::Serving;
        Ok(PartitionResult::Applied { reply: Vec::new() })
    }

    fn apply_write(
        &self,
        expect: u64,
        stamp: u64,
        at_ms: u64,
        writes: &WriteSet,
        reply: Vec<u8>,
    ) -> Result<PartitionResult, StoreError> {
        if stamp == 0 {
            return Ok(PartitionResult::Malformed(
                "a write's stamp must not be 0".into(),
            ));
        }
        let transaction = self.unsynced()?;
        let entity = key3(writes.entity());
        {
            let mut stamps = transaction.open_table(STAMPS).map_err(StoreError::io)?;
            let current = stamps
                .get(entity)
                .map_err(StoreError::io)?
                .map_or(0, |guard| guard.value());
            if current == stamp {
                return Ok(PartitionResult::Applied { reply });
            }
            if current != expect {
                return Ok(PartitionResult::Conflict { stamp: current });
            }
            stamps.insert(entity, stamp).map_err(StoreError::io)?;
        }
        apply_write_sets(&transaction, std::iter::once(writes), at_ms)?;
        transaction.commit().map_err(StoreError::io)?;
        Ok(PartitionResult::Applied { reply })
    }

    fn apply_settle(&self, at_ms: u64, writes: &WriteSet) -> Result<PartitionResult, StoreError> {
        if writes.touches_state() {
            return Ok(PartitionResult::Malformed(
                "a settle must not change state keys or the version".into(),
            ));
        }
        let transaction = self.unsynced()?;
        apply_write_sets(&transaction, std::iter::once(writes), at_ms)?;
        transaction.commit().map_err(StoreError::io)?;
        Ok(PartitionResult::Applied { reply: Vec::new() })
    }

    fn apply_remember(&self, ops: &[RememberOp]) -> Result<PartitionResult, StoreError> {
        let transaction = self.unsynced()?;
        apply_remember_ops(&transaction, ops.iter())?;
        transaction.commit().map_err(StoreError::io)?;
        Ok(PartitionResult::Applied { reply: Vec::new() })
    }

    fn apply_install(
        &self,
        stamp: u64,
        type_key: TypeKey,
        shard: u32,
        part: &ShardPart,
    ) -> Result<PartitionResult, StoreError> {
        if stamp == 0 {
            return Ok(PartitionResult::Malformed(
                "an install's stamp must not be 0".into(),
            ));
        }
        let transaction = self.unsynced()?;
        // The restoring node checked the part's ids against the shard (its shard function).
        let scope = ShardScope {
            type_key: type_key.clone(),
            shard,
            contains: Arc::new(|_: &str| true),
        };
        // A value larger than a part comes in pieces over several installs: they are staged
        // (carried by checkpoints meanwhile) and unstaged once the value is whole.
        let assembled = install_rows(&transaction, &scope, part)?;
        for (id, key) in &assembled {
            let value = (
                type_key.tenant.as_str(),
                type_key.entity_type.as_str(),
                id.as_str(),
                key.as_str(),
            );
            unstage(&transaction, value)?;
        }
        {
            let mut stamps = transaction.open_table(STAMPS).map_err(StoreError::io)?;
            for record in &part.entities {
                let entity = (
                    type_key.tenant.as_str(),
                    type_key.entity_type.as_str(),
                    record.id.as_str(),
                );
                stamps.insert(entity, stamp).map_err(StoreError::io)?;
            }
        }
        transaction.commit().map_err(StoreError::io)?;
        Ok(PartitionResult::Applied { reply: Vec::new() })
    }
}

impl StateMachine for PartitionMachine {
    fn apply(&mut self, operation: &[u8]) -> Vec<u8> {
        let result = match rmp_serde::from_slice::<PartitionOp>(operation) {
            Ok(op) => self.apply_op(op),
            Err(error) => {
                PartitionResult::Malformed(format!("an op that does not decode: {error}"))
            }
        };
        result.encode()
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut last = self.last_savepoint();
        let previous = last.take();
        match savepoint::take(&self.store, self.applied, previous) {
            Ok(taken) => *last = Some(taken),
            Err(error) => {
                self.set_fault(format!("the partition's checkpoint was not saved: {error}"))
            }
        }
        Snapshot::reference(self.applied)
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), RestoreError> {
        let storage = |error: StoreError| RestoreError::Malformed(format!("storage: {error}"));
        match Snapshot::parse(snapshot).map_err(RestoreError::Malformed)? {
            Snapshot::Reference { applied } => {
                *self.last_savepoint() = None;
                let restored = savepoint::restore(&self.store, applied).map_err(storage)?;
                self.phase = moving::phase(&self.store).map_err(storage)?;
                self.applied = applied;
                *self.last_savepoint() = Some(restored);
            }
            Snapshot::Image { applied, rows } => {
                self.phase = checkpoint::restore(&self.store, rows)?;
                self.applied = applied;
            }
            Snapshot::Legacy { rows } => {
                self.phase = checkpoint::restore(&self.store, rows)?;
                self.applied = 0;
            }
        }
        // Every row was replaced (a savepoint, or an image written over emptied tables).
        self.clear_pending = false;
        Ok(())
    }

    fn snapshot_is_reference(&self) -> bool {
        true
    }

    fn transfers_in_parts(&self) -> bool {
        true
    }

    fn image_reader(&self) -> Result<Box<dyn ImageReader>, String> {
        let rows = ImageRows::open(&self.store, self.applied).map_err(|e| e.to_string())?;
        Ok(Box::new(rows))
    }

    fn stage_image(&mut self, offset: u64, bytes: &[u8]) -> Result<(), RestoreError> {
        self.staging.stage(&self.store, offset, bytes)
    }

    fn install_staged_image(&mut self) -> Result<(), RestoreError> {
        let storage = |error: StoreError| RestoreError::Malformed(format!("storage: {error}"));
        self.applied = self.staging.install(&self.store)?;
        // Every row a partition op writes was swapped for the staged ones.
        self.clear_pending = false;
        self.phase = moving::phase(&self.store).map_err(storage)?;
        Ok(())
    }

    fn transfer_image(&self) -> Vec<u8> {
        match checkpoint::encode(&self.store) {
            Ok(rows) => Snapshot::image(self.applied, &rows),
            Err(error) => {
                self.set_fault(format!(
                    "the partition's checkpoint could not be read: {error}"
                ));
                Snapshot::image(self.applied, &[])
            }
        }
    }
}
