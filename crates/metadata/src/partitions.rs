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

/// The most partitions a cluster may have: bounds the table, a placement command and the
/// groups a node may be asked to run.
pub const PARTITIONS_MAX: u32 = 4096;

/// The most replicas one partition may have (a VSR group of more gains nothing and costs a
/// prepare to each).
pub const PARTITION_REPLICAS_MAX: usize = 7;

/// The VSR group that replicates `partition` (group 0 is the metadata plane's).
///
/// ```
/// use tessera_metadata::{METADATA_GROUP, group_partition, partition_group};
/// assert_eq!(group_partition(partition_group(5)), Some(5));
/// assert_eq!(group_partition(METADATA_GROUP), None);
/// ```
pub fn partition_group(partition: u32) -> GroupId {
    GroupId(u64::from(partition) + 1)
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

/// The partition a group replicates, if it is a partition's group.
pub fn group_partition(group: GroupId) -> Option<u32> {
    let partition = group.0.checked_sub(1)?;
    u32::try_from(partition)
        .ok()
        .filter(|partition| *partition < PARTITIONS_MAX)
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
    }
    let generations = next_generations(transaction, placements.len() as u64)?;
    let mut placed = Vec::with_capacity(placements.len());
    for (placement, generation) in placements.into_iter().zip(generations) {
        let encoded = rmp_serde::to_vec(&placement.replicas).map_err(|error| {
            MetadataError::InvalidPlacement(format!("replicas do not encode: {error}"))
        })?;
        table
            .insert(placement.partition, (encoded.as_slice(), generation))
            .map_err(storage)?;
        let replicas = PartitionReplicas {
            replicas: placement.replicas,
            generation,
        };
        placed.push((placement.partition, replicas));
    }
    Ok(Applied::PartitionsPlaced(placed))
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

/// Reads the partition table (one transaction).
pub(crate) fn read_rows(
    table: &impl ReadableTable<u32, (&'static [u8], u64)>,
) -> Result<Vec<PartitionRow>, MetadataError> {
    let mut rows = Vec::new();
    for row in table.iter().map_err(storage)? {
        let (partition, value) = row.map_err(storage)?;
        let (encoded, generation) = value.value();
        let replicas: Vec<NodeId> = rmp_serde::from_slice(encoded).map_err(|error| {
            MetadataError::Storage(format!("partition {} row: {error}", partition.value()))
        })?;
        rows.push((partition.value(), replicas, generation));
    }
    Ok(rows)
}

/// Replaces the partition table with `rows` (a snapshot installed).
pub(crate) fn write_rows(
    transaction: &WriteTransaction,
    rows: &[PartitionRow],
) -> Result<(), MetadataError> {
    let mut table = transaction.open_table(PARTITIONS).map_err(storage)?;
    table.retain(|_, _| false).map_err(storage)?;
    for (partition, replicas, generation) in rows {
        let encoded = rmp_serde::to_vec(replicas).map_err(|error| {
            MetadataError::InvalidPlacement(format!("replicas do not encode: {error}"))
        })?;
        table
            .insert(*partition, (encoded.as_slice(), *generation))
            .map_err(storage)?;
    }
    Ok(())
}

impl MetadataStore {
    /// Every placed partition and its replica set.
    pub fn partitions(&self) -> Result<BTreeMap<u32, PartitionReplicas>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(PARTITIONS).map_err(storage)?;
        Ok(read_rows(&table)?
            .into_iter()
            .map(|(partition, replicas, generation)| {
                (
                    partition,
                    PartitionReplicas {
                        replicas,
                        generation,
                    },
                )
            })
            .collect())
    }
}

#[cfg(test)]
mod tests;
