//! How many replicas keep a type's entities on the partition plane, and so which partitions
//! they live in. A type follows the cluster's replication factor unless its first deploy asked
//! for its own (`TypeOptions::replication_factor`, or its tenant's `Quotas::replication_factor`);
//! the answer is recorded then and never changes — not by a later version, nor after the type is
//! deleted (its entities' state stays where the factor put it, `docs/api.md`), so a deploy that
//! asks for another is refused.
//!
//! Each factor has a family of `count` partitions of its own: the cluster's factor ids
//! `0..count` (as before there were families), factor `r` ids `r × count .. (r + 1) × count`,
//! a shard of a type going to the partition `shard % count` of its type's family. The
//! coordinator places every family in use at its factor (`docs/partitions.md`).

use super::error::{MetadataError, storage};
use super::limits::{PARTITION_REPLICAS_MAX, PARTITIONS_MAX, check_factor};
use super::store::{MetadataStore, TYPE_REPLICATION};
use redb::{ReadableDatabase, ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tessera_contract::TypeKey;

/// A type's recorded replication in a catalog checkpoint: `((tenant, type), factor row)`.
pub(crate) type ReplicationRow = ((String, String), u8);

/// The most partitions a cluster may have: every factor's family of `count` partitions must
/// fit under [`PARTITIONS_MAX`].
pub const PARTITION_COUNT_MAX: u32 = PARTITIONS_MAX / (PARTITION_REPLICAS_MAX as u32 + 1);

/// How many replicas keep a type's entities.
///
/// ```
/// use tessera_metadata::Replication;
/// // 32 partitions: the cluster's family is 0..32, factor 5's is 160..192.
/// assert_eq!(Replication::Cluster.partition(70, 32), 6);
/// assert_eq!(Replication::Own(5).partition(70, 32), 166);
/// assert_eq!(Replication::of_partition(166, 32), Some(Replication::Own(5)));
/// assert_eq!(Replication::Own(5).replicas(3), 5);
/// assert_eq!(Replication::Cluster.replicas(3), 3);
/// ```
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Replication {
    /// The cluster's factor (`partitions.replication_factor`), whatever it is configured to.
    #[default]
    Cluster,
    /// A factor of its own, 1 to [`PARTITION_REPLICAS_MAX`].
    Own(u8),
}

impl Replication {
    /// The first partition of this factor's family, of `count` partitions each.
    pub fn first_partition(self, count: u32) -> u32 {
        match self {
            Replication::Cluster => 0,
            Replication::Own(factor) => u32::from(factor) * count,
        }
    }

    /// The partition of `shard` in this factor's family.
    pub fn partition(self, shard: u32, count: u32) -> u32 {
        if count == 0 {
            return 0;
        }
        self.first_partition(count) + shard % count
    }

    /// The family `partition` belongs to, if it is a partition of a cluster of `count`.
    pub fn of_partition(partition: u32, count: u32) -> Option<Replication> {
        if count == 0 || partition >= PARTITIONS_MAX {
            return None;
        }
        match partition / count {
            0 => Some(Replication::Cluster),
            factor => u8::try_from(factor)
                .ok()
                .filter(|factor| usize::from(*factor) <= PARTITION_REPLICAS_MAX)
                .map(Replication::Own),
        }
    }

    /// Replicas each partition of the family wants, with the cluster's factor `cluster`.
    pub fn replicas(self, cluster: usize) -> usize {
        match self {
            Replication::Cluster => cluster,
            Replication::Own(factor) => usize::from(factor),
        }
    }

    fn to_row(self) -> u8 {
        match self {
            Replication::Cluster => 0,
            Replication::Own(factor) => factor,
        }
    }

    fn from_row(row: u8) -> Replication {
        match row {
            0 => Replication::Cluster,
            factor => Replication::Own(factor),
        }
    }
}

/// The replication a deploy gives `entity_type`: the one it keeps (`kept`: recorded by its
/// first deploy; a type deployed before factors were recorded keeps the cluster's), else
/// what the deploy asks, or its tenant's default, or the cluster's. Refused when the deploy
/// asks for a factor out of bounds or one the type does not keep.
///
/// ```
/// use tessera_metadata::{Replication, deployed_replication};
/// assert_eq!(deployed_replication("t", None, None, Some(5)).unwrap(), Replication::Own(5));
/// assert_eq!(deployed_replication("t", None, Some(1), Some(5)).unwrap(), Replication::Own(1));
/// let kept = Some(Replication::Own(5));
/// assert_eq!(deployed_replication("t", kept, None, Some(1)).unwrap(), Replication::Own(5));
/// assert!(deployed_replication("t", kept, Some(3), None).is_err());
/// assert!(deployed_replication("t", None, Some(0), None).is_err());
/// ```
pub fn deployed_replication(
    entity_type: &str,
    kept: Option<Replication>,
    asked: Option<u8>,
    tenant_default: Option<u8>,
) -> Result<Replication, MetadataError> {
    check_factor(asked, "the type's").map_err(MetadataError::InvalidOptions)?;
    match (kept, asked) {
        (Some(kept), Some(factor)) if kept != Replication::Own(factor) => {
            Err(MetadataError::InvalidOptions(format!(
                "entity type {entity_type} keeps its entities at {}; a type's \
                 replication_factor is fixed for its life (leave it out of later deploys, or \
                 deploy under another name)",
                describe(kept)
            )))
        }
        (Some(kept), _) => Ok(kept),
        (None, _) => Ok(asked
            .or(tenant_default)
            .map_or(Replication::Cluster, Replication::Own)),
    }
}

/// Settles the replication of a type being deployed ([`deployed_replication`]) and records
/// it if the type had none; refused, changing nothing, as that refuses.
pub(crate) fn settle(
    transaction: &WriteTransaction,
    (tenant, entity_type): (&str, &str),
    asked: Option<u8>,
    tenant_default: Option<u8>,
    type_exists: bool,
) -> Result<Replication, MetadataError> {
    let mut table = transaction.open_table(TYPE_REPLICATION).map_err(storage)?;
    let recorded = table
        .get((tenant, entity_type))
        .map_err(storage)?
        .map(|row| Replication::from_row(row.value()));
    let kept = recorded.or(type_exists.then_some(Replication::Cluster));
    let replication = deployed_replication(entity_type, kept, asked, tenant_default)?;
    if recorded.is_none() {
        table
            .insert((tenant, entity_type), replication.to_row())
            .map_err(storage)?;
    }
    Ok(replication)
}

fn describe(replication: Replication) -> String {
    match replication {
        Replication::Cluster => "the cluster's replication factor".to_string(),
        Replication::Own(factor) => format!("replication factor {factor}"),
    }
}

/// Every recorded type's replication (tenant, type, factor row), for a catalog checkpoint.
pub(crate) fn snapshot_rows(
    table: &impl ReadableTable<(&'static str, &'static str), u8>,
) -> Result<Vec<ReplicationRow>, MetadataError> {
    let mut rows = Vec::new();
    for row in table.iter().map_err(storage)? {
        let (key, factor) = row.map_err(storage)?;
        let (tenant, entity_type) = key.value();
        rows.push((
            (tenant.to_string(), entity_type.to_string()),
            factor.value(),
        ));
    }
    Ok(rows)
}

/// Writes a checkpoint's rows in place of the table's.
pub(crate) fn write_rows(
    transaction: &WriteTransaction,
    rows: &[ReplicationRow],
) -> Result<(), MetadataError> {
    transaction
        .delete_table(TYPE_REPLICATION)
        .map_err(storage)?;
    let mut table = transaction.open_table(TYPE_REPLICATION).map_err(storage)?;
    for ((tenant, entity_type), factor) in rows {
        table
            .insert((tenant.as_str(), entity_type.as_str()), *factor)
            .map_err(storage)?;
    }
    Ok(())
}

impl MetadataStore {
    /// The replication `tenant`'s type `entity_type` keeps, once deployed (`None` for a type
    /// never deployed, or deployed before factors were recorded: the cluster's).
    pub fn type_replication(
        &self,
        tenant: &str,
        entity_type: &str,
    ) -> Result<Option<Replication>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(TYPE_REPLICATION).map_err(storage)?;
        let row = table.get((tenant, entity_type)).map_err(storage)?;
        Ok(row.map(|row| Replication::from_row(row.value())))
    }

    /// The replication `tenant`'s type `entity_type` keeps, as a deploy would find it: the
    /// recorded one, or the cluster's for a type deployed before factors were recorded;
    /// `None` for a type never deployed.
    pub fn kept_replication(
        &self,
        tenant: &str,
        entity_type: &str,
    ) -> Result<Option<Replication>, MetadataError> {
        let recorded = self.type_replication(tenant, entity_type)?;
        if recorded.is_some() {
            return Ok(recorded);
        }
        let exists = self.entity_type(tenant, entity_type)?.is_some();
        Ok(exists.then_some(Replication::Cluster))
    }

    /// Every type that keeps a factor of its own, deleted ones included.
    pub fn own_replications(&self) -> Result<BTreeMap<TypeKey, u8>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(TYPE_REPLICATION).map_err(storage)?;
        let mut own = BTreeMap::new();
        for row in table.iter().map_err(storage)? {
            let (key, factor) = row.map_err(storage)?;
            let (tenant, entity_type) = key.value();
            if let Replication::Own(factor) = Replication::from_row(factor.value()) {
                own.insert(TypeKey::new(tenant, entity_type), factor);
            }
        }
        Ok(own)
    }
}

#[cfg(test)]
mod tests;
