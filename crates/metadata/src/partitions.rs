//! The partition table of the catalog: each partition of the partition plane and its ordered
//! replica set, placed by the seated coordinator ([`Command::PlacePartitions`]) and fenced as
//! shard decisions are (`shards.rs`): the coordinator's epoch, and the generation it read for
//! each partition. Generations come from the same counter as shard allocations, so a
//! partition's generation names one placement for good.
//!
//! [`Command::PlacePartitions`]: super::Command::PlacePartitions

use super::command::{Applied, PartitionPlacement};
use super::error::{MetadataError, storage};
use super::records::PartitionReplicas;
use super::shards::{next_generations, require_seated};
use super::store::{MEMBERS, MetadataStore, PARTITIONS};
use redb::{ReadableDatabase, ReadableTable, WriteTransaction};
use std::collections::{BTreeMap, BTreeSet};
use tessera_consensus::group::GroupId;
use tessera_contract::NodeId;

pub use super::limits::{PARTITION_REPLICAS_MAX, PARTITIONS_MAX};

/// The VSR group that replicates `partition` at `epoch` (its replica set's number, see
/// [`PartitionReplicas::epoch`]): the epoch in the high 32 bits, the partition plus one in
/// the low (group 0 is the metadata plane's). Epoch 0's group of a partition is the one it
/// had before moves existed.
///
/// ```
/// use tessera_metadata::{METADATA_GROUP, group_partition, partition_group};
/// assert_eq!(group_partition(partition_group(5, 0)), Some((5, 0)));
/// assert_eq!(group_partition(partition_group(5, 3)), Some((5, 3)));
/// assert_ne!(partition_group(5, 0), partition_group(5, 1));
/// assert_eq!(group_partition(METADATA_GROUP), None);
/// ```
pub fn partition_group(partition: u32, epoch: u64) -> GroupId {
    GroupId((epoch << 32) | (u64::from(partition) + 1))
}

/// The voters of `partition`'s group, in the order every member runs them, from its placed
/// `replicas` in any order: sorted, then rotated by the partition number. A voter's index in
/// this list is its replica index in the group (and the primary of view `v` is voter
/// `v % len`), so every member must derive the same list. The placement's own order changes
/// where a group's members do not (a preferred primary put first, a replica dropped while
/// its node was down and placed back), and a member started after such a change — restarted,
/// or rebuilding on an empty disk — would otherwise number the voters differently from the
/// members that kept running. The rotation spreads the first view's primaries over the
/// members as the placement spreads its preferred primaries.
///
/// ```
/// use tessera_metadata::group_voters;
/// let placed = ["n3", "n1", "n2"].map(String::from);
/// let reordered = ["n1", "n2", "n3"].map(String::from);
/// assert_eq!(group_voters(1, &placed), group_voters(1, &reordered));
/// assert_eq!(group_voters(1, &placed), ["n2", "n3", "n1"]);
/// assert_eq!(group_voters(3, &placed), group_voters(0, &placed));
/// ```
pub fn group_voters(partition: u32, replicas: &[NodeId]) -> Vec<NodeId> {
    let mut voters = replicas.to_vec();
    voters.sort();
    voters.dedup();
    if !voters.is_empty() {
        let first = partition as usize % voters.len();
        voters.rotate_left(first);
    }
    voters
}

/// The partition and epoch a group replicates, if it is a partition's group.
pub fn group_partition(group: GroupId) -> Option<(u32, u64)> {
    let partition = (group.0 & u64::from(u32::MAX)).checked_sub(1)?;
    let partition = u32::try_from(partition)
        .ok()
        .filter(|partition| *partition < PARTITIONS_MAX)?;
    Some((partition, group.0 >> 32))
}

/// Places partitions (fenced; see [`Command::PlacePartitions`](super::Command::PlacePartitions)).
pub(crate) fn place_partitions(
    transaction: &WriteTransaction,
    epoch: u64,
    placements: Vec<PartitionPlacement>,
) -> Result<Applied, MetadataError> {
    require_seated(transaction, epoch)?;
    if placements.len() > PARTITIONS_MAX as usize {
        return Err(MetadataError::InvalidPlacement(format!(
            "{} placements in one command, at most {PARTITIONS_MAX}",
            placements.len()
        )));
    }
    let mut table = transaction.open_table(PARTITIONS).map_err(storage)?;
    let members = transaction.open_table(MEMBERS).map_err(storage)?;
    for placement in &placements {
        validate(placement, |node| {
            members
                .get(node)
                .map(|found| found.is_some())
                .map_err(storage)
        })?;
        let current = table
            .get(placement.partition)
            .map_err(storage)?
            .map(|value| value.value().1);
        if current != placement.expected {
            return Err(MetadataError::PartitionMoved {
                partition: placement.partition,
                expected: placement.expected,
                current,
            });
        }
        if placement.settled {
            let row = table.get(placement.partition).map_err(storage)?;
            let before = match row {
                Some(row) => Some(decode_row(placement.partition, row.value().0)?),
                None => None,
            };
            if !before.is_some_and(|before| same_replica_set(&before.replicas, &placement.replicas))
            {
                return Err(MetadataError::InvalidPlacement(format!(
                    "partition {}: a settled move keeps its replica set",
                    placement.partition
                )));
            }
        }
    }
    let generations = next_generations(transaction, placements.len() as u64)?;
    let mut placed = Vec::with_capacity(placements.len());
    for (placement, generation) in placements.into_iter().zip(generations) {
        let before = match table.get(placement.partition).map_err(storage)? {
            Some(row) => Some(decode_row(placement.partition, row.value().0)?),
            None => None,
        };
        let (epoch, previous) = match before {
            None => (0, Vec::new()),
            Some(before) if same_replica_set(&before.replicas, &placement.replicas) => {
                let previous = if placement.settled {
                    Vec::new()
                } else {
                    before.previous
                };
                (before.epoch, previous)
            }
            Some(before) => (before.epoch + 1, before.replicas),
        };
        let replicas = PartitionReplicas {
            replicas: placement.replicas,
            generation,
            epoch,
            previous,
        };
        let encoded = encode_row(&replicas)?;
        table
            .insert(placement.partition, (encoded.as_slice(), generation))
            .map_err(storage)?;
        placed.push((placement.partition, replicas));
    }
    Ok(Applied::PartitionsPlaced(placed))
}

/// Whether two replica lists name the same nodes, in any order: a placement that changes only
/// the order keeps its epoch.
///
/// ```
/// use tessera_metadata::same_replica_set;
/// let nodes = |names: &[&str]| names.iter().map(|name| name.to_string()).collect::<Vec<_>>();
/// assert!(same_replica_set(&nodes(&["n1", "n2"]), &nodes(&["n2", "n1"])));
/// assert!(!same_replica_set(&nodes(&["n1", "n2"]), &nodes(&["n1", "n3"])));
/// ```
pub fn same_replica_set(left: &[NodeId], right: &[NodeId]) -> bool {
    let left: BTreeSet<&NodeId> = left.iter().collect();
    let right: BTreeSet<&NodeId> = right.iter().collect();
    left == right
}

/// A row's bytes: `(replicas, epoch, previous)`. Rows written before moves existed hold the
/// replicas alone, and read as epoch 0.
fn encode_row(placed: &PartitionReplicas) -> Result<Vec<u8>, MetadataError> {
    let row = (&placed.replicas, placed.epoch, &placed.previous);
    rmp_serde::to_vec(&row).map_err(|error| {
        MetadataError::InvalidPlacement(format!("replicas do not encode: {error}"))
    })
}

/// Reads a row's bytes (see [`encode_row`]); its generation is left 0 for the caller.
pub(crate) fn decode_row(partition: u32, bytes: &[u8]) -> Result<PartitionReplicas, MetadataError> {
    let (replicas, epoch, previous) =
        match rmp_serde::from_slice::<(Vec<NodeId>, u64, Vec<NodeId>)>(bytes) {
            Ok(row) => row,
            Err(_) => {
                let replicas = rmp_serde::from_slice(bytes).map_err(|error| {
                    MetadataError::Storage(format!("partition {partition} row: {error}"))
                })?;
                (replicas, 0, Vec::new())
            }
        };
    Ok(PartitionReplicas {
        replicas,
        generation: 0,
        epoch,
        previous,
    })
}

/// Refuses a placement the plane cannot run; `is_member` says whether a node is a member.
fn validate(
    placement: &PartitionPlacement,
    is_member: impl Fn(&str) -> Result<bool, MetadataError>,
) -> Result<(), MetadataError> {
    let partition = placement.partition;
    let invalid = |reason: String| Err(MetadataError::InvalidPlacement(reason));
    if partition >= PARTITIONS_MAX {
        return invalid(format!(
            "partition {partition}: at most {PARTITIONS_MAX} partitions"
        ));
    }
    let count = placement.replicas.len();
    if count == 0 || count > PARTITION_REPLICAS_MAX {
        return invalid(format!(
            "partition {partition}: {count} replicas, 1 to {PARTITION_REPLICAS_MAX} allowed"
        ));
    }
    let distinct: BTreeSet<&NodeId> = placement.replicas.iter().collect();
    if distinct.len() != count {
        return invalid(format!("partition {partition}: a node named twice"));
    }
    for node in &placement.replicas {
        if !is_member(node)? {
            return invalid(format!("partition {partition}: {node} is not a member"));
        }
    }
    Ok(())
}

/// Every placed partition's row, for the catalog's snapshot: `(partition, replicas, generation)`.
pub(crate) type PartitionRow = (u32, Vec<NodeId>, u64);

/// A moved partition's epoch and previous replicas, for the catalog's snapshot (rows at epoch
/// 0 have none, so a snapshot of a catalog that never moved one is as before moves existed).
pub(crate) type PartitionEpochRow = (u32, u64, Vec<NodeId>);

/// Reads the partition table (one transaction).
pub(crate) fn read_rows(
    table: &impl ReadableTable<u32, (&'static [u8], u64)>,
) -> Result<BTreeMap<u32, PartitionReplicas>, MetadataError> {
    let mut rows = BTreeMap::new();
    for row in table.iter().map_err(storage)? {
        let (partition, value) = row.map_err(storage)?;
        let (encoded, generation) = value.value();
        let placed = PartitionReplicas {
            generation,
            ..decode_row(partition.value(), encoded)?
        };
        rows.insert(partition.value(), placed);
    }
    Ok(rows)
}

/// The snapshot's rows of the table (see [`PartitionRow`] and [`PartitionEpochRow`]).
pub(crate) fn snapshot_rows(
    table: &impl ReadableTable<u32, (&'static [u8], u64)>,
) -> Result<(Vec<PartitionRow>, Vec<PartitionEpochRow>), MetadataError> {
    let mut rows = Vec::new();
    let mut epochs = Vec::new();
    for (partition, placed) in read_rows(table)? {
        if placed.epoch > 0 || !placed.previous.is_empty() {
            epochs.push((partition, placed.epoch, placed.previous));
        }
        rows.push((partition, placed.replicas, placed.generation));
    }
    Ok((rows, epochs))
}

/// Replaces the partition table with a snapshot's `rows` and `epochs`.
pub(crate) fn write_rows(
    transaction: &WriteTransaction,
    rows: &[PartitionRow],
    epochs: &[PartitionEpochRow],
) -> Result<(), MetadataError> {
    let epochs: BTreeMap<u32, (u64, &Vec<NodeId>)> = epochs
        .iter()
        .map(|(partition, epoch, previous)| (*partition, (*epoch, previous)))
        .collect();
    let mut table = transaction.open_table(PARTITIONS).map_err(storage)?;
    table.retain(|_, _| false).map_err(storage)?;
    for (partition, replicas, generation) in rows {
        let (epoch, previous) = epochs
            .get(partition)
            .map_or((0, Vec::new()), |(epoch, previous)| {
                (*epoch, previous.to_vec())
            });
        let placed = PartitionReplicas {
            replicas: replicas.clone(),
            generation: *generation,
            epoch,
            previous,
        };
        table
            .insert(*partition, (encode_row(&placed)?.as_slice(), *generation))
            .map_err(storage)?;
    }
    Ok(())
}

impl MetadataStore {
    /// Every placed partition and its replica set.
    pub fn partitions(&self) -> Result<BTreeMap<u32, PartitionReplicas>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(PARTITIONS).map_err(storage)?;
        read_rows(&table)
    }
}

#[cfg(test)]
mod tests;
