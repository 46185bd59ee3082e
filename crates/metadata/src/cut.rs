//! The catalog as one read transaction sees it, for a backup: tenants, types and the shard
//! allocation table at one commit of this node's catalog ([`MetadataStore::cut`]), so a
//! backup never pairs a type with tenants or allocations of another moment.

use super::error::{MetadataError, storage};
use super::records::{Tenant, TypeRecord};
use super::store::{APPLIED_COMMANDS, COUNTERS, MetadataStore, SHARDS, TENANTS, TYPES, decode};
use redb::{ReadableDatabase, ReadableTable};
use tessera_contract::{Allocation, ShardKey, TypeKey};

/// The catalog at one commit, whole or one tenant's part of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogCut {
    /// The catalog's commit number the cut was read at (its applied commands).
    pub commit: u64,
    /// Tenants (with their token hashes and quotas), by name.
    pub tenants: Vec<Tenant>,
    /// Types with every version, by tenant and name.
    pub types: Vec<TypeRecord>,
    /// Every allocated shard and its owner.
    pub shards: Vec<(ShardKey, Allocation)>,
}

impl MetadataStore {
    /// The catalog in one read transaction; only `tenant`'s part of it when given.
    ///
    /// ```
    /// use tessera_metadata::{Command, MetadataStore, Quotas};
    /// let database = redb::Database::builder()
    ///     .create_with_backend(redb::backends::InMemoryBackend::new()).unwrap();
    /// let metadata = MetadataStore::open(std::sync::Arc::new(database)).unwrap();
    /// for name in ["acme", "globex"] {
    ///     metadata.apply(Command::CreateTenant {
    ///         name: name.into(), token_sha256: name.into(), quotas: Quotas::default(),
    ///         created_ms: 0,
    ///     }).unwrap();
    /// }
    /// let cut = metadata.cut(Some("acme")).unwrap();
    /// assert_eq!(cut.tenants.len(), 1);
    /// assert_eq!(metadata.cut(None).unwrap().tenants.len(), 2);
    /// ```
    pub fn cut(&self, tenant: Option<&str>) -> Result<CatalogCut, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let wanted = |name: &str| tenant.is_none_or(|tenant| tenant == name);
        let commit = transaction
            .open_table(COUNTERS)
            .map_err(storage)?
            .get(APPLIED_COMMANDS)
            .map_err(storage)?
            .map_or(0, |count| count.value());
        let mut tenants = Vec::new();
        for row in transaction
            .open_table(TENANTS)
            .map_err(storage)?
            .iter()
            .map_err(storage)?
        {
            let (name, bytes) = row.map_err(storage)?;
            if wanted(name.value()) {
                tenants.push(decode(bytes.value())?);
            }
        }
        let mut types = Vec::new();
        for row in transaction
            .open_table(TYPES)
            .map_err(storage)?
            .iter()
            .map_err(storage)?
        {
            let (key, bytes) = row.map_err(storage)?;
            if wanted(key.value().0) {
                types.push(decode(bytes.value())?);
            }
        }
        let mut shards = Vec::new();
        for row in transaction
            .open_table(SHARDS)
            .map_err(storage)?
            .iter()
            .map_err(storage)?
        {
            let (key, value) = row.map_err(storage)?;
            let (tenant, entity_type, shard) = key.value();
            if wanted(tenant) {
                let (node, generation) = value.value();
                let key = ShardKey::new(TypeKey::new(tenant, entity_type), shard);
                let node = node.to_string();
                shards.push((key, Allocation { node, generation }));
            }
        }
        Ok(CatalogCut {
            commit,
            tenants,
            types,
            shards,
        })
    }
}
