//! The metadata tables in redb and the state machine that applies commands to them.

use super::command::{Applied, Command, Tenant, TypeRecord, VersionRecord};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use std::sync::Arc;

/// Tenants by name (MessagePack [`Tenant`]).
const TENANTS: TableDefinition<&str, &[u8]> = TableDefinition::new("tenants");
/// Tenant name by token hash.
const TOKENS: TableDefinition<&str, &str> = TableDefinition::new("tenant_tokens");
/// Types by `(tenant, type)` (MessagePack [`TypeRecord`]).
const TYPES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("entity_types");
/// Plugin component bytes by hex SHA-256, stored once however many versions use them.
const PLUGINS: TableDefinition<&str, &[u8]> = TableDefinition::new("plugins");

/// The most versions one type keeps, so a deploy loop cannot grow a record without bound.
pub const VERSIONS_PER_TYPE_MAX: usize = 1_000;
/// The longest tenant or type name.
pub const NAME_BYTES_MAX: usize = 64;

/// Why a command or query failed. A refused command changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetadataError {
    /// A name is empty, too long or has characters outside `[A-Za-z0-9_.-]`.
    #[error("invalid name {0:?}: use 1 to 64 characters from A-Z a-z 0-9 _ . -")]
    InvalidName(String),
    /// The tenant exists already.
    #[error("tenant {0} already exists")]
    TenantExists(String),
    /// No such tenant.
    #[error("no tenant {0}")]
    NoTenant(String),
    /// No such type.
    #[error("no entity type {1} in tenant {0}")]
    NoType(String, String),
    /// No such version.
    #[error("entity type {0} has no version {1}")]
    NoVersion(String, u32),
    /// The plugin bytes are not stored.
    #[error("no stored plugin with hash {0}")]
    NoPlugin(String),
    /// A type has too many versions.
    #[error("entity type {0} already has {VERSIONS_PER_TYPE_MAX} versions")]
    TooManyVersions(String),
    /// Quotas are unusable.
    #[error("invalid quotas: {0}")]
    InvalidQuotas(String),
    /// The storage engine failed.
    #[error("metadata storage failed: {0}")]
    Storage(String),
}

fn storage(error: impl std::fmt::Display) -> MetadataError {
    MetadataError::Storage(error.to_string())
}

/// Checks a tenant or type name.
pub fn validate_name(name: &str) -> Result<(), MetadataError> {
    let valid = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(MetadataError::InvalidName(name.to_string()))
    }
}

/// The node's metadata over its redb database.
///
/// ```
/// use tessera_host::metadata::{Command, MetadataStore, Quotas};
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
    database: Arc<Database>,
}

impl MetadataStore {
    /// Opens the metadata tables in `database`, creating them if needed.
    pub fn open(database: Arc<Database>) -> Result<Self, MetadataError> {
        let transaction = database.begin_write().map_err(storage)?;
        transaction.open_table(TENANTS).map_err(storage)?;
        transaction.open_table(TOKENS).map_err(storage)?;
        transaction.open_table(TYPES).map_err(storage)?;
        transaction.open_table(PLUGINS).map_err(storage)?;
        transaction.commit().map_err(storage)?;
        Ok(MetadataStore { database })
    }

    /// Applies one command durably, or refuses it and changes nothing.
    pub fn apply(&self, command: Command) -> Result<Applied, MetadataError> {
        let transaction = self.database.begin_write().map_err(storage)?;
        let applied = apply_in(&transaction, command)?;
        transaction.commit().map_err(storage)?;
        Ok(applied)
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

    /// Stored plugin bytes.
    pub fn plugin_bytes(&self, sha256: &str) -> Result<Option<Vec<u8>>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(PLUGINS).map_err(storage)?;
        let bytes = table.get(sha256).map_err(storage)?;
        Ok(bytes.map(|bytes| bytes.value().to_vec()))
    }
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, MetadataError> {
    rmp_serde::from_slice(bytes)
        .map_err(|error| MetadataError::Storage(format!("corrupt record: {error}")))
}

fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(value).expect("invariant: metadata records always serialize")
}

fn apply_in(transaction: &WriteTransaction, command: Command) -> Result<Applied, MetadataError> {
    match command {
        Command::CreateTenant {
            name,
            token_sha256,
            quotas,
            created_ms,
        } => {
            validate_name(&name)?;
            quotas.validate().map_err(MetadataError::InvalidQuotas)?;
            let mut tenants = transaction.open_table(TENANTS).map_err(storage)?;
            if tenants.get(name.as_str()).map_err(storage)?.is_some() {
                return Err(MetadataError::TenantExists(name));
            }
            let tenant = Tenant {
                name,
                token_sha256,
                quotas,
                created_ms,
            };
            tenants
                .insert(tenant.name.as_str(), encode(&tenant).as_slice())
                .map_err(storage)?;
            let mut tokens = transaction.open_table(TOKENS).map_err(storage)?;
            tokens
                .insert(tenant.token_sha256.as_str(), tenant.name.as_str())
                .map_err(storage)?;
            Ok(Applied::Tenant(tenant))
        }
        Command::UpdateQuotas { name, quotas } => {
            quotas.validate().map_err(MetadataError::InvalidQuotas)?;
            let mut tenants = transaction.open_table(TENANTS).map_err(storage)?;
            let mut tenant: Tenant = match tenants.get(name.as_str()).map_err(storage)? {
                Some(bytes) => decode(bytes.value())?,
                None => return Err(MetadataError::NoTenant(name)),
            };
            tenant.quotas = quotas;
            tenants
                .insert(tenant.name.as_str(), encode(&tenant).as_slice())
                .map_err(storage)?;
            Ok(Applied::Tenant(tenant))
        }
        Command::StorePlugin { sha256, bytes } => {
            let mut plugins = transaction.open_table(PLUGINS).map_err(storage)?;
            if plugins.get(sha256.as_str()).map_err(storage)?.is_none() {
                plugins
                    .insert(sha256.as_str(), bytes.as_slice())
                    .map_err(storage)?;
            }
            Ok(Applied::PluginStored)
        }
        Command::DeployVersion {
            tenant,
            entity_type,
            sha256,
            size_bytes,
            options,
            deployed_ms,
        } => {
            validate_name(&entity_type)?;
            require_tenant(transaction, &tenant)?;
            let plugins = transaction.open_table(PLUGINS).map_err(storage)?;
            if plugins.get(sha256.as_str()).map_err(storage)?.is_none() {
                return Err(MetadataError::NoPlugin(sha256));
            }
            let mut types = transaction.open_table(TYPES).map_err(storage)?;
            let mut record: TypeRecord = match types
                .get((tenant.as_str(), entity_type.as_str()))
                .map_err(storage)?
            {
                Some(bytes) => decode(bytes.value())?,
                None => TypeRecord {
                    tenant: tenant.clone(),
                    name: entity_type.clone(),
                    active_version: 0,
                    versions: Vec::new(),
                },
            };
            if record.versions.len() >= VERSIONS_PER_TYPE_MAX {
                return Err(MetadataError::TooManyVersions(entity_type));
            }
            let version = record.versions.last().map_or(1, |last| last.version + 1);
            record.versions.push(VersionRecord {
                version,
                sha256,
                size_bytes,
                options,
                deployed_ms,
            });
            record.active_version = version;
            types
                .insert(
                    (tenant.as_str(), entity_type.as_str()),
                    encode(&record).as_slice(),
                )
                .map_err(storage)?;
            Ok(Applied::Type(record))
        }
        Command::SetActiveVersion {
            tenant,
            entity_type,
            version,
        } => {
            let mut types = transaction.open_table(TYPES).map_err(storage)?;
            let mut record: TypeRecord = match types
                .get((tenant.as_str(), entity_type.as_str()))
                .map_err(storage)?
            {
                Some(bytes) => decode(bytes.value())?,
                None => return Err(MetadataError::NoType(tenant, entity_type)),
            };
            if record.version(version).is_none() {
                return Err(MetadataError::NoVersion(entity_type, version));
            }
            record.active_version = version;
            types
                .insert(
                    (tenant.as_str(), entity_type.as_str()),
                    encode(&record).as_slice(),
                )
                .map_err(storage)?;
            Ok(Applied::Type(record))
        }
        Command::DeleteType {
            tenant,
            entity_type,
        } => {
            let mut types = transaction.open_table(TYPES).map_err(storage)?;
            let removed = types
                .remove((tenant.as_str(), entity_type.as_str()))
                .map_err(storage)?;
            if removed.is_none() {
                return Err(MetadataError::NoType(tenant, entity_type));
            }
            Ok(Applied::TypeDeleted)
        }
    }
}

fn require_tenant(transaction: &WriteTransaction, tenant: &str) -> Result<(), MetadataError> {
    let tenants = transaction.open_table(TENANTS).map_err(storage)?;
    if tenants.get(tenant).map_err(storage)?.is_none() {
        return Err(MetadataError::NoTenant(tenant.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{Quotas, TypeOptions};

    fn store() -> (tempfile::TempDir, MetadataStore) {
        let dir = tempfile::tempdir().unwrap();
        let database = Arc::new(Database::create(dir.path().join("m.redb")).unwrap());
        (dir, MetadataStore::open(database).unwrap())
    }

    fn create(store: &MetadataStore, name: &str) -> Result<Applied, MetadataError> {
        store.apply(Command::CreateTenant {
            name: name.into(),
            token_sha256: format!("hash-{name}"),
            quotas: Quotas::default(),
            created_ms: 1,
        })
    }

    fn deploy(store: &MetadataStore, tenant: &str, sha256: &str) -> Result<Applied, MetadataError> {
        store.apply(Command::DeployVersion {
            tenant: tenant.into(),
            entity_type: "counter".into(),
            sha256: sha256.into(),
            size_bytes: 3,
            options: TypeOptions::default(),
            deployed_ms: 2,
        })
    }

    #[test]
    fn versions_count_from_one_and_rollback_switches_the_active_one() {
        let (_dir, store) = store();
        create(&store, "acme").unwrap();
        store
            .apply(Command::StorePlugin {
                sha256: "p1".into(),
                bytes: vec![1],
            })
            .unwrap();
        store
            .apply(Command::StorePlugin {
                sha256: "p2".into(),
                bytes: vec![2],
            })
            .unwrap();
        deploy(&store, "acme", "p1").unwrap();
        let Applied::Type(record) = deploy(&store, "acme", "p2").unwrap() else {
            panic!()
        };
        assert_eq!(record.active_version, 2);
        assert_eq!(
            record
                .versions
                .iter()
                .map(|v| v.version)
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
        store
            .apply(Command::SetActiveVersion {
                tenant: "acme".into(),
                entity_type: "counter".into(),
                version: 1,
            })
            .unwrap();
        let record = store.entity_type("acme", "counter").unwrap().unwrap();
        assert_eq!(record.active().unwrap().sha256, "p1");
    }

    #[test]
    fn refused_commands_change_nothing() {
        let (_dir, store) = store();
        create(&store, "acme").unwrap();
        assert_eq!(
            create(&store, "acme"),
            Err(MetadataError::TenantExists("acme".into()))
        );
        assert!(matches!(
            create(&store, "bad name"),
            Err(MetadataError::InvalidName(_))
        ));
        assert_eq!(
            deploy(&store, "acme", "missing"),
            Err(MetadataError::NoPlugin("missing".into()))
        );
        assert_eq!(
            deploy(&store, "ghost", "missing"),
            Err(MetadataError::NoTenant("ghost".into()))
        );
        let no_version = store.apply(Command::SetActiveVersion {
            tenant: "acme".into(),
            entity_type: "counter".into(),
            version: 9,
        });
        assert!(matches!(no_version, Err(MetadataError::NoType(_, _))));
        assert_eq!(store.tenants().unwrap().len(), 1);
        assert!(store.entity_types(None).unwrap().is_empty());
    }
}
