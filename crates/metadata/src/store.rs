//! The catalog's tables in redb and the reads over them. Writes happen only in
//! [`apply`](super::apply), one transaction per command.

use super::error::{MetadataError, storage};
use super::records::{Tenant, TypeRecord};
use redb::{
    Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
    WriteTransaction,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use tessera_contract::{Allocation, AllocationTable, ShardKey, TypeKey};

/// Tenants by name (MessagePack [`Tenant`]).
pub(crate) const TENANTS: TableDefinition<&str, &[u8]> = TableDefinition::new("tenants");
/// Tenant name by token hash.
pub(crate) const TOKENS: TableDefinition<&str, &str> = TableDefinition::new("tenant_tokens");
/// Types by `(tenant, type)` (MessagePack [`TypeRecord`]).
pub(crate) const TYPES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("entity_types");
/// Plugin bytes as catalogs before the blob store kept them; moved into the blob store when
/// such a catalog is opened (`blobs.rs`), and never written.
pub(crate) const LEGACY_PLUGINS: TableDefinition<&str, &[u8]> = TableDefinition::new("plugins");
/// How many versions use each plugin; at zero no version does, and each node's blob
/// collector may remove its bytes.
pub(crate) const PLUGIN_REFS: TableDefinition<&str, u32> = TableDefinition::new("plugin_refs");
/// The shard allocation table: `(tenant, type, shard) -> (node, generation)`.
pub(crate) const SHARDS: TableDefinition<(&str, &str, u32), (&str, u64)> =
    TableDefinition::new("shard_allocations");
/// Handoffs in flight: `(tenant, type, shard) -> the node handing it off`. A shard listed
/// here is allocated to its new owner already but must not be served there until the losing
/// node has sent its state; a new coordinator picks these up from the catalog.
pub(crate) const SHARD_HANDOFFS: TableDefinition<(&str, &str, u32), &str> =
    TableDefinition::new("shard_handoffs");
/// The partition table: `partition -> (MessagePack replica list, generation)`
/// (`partitions.rs`).
pub(crate) const PARTITIONS: TableDefinition<u32, (&[u8], u64)> =
    TableDefinition::new("partitions");
/// Cluster members by node id (MessagePack [`MemberRecord`](super::MemberRecord); read and
/// written by `members.rs`).
pub(crate) const MEMBERS: TableDefinition<&str, &[u8]> = TableDefinition::new("members");
/// Catalog counters by name (`next_generation`, `applied_commands`, `coordinator_epoch`).
pub(crate) const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("catalog_counters");
/// Each deployed type's replication (`replication.rs`): `0` for the cluster's factor, else its
/// own. Never emptied by a type's delete.
pub(crate) const TYPE_REPLICATION: TableDefinition<(&str, &str), u8> =
    TableDefinition::new("type_replication");

/// The counter allocation generations are taken from.
pub(crate) const NEXT_GENERATION: &str = "next_generation";

/// The counter holding the seated coordinator's epoch.
pub(crate) const COORDINATOR_EPOCH: &str = "coordinator_epoch";

/// The counter of applied commands: the catalog's commit number on this node.
pub(crate) const APPLIED_COMMANDS: &str = "applied_commands";

/// The catalog over a node's redb database: applied commands, read back.
///
/// ```
/// use tessera_metadata::{Command, MetadataStore, Quotas};
/// let dir = tempfile::tempdir().unwrap();
/// let database = std::sync::Arc::new(redb::Database::create(dir.path().join("m.redb")).unwrap());
/// let metadata = MetadataStore::open(database).unwrap();
/// metadata.apply(Command::CreateTenant {
///     name: "acme".into(), token_sha256: "ab".into(), quotas: Quotas::default(), created_ms: 0,
/// }).unwrap();
/// assert_eq!(metadata.tenant_by_token_hash("ab").unwrap().unwrap().name, "acme");
/// ```
#[derive(Clone)]
pub struct MetadataStore {
    pub(crate) database: Arc<Database>,
}

impl MetadataStore {
    /// Opens the metadata tables in `database`, creating them if needed.
    pub fn open(database: Arc<Database>) -> Result<Self, MetadataError> {
        let transaction = database.begin_write().map_err(storage)?;
        transaction.open_table(TENANTS).map_err(storage)?;
        transaction.open_table(TOKENS).map_err(storage)?;
        transaction.open_table(TYPES).map_err(storage)?;
        transaction.open_table(PLUGIN_REFS).map_err(storage)?;
        transaction.open_table(SHARDS).map_err(storage)?;
        transaction.open_table(SHARD_HANDOFFS).map_err(storage)?;
        transaction.open_table(PARTITIONS).map_err(storage)?;
        transaction.open_table(COUNTERS).map_err(storage)?;
        transaction.open_table(MEMBERS).map_err(storage)?;
        transaction.open_table(TYPE_REPLICATION).map_err(storage)?;
        count_legacy_plugin_refs(&transaction)?;
        move_legacy_plugins(&transaction)?;
        transaction.commit().map_err(storage)?;
        Ok(MetadataStore { database })
    }

    /// A tenant by name.
    pub fn tenant(&self, name: &str) -> Result<Option<Tenant>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(TENANTS).map_err(storage)?;
        let record = table.get(name).map_err(storage)?;
        record.map(|bytes| decode(bytes.value())).transpose()
    }

    /// Every tenant, by name.
    pub fn tenants(&self) -> Result<Vec<Tenant>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(TENANTS).map_err(storage)?;
        let mut tenants = Vec::new();
        for row in table.iter().map_err(storage)? {
            let (_, bytes) = row.map_err(storage)?;
            tenants.push(decode(bytes.value())?);
        }
        Ok(tenants)
    }

    /// The tenant whose token hashes to `token_sha256`.
    pub fn tenant_by_token_hash(
        &self,
        token_sha256: &str,
    ) -> Result<Option<Tenant>, MetadataError> {
        let name = {
            let transaction = self.database.begin_read().map_err(storage)?;
            let table = transaction.open_table(TOKENS).map_err(storage)?;
            let name = table.get(token_sha256).map_err(storage)?;
            match name {
                Some(name) => name.value().to_string(),
                None => return Ok(None),
            }
        };
        self.tenant(&name)
    }

    /// A type of a tenant.
    pub fn entity_type(
        &self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<TypeRecord>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(TYPES).map_err(storage)?;
        let record = table.get((tenant, name)).map_err(storage)?;
        record.map(|bytes| decode(bytes.value())).transpose()
    }

    /// Every type of `tenant` (every type of every tenant when `None`).
    pub fn entity_types(&self, tenant: Option<&str>) -> Result<Vec<TypeRecord>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(TYPES).map_err(storage)?;
        let mut types = Vec::new();
        for row in table.iter().map_err(storage)? {
            let (key, bytes) = row.map_err(storage)?;
            if tenant.is_some_and(|tenant| key.value().0 != tenant) {
                continue;
            }
            types.push(decode(bytes.value())?);
        }
        Ok(types)
    }

    /// Whether a version of some type uses the plugin `sha256`.
    ///
    /// ```
    /// use tessera_metadata::{Command, MetadataStore, Quotas, TypeOptions};
    /// let database = redb::Database::builder()
    ///     .create_with_backend(redb::backends::InMemoryBackend::new()).unwrap();
    /// let metadata = MetadataStore::open(std::sync::Arc::new(database)).unwrap();
    /// metadata.apply(Command::CreateTenant {
    ///     name: "acme".into(), token_sha256: "ab".into(), quotas: Quotas::default(), created_ms: 0,
    /// }).unwrap();
    /// metadata.apply(Command::DeployVersion {
    ///     tenant: "acme".into(), entity_type: "counter".into(), sha256: "p1".into(),
    ///     size_bytes: 100, options: TypeOptions::default(), deployed_ms: 1,
    /// }).unwrap();
    /// assert!(metadata.plugin_used("p1").unwrap());
    /// assert_eq!(metadata.tenant_plugin_bytes("acme").unwrap(), 100);
    /// ```
    pub fn plugin_used(&self, sha256: &str) -> Result<bool, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(PLUGIN_REFS).map_err(storage)?;
        Ok(table.get(sha256).map_err(storage)?.is_some())
    }

    /// The sizes of every version of every type of `tenant`, summed: what its
    /// `plugin_bytes_total_max` bounds.
    pub fn tenant_plugin_bytes(&self, tenant: &str) -> Result<u64, MetadataError> {
        Ok(self
            .entity_types(Some(tenant))?
            .iter()
            .flat_map(|record| &record.versions)
            .fold(0u64, |sum, version| sum.saturating_add(version.size_bytes)))
    }

    /// How many commands this catalog has applied (refused ones do not count): its commit
    /// number.
    pub fn applied_commands(&self) -> Result<u64, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(COUNTERS).map_err(storage)?;
        Ok(table
            .get(APPLIED_COMMANDS)
            .map_err(storage)?
            .map_or(0, |count| count.value()))
    }

    /// The committed handoffs in flight: each shard with the node handing it off.
    pub fn shard_handoffs(
        &self,
    ) -> Result<BTreeMap<ShardKey, tessera_contract::NodeId>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(SHARD_HANDOFFS).map_err(storage)?;
        let mut handoffs = BTreeMap::new();
        for row in table.iter().map_err(storage)? {
            let (key, from) = row.map_err(storage)?;
            let (tenant, entity_type, shard) = key.value();
            handoffs.insert(
                ShardKey::new(TypeKey::new(tenant, entity_type), shard),
                from.value().to_string(),
            );
        }
        Ok(handoffs)
    }

    /// The seated coordinator's epoch (0 before any seat).
    pub fn coordinator_epoch(&self) -> Result<u64, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(COUNTERS).map_err(storage)?;
        Ok(table
            .get(COORDINATOR_EPOCH)
            .map_err(storage)?
            .map_or(0, |epoch| epoch.value()))
    }

    /// `key`'s committed allocation, if it has one.
    pub fn shard_allocation(&self, key: &ShardKey) -> Result<Option<Allocation>, MetadataError> {
        self.committed()?.allocation(key)
    }

    /// The committed shard allocation table.
    pub fn shard_table(&self) -> Result<AllocationTable, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(SHARDS).map_err(storage)?;
        let mut allocations = AllocationTable::new();
        for row in table.iter().map_err(storage)? {
            let (key, value) = row.map_err(storage)?;
            let (tenant, entity_type, shard) = key.value();
            let (node, generation) = value.value();
            allocations.insert(
                ShardKey::new(TypeKey::new(tenant, entity_type), shard),
                Allocation {
                    node: node.to_string(),
                    generation,
                },
            );
        }
        Ok(allocations)
    }
}

/// Catalogs written before plugin reference counts existed: count the versions that use each
/// stored plugin once, so deleting a type can free bytes no version uses.
fn count_legacy_plugin_refs(transaction: &WriteTransaction) -> Result<(), MetadataError> {
    let refs_empty = transaction
        .open_table(PLUGIN_REFS)
        .map_err(storage)?
        .is_empty()
        .map_err(storage)?;
    let plugins_empty = transaction
        .open_table(LEGACY_PLUGINS)
        .map_err(storage)?
        .is_empty()
        .map_err(storage)?;
    if !refs_empty || plugins_empty {
        return Ok(());
    }
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    {
        let types = transaction.open_table(TYPES).map_err(storage)?;
        for row in types.iter().map_err(storage)? {
            let (_, bytes) = row.map_err(storage)?;
            let record: TypeRecord = decode(bytes.value())?;
            for version in record.versions {
                *counts.entry(version.sha256).or_default() += 1;
            }
        }
    }
    let mut refs = transaction.open_table(PLUGIN_REFS).map_err(storage)?;
    for (sha256, count) in &counts {
        refs.insert(sha256.as_str(), *count).map_err(storage)?;
    }
    Ok(())
}

/// Catalogs written before the blob store held plugin bytes in the catalog itself: move them
/// into this node's blob store (bytes that do not hash to their name are dropped; a peer
/// serves them again) and drop the old table, so no checkpoint carries them again.
fn move_legacy_plugins(transaction: &WriteTransaction) -> Result<(), MetadataError> {
    let legacy: Vec<(String, Vec<u8>)> = {
        let plugins = transaction.open_table(LEGACY_PLUGINS).map_err(storage)?;
        let mut rows = Vec::new();
        for row in plugins.iter().map_err(storage)? {
            let (name, bytes) = row.map_err(storage)?;
            rows.push((name.value().to_string(), bytes.value().to_vec()));
        }
        rows
    };
    for (sha256, bytes) in &legacy {
        if let Err(error) = super::blobs::write_blob(transaction, sha256, bytes, 0) {
            tracing::warn!(%sha256, %error, "a plugin of an old catalog not moved to the blob store");
        }
    }
    transaction.delete_table(LEGACY_PLUGINS).map_err(storage)?;
    Ok(())
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, MetadataError> {
    rmp_serde::from_slice(bytes)
        .map_err(|error| MetadataError::Storage(format!("corrupt record: {error}")))
}

pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(value).expect("invariant: metadata records always serialize")
}
