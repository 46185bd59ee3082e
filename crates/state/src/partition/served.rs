//! A partition's entities as a node serves them through the partition's group: the
//! [`EntityState`] the layers above read and commit through, over this node's replica. Reads
//! come from the replica's copy (its redb database); a commit is submitted to the group as a
//! [`PartitionOp`] and resolves once a quorum holds it and this replica has applied it, so the
//! copy reads its own writes. Writes carrying [`WriteStamps`] apply only against the stamp
//! they read (a stale copy's are refused as [`CommitError::Stale`]); writes without (outbox
//! acknowledgements, a given-up reminder's cancel) settle whatever the stamp. It orders reads:
//! its [`EntityState::barrier`] is the commit barrier a message that wrote nothing waits for
//! before it answers.

use super::image_stream::ImageRows;
use super::moving::{self, FILL_BYTES_MAX, Phase};
use super::op::{PartitionOp, PartitionResult};
use super::stamps::read_stamp;
use crate::backend::{CommitFuture, EntityMeta, EntityState};
use crate::error::{CommitError, StoreError};
use crate::messaging::{self, DueReminder, OutboxEntry, Receipt, Reminder, Sequences};
use crate::remember::RememberOp;
use crate::shard_transfer::ShardPart;
use crate::tables::StateStore;
use crate::write_set::{WriteSet, WriteStamps};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tessera_consensus::group::{Group, SubmitError};
use tessera_consensus::message::checksum_bytes_from;
use tessera_consensus::state_machine::ImageReader;
use tessera_contract::{EntityAddress, TypeKey};

/// The most bytes of rows one install of a restored part carries (see
/// [`PartitionState::install`]).
pub const INSTALL_BYTES_MAX: usize = 256 * 1024;

/// This node's view of one partition's entities: reads from its replica, commits through the
/// group.
///
/// ```no_run
/// # async fn example(group: std::sync::Arc<tessera_consensus::group::Group>) {
/// use tessera_contract::EntityAddress;
/// use tessera_state::partition::{PartitionMachine, PartitionReplica, PartitionState};
/// use tessera_state::{EntityState, WriteSet, WriteStamps};
///
/// let machine = PartitionMachine::in_memory().unwrap();
/// let state = PartitionState::new(machine.store().clone(), group);
/// // ... the machine goes to the group's voter as `PartitionReplica::new(machine)` ...
/// let counter = EntityAddress::new("t", "counter", "c1");
/// let read = state.meta(&counter).unwrap().stamp;
/// let mut writes = WriteSet::new(counter.clone());
/// writes.put("value", vec![1]);
/// writes.set_stamps(WriteStamps { read, written: 42 });
/// state.commit(writes).await.unwrap();
/// assert_eq!(state.meta(&counter).unwrap().stamp, 42);
/// # }
/// ```
pub struct PartitionState {
    store: StateStore,
    group: Arc<Group>,
    /// This node's replica of the partition's next epoch, once a move started it here.
    successor: Arc<OnceLock<Arc<PartitionState>>>,
}

/// How long an operation refused because its partition's new group is not open yet is
/// submitted again before it is answered as refused: a move's seal-to-open window is usually
/// far shorter, and the asks that meet it wait instead of failing.
pub const MOVE_WAIT_MAX: Duration = Duration::from_secs(3);

/// The pause between two submissions of an operation its moving partition refused.
const MOVE_POLL: Duration = Duration::from_millis(25);

impl PartitionState {
    /// Serves from `store` (the replica's machine's, [`PartitionMachine::store`]) and commits
    /// through `group`.
    ///
    /// [`PartitionMachine::store`]: super::PartitionMachine::store
    pub fn new(store: StateStore, group: Arc<Group>) -> Self {
        PartitionState {
            store,
            group,
            successor: Arc::default(),
        }
    }

    /// `next` is this node's replica of the partition's next epoch: an operation this group
    /// refuses as sealed goes there, waiting up to [`MOVE_WAIT_MAX`] while it fills. Set once;
    /// later calls change nothing.
    pub fn succeeded_by(&self, next: Arc<PartitionState>) {
        let _ = self.successor.set(next);
    }

    /// Submits `operation` and answers as [`answer`] does, following the partition through a
    /// move (see [`submit_following`]).
    fn submit(&self, operation: Vec<u8>) -> CommitFuture {
        let group = Arc::clone(&self.group);
        let successor = Arc::clone(&self.successor);
        Box::pin(submit_following(
            group,
            successor,
            self.store.clone(),
            operation,
        ))
    }

    /// The replica's tables (for reads that span entities, such as listing a type's ids).
    pub fn store(&self) -> &StateStore {
        &self.store
    }

    /// Submits one part of `type_key`'s shard `shard` restored from a backup (see
    /// [`PartitionOp::Install`]), cut into installs of at most `INSTALL_BYTES_MAX` (a
    /// group carries an operation whole in every prepare and view-change message), one after
    /// another; resolves once a quorum holds the last and this replica applied it. The caller
    /// checked the part against the shard.
    pub fn install(
        &self,
        stamp: u64,
        type_key: TypeKey,
        shard: u32,
        part: ShardPart,
    ) -> CommitFuture {
        let group = Arc::clone(&self.group);
        let successor = Arc::clone(&self.successor);
        let store = self.store.clone();
        Box::pin(async move {
            for piece in part.split(INSTALL_BYTES_MAX) {
                let op = PartitionOp::Install {
                    stamp,
                    type_key: type_key.clone(),
                    shard,
                    part: piece,
                };
                submit_following(group.clone(), successor.clone(), store.clone(), op.encode())
                    .await?;
            }
            Ok(())
        })
    }

    /// Where this replica's group is in a move.
    pub fn phase(&self) -> Result<Phase, StoreError> {
        moving::phase(&self.store)
    }

    /// Seals the group for a move (see `moving`): resolves once the seal committed and this
    /// replica applied it (also when it was sealed already); a group still filling refuses.
    pub fn seal(&self) -> CommitFuture {
        let submitted = self.group.submit(PartitionOp::Seal.encode());
        Box::pin(async move { answer(submitted.await) })
    }

    /// Commits an op that changes nothing (an open of nothing: a filling group refuses it, an
    /// open one has nothing to do), for the group's backups to acknowledge; resolves once it
    /// committed and this replica applied it.
    pub fn probe(&self) -> CommitFuture {
        let op = PartitionOp::Open {
            checksum: 0,
            pieces: 0,
        };
        let submitted = self.group.submit(op.encode());
        Box::pin(async move { submitted.await.map(|_| ()).map_err(submit_failure) })
    }

    /// Fills this replica's group — a move's new one — with the rows of `source` (a sealed
    /// replica's, which no longer change), streamed in pieces of at most [`FILL_BYTES_MAX`],
    /// and opens it. The rows are read twice, a piece at a time — once for the whole's
    /// checksum, which every fill names, then to send them — so no image of the partition is
    /// held in memory. Resolves `Ok` once the group is open, by this fill or another.
    pub fn fill(&self, source: &FillSource) -> CommitFuture {
        let group = Arc::clone(&self.group);
        let store = source.0.clone();
        Box::pin(async move {
            let (checksum, pieces) = fill_checksum(&store)?;
            let mut rows = ImageRows::open(&store, 0).map_err(storage)?;
            for index in 0..pieces {
                let op = PartitionOp::Fill {
                    checksum,
                    index,
                    bytes: rows.read(FILL_BYTES_MAX).map_err(CommitError::Storage)?,
                };
                match group.submit(op.encode()).await {
                    Ok(bytes) if PartitionResult::decode(&bytes) == PartitionResult::Opened => {
                        return Ok(());
                    }
                    submitted => answer(submitted)?,
                }
            }
            let open = PartitionOp::Open { checksum, pieces };
            answer(group.submit(open.encode()).await)
        })
    }

    /// Submits changes to the partition's remembered ids; resolves once a quorum holds them
    /// and this replica applied them.
    pub fn remember(&self, ops: Vec<RememberOp>) -> CommitFuture {
        self.submit(PartitionOp::Remember { ops }.encode())
    }
}

/// What a submitted op's outcome means to the writer. Only a submission refused before it
/// was sent is certainly not committed; one that timed out or lost its answer was sent, and
/// its session may still get it committed.
/// Submits `operation` to `group` and answers as [`answer`] does — but an operation refused
/// because its partition is moving goes on: to the next epoch's group when this one is sealed
/// and that one runs here (`successor`), to the same group, for up to [`MOVE_WAIT_MAX`], while
/// it is still filling. It is the same bytes each time: a write still applies
/// only against the stamp it read, and a move carries the stamps over.
async fn submit_following(
    mut group: Arc<Group>,
    mut successor: Arc<OnceLock<Arc<PartitionState>>>,
    mut store: StateStore,
    operation: Vec<u8>,
) -> Result<(), CommitError> {
    let until = tokio::time::Instant::now() + MOVE_WAIT_MAX;
    loop {
        // A group this replica knows sealed refuses everything: nothing is sent to it (its
        // other replicas may have stopped it already).
        let result = if moving::phase(&store) == Ok(Phase::Sealed) {
            PartitionResult::Sealed
        } else {
            match group.submit(operation.clone()).await {
                Ok(bytes) => PartitionResult::decode(&bytes),
                Err(error) => return Err(submit_failure(error)),
            }
        };
        match result {
            PartitionResult::Sealed => {
                // The next epoch's replica here starts before the seal: with none, this node
                // is no replica of it, and waiting changes nothing.
                let Some(next) = successor.get().cloned() else {
                    return settled(result);
                };
                group = Arc::clone(&next.group);
                successor = Arc::clone(&next.successor);
                store = next.store.clone();
                continue;
            }
            PartitionResult::Filling => {}
            done => return settled(done),
        }
        if tokio::time::Instant::now() >= until {
            return settled(result);
        }
        tokio::time::sleep(MOVE_POLL).await;
    }
}

/// Where a move's new group is filled from ([`PartitionState::fill`]).
#[derive(Clone)]
pub struct FillSource(StateStore);

impl FillSource {
    /// The rows of `replica`, a sealed replica of the epoch being left.
    pub fn sealed(replica: &PartitionState) -> FillSource {
        FillSource(replica.store.clone())
    }

    /// No rows: every replica of the epoch before was removed, and their state with them.
    pub fn empty() -> Result<FillSource, StoreError> {
        Ok(FillSource(
            super::PartitionMachine::in_memory()?.store().clone(),
        ))
    }

    /// The rows of `machine`, a sealed replica's machine (the simulator's moves).
    pub fn of_machine(machine: &super::PartitionMachine) -> FillSource {
        FillSource(machine.store().clone())
    }

    /// The whole stream a fill sends, in one buffer: for the simulator and tests, whose
    /// partitions are small (a node's fill reads it a piece at a time).
    pub fn whole_stream(&self) -> Result<Vec<u8>, StoreError> {
        let mut rows = ImageRows::open(&self.0, 0)?;
        let mut stream = Vec::new();
        loop {
            let piece = rows.read(FILL_BYTES_MAX).map_err(StoreError::io)?;
            stream.extend_from_slice(&piece);
            if piece.len() < FILL_BYTES_MAX {
                return Ok(stream);
            }
        }
    }
}

fn storage(error: StoreError) -> CommitError {
    CommitError::Storage(error.to_string())
}

/// The checksum of the stream of `store`'s rows and the pieces of [`FILL_BYTES_MAX`] it
/// takes (the last may be shorter, or empty).
fn fill_checksum(store: &StateStore) -> Result<(u64, u32), CommitError> {
    let mut rows = ImageRows::open(store, 0).map_err(storage)?;
    let (mut sum, mut pieces) = (None, 0u32);
    loop {
        let piece = rows.read(FILL_BYTES_MAX).map_err(CommitError::Storage)?;
        sum = Some(checksum_bytes_from(sum, &piece));
        pieces = pieces
            .checked_add(1)
            .ok_or_else(|| CommitError::Storage("an image of too many pieces".into()))?;
        if piece.len() < FILL_BYTES_MAX {
            return Ok((sum.unwrap_or_default(), pieces));
        }
    }
}

/// A submission that has no result: refused before it was sent (`Busy`), or unknown.
fn submit_failure(error: SubmitError) -> CommitError {
    match error {
        SubmitError::Busy | SubmitError::NotRunning => CommitError::Unavailable(error.to_string()),
        other => CommitError::Unknown(other.to_string()),
    }
}

fn answer(submitted: Result<Vec<u8>, SubmitError>) -> Result<(), CommitError> {
    settled(PartitionResult::decode(&submitted.map_err(submit_failure)?))
}

/// What an applied operation's result means to the committer.
fn settled(result: PartitionResult) -> Result<(), CommitError> {
    match result {
        PartitionResult::Applied { .. } | PartitionResult::Checked { .. } => Ok(()),
        PartitionResult::Conflict { stamp } => Err(CommitError::Stale { stamp }),
        PartitionResult::Malformed(reason) | PartitionResult::StorageFailed(reason) => {
            Err(CommitError::Storage(reason))
        }
        // Refused whole, applied nowhere: the message may run again, in the group that
        // serves the partition now.
        PartitionResult::Sealed => Err(CommitError::Unavailable(
            "the partition moved to another replica set".into(),
        )),
        PartitionResult::Filling => Err(CommitError::Unavailable(
            "the partition's new replica set is still taking its state".into(),
        )),
        PartitionResult::Opened => Err(CommitError::Unavailable(
            "the partition's group is open: it takes no fill".into(),
        )),
    }
}

impl EntityState for PartitionState {
    fn get(&self, entity: &EntityAddress, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.store.get(entity, key)
    }

    fn meta(&self, entity: &EntityAddress) -> Result<EntityMeta, StoreError> {
        Ok(EntityMeta {
            stamp: read_stamp(&self.store, entity)?,
            ..self.store.meta(entity)?
        })
    }

    fn entries(
        &self,
        entity: &EntityAddress,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.store.entries(entity, limit)
    }

    fn commit(&self, writes: WriteSet) -> CommitFuture {
        let at_ms = messaging::now_ms();
        let op = match writes.stamps() {
            Some(WriteStamps { read, written }) => {
                match PartitionOp::write(writes, read, written, at_ms, Vec::new()) {
                    Ok(op) => op,
                    Err(error) => {
                        let error = CommitError::Storage(error.to_string());
                        return Box::pin(std::future::ready(Err(error)));
                    }
                }
            }
            None => PartitionOp::Settle { at_ms, writes },
        };
        self.submit(op.encode())
    }

    fn orders_reads(&self, _entity: &EntityAddress) -> bool {
        true
    }

    /// Resolves once the group has ordered a check that `entity`'s stamp is still `read`: the
    /// state a message read was current at that point of the partition's history.
    /// [`CommitError::Stale`] if the entity changed since.
    fn barrier(&self, entity: &EntityAddress, read: u64) -> CommitFuture {
        let op = PartitionOp::Check {
            entity: entity.clone(),
            expect: read,
            reply: Vec::new(),
        };
        self.submit(op.encode())
    }

    fn sequences(&self, entity: &EntityAddress) -> Result<Sequences, StoreError> {
        self.store.sequences(entity)
    }

    fn is_duplicate(
        &self,
        receiver: &EntityAddress,
        receipt: &Receipt,
    ) -> Result<bool, StoreError> {
        self.store.is_duplicate(receiver, receipt)
    }

    fn outbox(&self, sender: &EntityAddress, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        self.store.outbox(sender, limit)
    }

    fn outbox_senders(
        &self,
        after: Option<&EntityAddress>,
        limit: usize,
    ) -> Result<Vec<EntityAddress>, StoreError> {
        self.store.outbox_senders(after, limit)
    }

    fn due_reminders(
        &self,
        until_ms: u64,
        after: Option<&DueReminder>,
        limit: usize,
    ) -> Result<Vec<DueReminder>, StoreError> {
        self.store.due_reminders(until_ms, after, limit)
    }

    fn next_due(&self) -> Result<Option<u64>, StoreError> {
        self.store.next_due()
    }

    fn pending_messages(&self) -> Result<(u64, u64), StoreError> {
        self.store.pending_messages()
    }

    fn reminder(&self, entity: &EntityAddress, timer: u64) -> Result<Option<Reminder>, StoreError> {
        self.store.reminder(entity, timer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A submission that was sent and not answered may still commit: its writer must not be
    /// told "not written" (a client would run the message again); one refused before it was
    /// sent was not written.
    #[test]
    fn only_a_submission_refused_before_it_was_sent_is_known_not_committed() {
        for error in [SubmitError::Busy, SubmitError::NotRunning] {
            let refused = answer(Err(error)).expect_err("an error");
            assert!(!refused.may_have_committed(), "{refused}");
        }
        let unanswered = [
            SubmitError::TimedOut(Duration::from_secs(10)),
            SubmitError::NoAnswer,
            SubmitError::Stopped,
        ];
        for error in unanswered {
            let unknown = answer(Err(error)).expect_err("an error");
            assert!(unknown.may_have_committed(), "{unknown}");
        }
    }
}
