//! The shard commands of the catalog's state machine: seating a coordinator, assigning and
//! moving shards, completing handoffs. Every assignment and move is fenced twice — it carries
//! the epoch of the coordinator that decided, refused unless that coordinator is the seated one,
//! and the generation it read for each shard, refused unless the shard still has it — so a
//! deposed coordinator that goes on deciding (a stalled or cut-off metadata primary) changes
//! nothing, and no decision overwrites one it did not see.

use super::command::{Applied, ShardAssignment, ShardMove};
use super::error::{MetadataError, storage};
use super::store::{COORDINATOR_EPOCH, COUNTERS, NEXT_GENERATION, SHARD_HANDOFFS, SHARDS};
use redb::{ReadableTable, WriteTransaction};
use tessera_contract::{Allocation, NodeId, ShardKey, TypeKey};

/// A shard's row key in the shard tables.
fn row(key: &ShardKey) -> (&str, &str, u32) {
    (
        key.type_key.tenant.as_str(),
        key.type_key.entity_type.as_str(),
        key.shard,
    )
}

fn seated_epoch(transaction: &WriteTransaction) -> Result<u64, MetadataError> {
    let counters = transaction.open_table(COUNTERS).map_err(storage)?;
    let epoch = counters.get(COORDINATOR_EPOCH).map_err(storage)?;
    Ok(epoch.map_or(0, |epoch| epoch.value()))
}

/// Seats the coordinator of `epoch` unless a later one is seated.
pub(crate) fn seat_coordinator(
    transaction: &WriteTransaction,
    epoch: u64,
) -> Result<Applied, MetadataError> {
    let seated = seated_epoch(transaction)?;
    if epoch < seated {
        return Err(MetadataError::StaleCoordinator { epoch, seated });
    }
    let mut counters = transaction.open_table(COUNTERS).map_err(storage)?;
    counters.insert(COORDINATOR_EPOCH, epoch).map_err(storage)?;
    Ok(Applied::CoordinatorSeated { epoch })
}

/// Refuses a decision of any coordinator but the seated one.
pub(crate) fn require_seated(
    transaction: &WriteTransaction,
    epoch: u64,
) -> Result<(), MetadataError> {
    let seated = seated_epoch(transaction)?;
    if epoch != seated {
        return Err(MetadataError::StaleCoordinator { epoch, seated });
    }
    Ok(())
}

/// Refuses a decision that read another generation than `key` has.
fn require_generation(
    transaction: &WriteTransaction,
    key: &ShardKey,
    expected: Option<u64>,
) -> Result<(), MetadataError> {
    let shards = transaction.open_table(SHARDS).map_err(storage)?;
    let current = shards
        .get(row(key))
        .map_err(storage)?
        .map(|value| value.value().1);
    if current != expected {
        return Err(MetadataError::ShardMoved {
            key: key.to_string(),
            expected,
            current,
        });
    }
    Ok(())
}

/// Assigns shards (fenced); an assignment (not a move) ends any handoff of the shard.
pub(crate) fn assign_shards(
    transaction: &WriteTransaction,
    epoch: u64,
    assignments: Vec<ShardAssignment>,
) -> Result<Applied, MetadataError> {
    require_seated(transaction, epoch)?;
    for assignment in &assignments {
        require_generation(transaction, &assignment.key, assignment.expected)?;
    }
    {
        let mut handoffs = transaction.open_table(SHARD_HANDOFFS).map_err(storage)?;
        for assignment in &assignments {
            handoffs.remove(row(&assignment.key)).map_err(storage)?;
        }
    }
    let targets = assignments.into_iter().map(|a| (a.key, a.to)).collect();
    write_allocations(transaction, targets).map(Applied::ShardsAssigned)
}

/// Moves shards (fenced) and records each move as a handoff in flight.
pub(crate) fn move_shards(
    transaction: &WriteTransaction,
    epoch: u64,
    moves: Vec<ShardMove>,
) -> Result<Applied, MetadataError> {
    require_seated(transaction, epoch)?;
    for shard_move in &moves {
        require_generation(transaction, &shard_move.key, Some(shard_move.expected))?;
    }
    {
        let mut handoffs = transaction.open_table(SHARD_HANDOFFS).map_err(storage)?;
        for shard_move in &moves {
            handoffs
                .insert(row(&shard_move.key), shard_move.from.as_str())
                .map_err(storage)?;
        }
    }
    let targets = moves.into_iter().map(|m| (m.key, m.to)).collect();
    write_allocations(transaction, targets).map(Applied::ShardsMoved)
}

/// Gives every shard `node` holds a new generation, with `node` still named: a removed member's
/// state is declared lost, so whoever serves those shards next — another node, or `node` itself
/// restarted on an empty disk under the same id — starts a new lineage (new sender sequences,
/// no rows kept from the old one) rather than continuing the lost one empty. A coordinator that
/// read the old generations is refused (`ShardMoved`) and reads the table again.
pub(crate) fn regenerate_held_by(
    transaction: &WriteTransaction,
    node: &str,
) -> Result<Vec<(ShardKey, Allocation)>, MetadataError> {
    let held: Vec<(ShardKey, NodeId)> = {
        let shards = transaction.open_table(SHARDS).map_err(storage)?;
        let mut held = Vec::new();
        for row in shards.iter().map_err(storage)? {
            let (key, value) = row.map_err(storage)?;
            let (tenant, entity_type, shard) = key.value();
            let (owner, _) = value.value();
            if owner == node {
                let key = ShardKey::new(TypeKey::new(tenant, entity_type), shard);
                held.push((key, owner.to_string()));
            }
        }
        held
    };
    if held.is_empty() {
        return Ok(Vec::new());
    }
    write_allocations(transaction, held)
}

/// Gives each shard to its node at the catalog's next generation.
fn write_allocations(
    transaction: &WriteTransaction,
    targets: Vec<(ShardKey, NodeId)>,
) -> Result<Vec<(ShardKey, Allocation)>, MetadataError> {
    let generations = next_generations(transaction, targets.len() as u64)?;
    let mut shards = transaction.open_table(SHARDS).map_err(storage)?;
    let mut assigned = Vec::with_capacity(targets.len());
    for ((key, node), generation) in targets.into_iter().zip(generations) {
        let allocation = Allocation { node, generation };
        shards
            .insert(row(&key), (allocation.node.as_str(), allocation.generation))
            .map_err(storage)?;
        assigned.push((key, allocation));
    }
    Ok(assigned)
}

/// Takes the catalog's next `count` generations (shard allocations and partition placements
/// share the counter, so a generation names one decision).
pub(crate) fn next_generations(
    transaction: &WriteTransaction,
    count: u64,
) -> Result<std::ops::Range<u64>, MetadataError> {
    let mut counters = transaction.open_table(COUNTERS).map_err(storage)?;
    let next = counters
        .get(NEXT_GENERATION)
        .map_err(storage)?
        .map_or(1, |value| value.value());
    counters
        .insert(NEXT_GENERATION, next + count)
        .map_err(storage)?;
    Ok(next..next + count)
}

/// Ends `key`'s handoff if its allocation is still `generation`.
pub(crate) fn complete_handoff(
    transaction: &WriteTransaction,
    key: &ShardKey,
    generation: u64,
) -> Result<Applied, MetadataError> {
    let current = transaction
        .open_table(SHARDS)
        .map_err(storage)?
        .get(row(key))
        .map_err(storage)?
        .map(|value| value.value().1);
    if current != Some(generation) {
        return Ok(Applied::HandoffCompleted { ended: false });
    }
    let removed = transaction
        .open_table(SHARD_HANDOFFS)
        .map_err(storage)?
        .remove(row(key))
        .map_err(storage)?
        .is_some();
    Ok(Applied::HandoffCompleted { ended: removed })
}
