//! One consistent read of what a node checks its peers' claims against: a member's state, a
//! shard's allocation and the handoff in flight for it, and the next generation the catalog
//! will give (every generation below it was given already). [`MetadataStore::committed`] opens
//! it; the node's mesh reads it before it acts on a message that claims ownership, so a peer
//! is believed only where the committed catalog vouches for it.

use super::error::{MetadataError, storage};
use super::member_state::MemberState;
use super::members::MemberRecord;
use super::store::{
    COUNTERS, MEMBERS, MetadataStore, NEXT_GENERATION, SHARD_HANDOFFS, SHARDS, decode,
};
use redb::{ReadTransaction, ReadableDatabase};
use tessera_contract::{Allocation, NodeId, ShardKey};

/// A read transaction over the committed catalog: every answer comes from the same applied
/// command.
///
/// ```
/// use tessera_metadata::{Command, MetadataStore, ShardAssignment};
/// use tessera_contract::{ShardKey, TypeKey};
/// let dir = tempfile::tempdir().unwrap();
/// let database = std::sync::Arc::new(redb::Database::create(dir.path().join("m.redb")).unwrap());
/// let metadata = MetadataStore::open(database).unwrap();
/// let key = ShardKey::new(TypeKey::new("acme", "counter"), 3);
/// let to = ShardAssignment { key: key.clone(), expected: None, to: "n1".into() };
/// metadata.apply(Command::AssignShards { epoch: 0, assignments: vec![to] }).unwrap();
/// let committed = metadata.committed().unwrap();
/// assert_eq!(committed.allocation(&key).unwrap().unwrap().node, "n1");
/// assert_eq!(committed.next_generation().unwrap(), 2);
/// ```
pub struct CommittedRead {
    transaction: ReadTransaction,
}

impl MetadataStore {
    /// Opens a consistent read of the committed catalog.
    pub fn committed(&self) -> Result<CommittedRead, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        Ok(CommittedRead { transaction })
    }
}

impl CommittedRead {
    /// `node`'s state, if it is a member (a removed member's record is gone).
    pub fn member_state(&self, node: &str) -> Result<Option<MemberState>, MetadataError> {
        let table = self.transaction.open_table(MEMBERS).map_err(storage)?;
        let record: Option<MemberRecord> = table
            .get(node)
            .map_err(storage)?
            .map(|bytes| decode(bytes.value()))
            .transpose()?;
        Ok(record.map(|record| record.state))
    }

    /// Where `key` lives, if it was ever allocated.
    pub fn allocation(&self, key: &ShardKey) -> Result<Option<Allocation>, MetadataError> {
        let table = self.transaction.open_table(SHARDS).map_err(storage)?;
        let row = table.get(row(key)).map_err(storage)?;
        Ok(row.map(|value| {
            let (node, generation) = value.value();
            Allocation {
                node: node.to_string(),
                generation,
            }
        }))
    }

    /// The node handing `key` off, if a handoff of it is in flight.
    pub fn handoff_from(&self, key: &ShardKey) -> Result<Option<NodeId>, MetadataError> {
        let table = self
            .transaction
            .open_table(SHARD_HANDOFFS)
            .map_err(storage)?;
        let row = table.get(row(key)).map_err(storage)?;
        Ok(row.map(|from| from.value().to_string()))
    }

    /// `partition`'s committed replica set, if it was ever placed.
    pub fn partition(
        &self,
        partition: u32,
    ) -> Result<Option<super::PartitionReplicas>, MetadataError> {
        let table = self
            .transaction
            .open_table(super::store::PARTITIONS)
            .map_err(storage)?;
        let Some(row) = table.get(partition).map_err(storage)? else {
            return Ok(None);
        };
        let (encoded, generation) = row.value();
        Ok(Some(super::PartitionReplicas {
            generation,
            ..super::partitions::decode_row(partition, encoded)?
        }))
    }

    /// The generation the next assignment takes: every lower one was given already.
    pub fn next_generation(&self) -> Result<u64, MetadataError> {
        let table = self.transaction.open_table(COUNTERS).map_err(storage)?;
        let next = table.get(NEXT_GENERATION).map_err(storage)?;
        Ok(next.map_or(1, |value| value.value()))
    }
}

fn row(key: &ShardKey) -> (&str, &str, u32) {
    (
        key.type_key.tenant.as_str(),
        key.type_key.entity_type.as_str(),
        key.shard,
    )
}
