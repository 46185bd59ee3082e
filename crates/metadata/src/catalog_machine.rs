//! The catalog as the state machine of the metadata plane's VSR group: [`CatalogMachine`]
//! applies committed [`Command`]s (MessagePack) to a [`MetadataStore`], answers each with its
//! [`CatalogResult`], and snapshots or restores every catalog table at once for checkpoints and
//! state transfer. Snapshots are deterministic (tables and rows in key order), so replicas in
//! the same state produce the same bytes and checkpoints compare by checksum.
//!
//! A refused command is a deterministic answer, the same on every replica. A storage failure
//! is not: it would make this replica differ from the others, so the machine records it as a
//! [`fault`](CatalogMachine::fault), applies nothing more, and its host must stop the replica.

use super::command::{Applied, Command};
use super::error::{MetadataError, storage};
use super::store::{
    COUNTERS, MEMBERS, MetadataStore, PARTITIONS, PLUGIN_REFS, SHARD_HANDOFFS, SHARDS, TENANTS,
    TOKENS, TYPES,
};
use redb::{ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use serde::{Deserialize, Serialize};
use tessera_consensus::group::GroupMachine;
use tessera_consensus::state_machine::{RestoreError, StateMachine};

/// Applied commands the host has not taken yet. The host drains them after every replica step;
/// past this many the oldest are dropped (and counted), never the machine stalled.
pub const UNOBSERVED_APPLIED_MAX: usize = 4096;

/// What a replicated catalog command answered.
pub type CatalogResult = Result<Applied, MetadataError>;

/// One row of the shard allocation table: `((tenant, type, shard), (node, generation))`.
type ShardRow = ((String, String, u32), (String, u64));

/// Every catalog table, row by row in key order: one deterministic snapshot.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct CatalogSnapshot {
    tenants: Vec<(String, serde_bytes::ByteBuf)>,
    tokens: Vec<(String, String)>,
    types: Vec<((String, String), serde_bytes::ByteBuf)>,
    /// Plugin bytes, in checkpoints of releases before the blob store: always empty now (the
    /// slot stays, so those checkpoints still decode); any found are moved to the blob store.
    plugins: Vec<(String, serde_bytes::ByteBuf)>,
    plugin_refs: Vec<(String, u32)>,
    shards: Vec<ShardRow>,
    counters: Vec<(String, u64)>,
    members: Vec<(String, serde_bytes::ByteBuf)>,
    /// Handoffs in flight (absent from checkpoints of earlier releases).
    #[serde(default)]
    handoffs: Vec<((String, String, u32), String)>,
    /// Placed partitions (absent from checkpoints of earlier releases).
    #[serde(default)]
    partitions: Vec<super::partitions::PartitionRow>,
    /// Moved partitions' epochs (absent from checkpoints of earlier releases).
    #[serde(default)]
    partition_epochs: Vec<super::partitions::PartitionEpochRow>,
    /// Each deployed type's replication (absent from checkpoints of earlier releases).
    #[serde(default)]
    type_replication: Vec<super::replication::ReplicationRow>,
}

/// The catalog as a replicated state machine.
///
/// ```
/// use std::sync::Arc;
/// use tessera_consensus::state_machine::StateMachine;
/// use tessera_metadata::{CatalogMachine, Command, MetadataStore, Quotas};
/// let open = || {
///     let backend = redb::backends::InMemoryBackend::new();
///     let database = redb::Database::builder().create_with_backend(backend).unwrap();
///     CatalogMachine::new(MetadataStore::open(Arc::new(database)).unwrap())
/// };
/// let (mut primary, mut backup) = (open(), open());
/// let command = Command::CreateTenant {
///     name: "acme".into(), token_sha256: "ab".into(), quotas: Quotas::default(), created_ms: 0,
/// };
/// primary.apply(&CatalogMachine::encode_command(&command));
/// backup.restore(&primary.snapshot()).unwrap();
/// assert_eq!(backup.snapshot(), primary.snapshot());
/// assert!(backup.store().tenant("acme").unwrap().is_some());
/// ```
pub struct CatalogMachine {
    store: MetadataStore,
    unobserved: std::collections::VecDeque<Applied>,
    unobserved_dropped: u64,
    fault: Option<String>,
}

impl CatalogMachine {
    /// A machine over `store`, which already holds whatever it applied before.
    pub fn new(store: MetadataStore) -> Self {
        CatalogMachine {
            store,
            unobserved: std::collections::VecDeque::new(),
            unobserved_dropped: 0,
            fault: None,
        }
    }

    /// The catalog, for reads.
    pub fn store(&self) -> &MetadataStore {
        &self.store
    }

    /// A command as the operation bytes a client submits.
    pub fn encode_command(command: &Command) -> Vec<u8> {
        rmp_serde::to_vec_named(command).unwrap_or_default()
    }

    /// Reads a command from the operation bytes a client submitted (`None`: they are not one).
    pub fn decode_command(operation: &[u8]) -> Option<Command> {
        rmp_serde::from_slice(operation).ok()
    }

    /// Reads an operation's answer.
    pub fn decode_result(bytes: &[u8]) -> CatalogResult {
        rmp_serde::from_slice(bytes).unwrap_or_else(|error| {
            Err(MetadataError::Unavailable(format!(
                "the catalog's answer does not decode: {error}"
            )))
        })
    }

    /// Empties every table: a replica rebuilds its catalog from its checkpoint and journal when
    /// it starts, so nothing it applied before is applied twice.
    pub fn reset(&mut self) -> Result<(), RestoreError> {
        let empty = rmp_serde::to_vec(&CatalogSnapshot::default())
            .map_err(|error| RestoreError::Malformed(error.to_string()))?;
        self.restore(&empty)?;
        self.unobserved.clear();
        Ok(())
    }

    /// Applied commands since the last call, in order, for the node's catalog observer.
    pub fn take_applied(&mut self) -> Vec<Applied> {
        self.unobserved.drain(..).collect()
    }

    /// Applied commands dropped because the host did not take them in time.
    pub fn unobserved_dropped(&self) -> u64 {
        self.unobserved_dropped
    }

    /// Why this replica's catalog can no longer follow the others, if it cannot.
    pub fn fault(&self) -> Option<&str> {
        self.fault.as_deref()
    }

    fn answer(result: &CatalogResult) -> Vec<u8> {
        rmp_serde::to_vec_named(result).unwrap_or_default()
    }

    fn read_snapshot(&self) -> Result<CatalogSnapshot, MetadataError> {
        let transaction = self.store.database.begin_read().map_err(storage)?;
        let mut snapshot = CatalogSnapshot::default();
        let bytes = |value: &[u8]| serde_bytes::ByteBuf::from(value.to_vec());
        for row in transaction
            .open_table(TENANTS)
            .map_err(storage)?
            .iter()
            .map_err(storage)?
        {
            let (key, value) = row.map_err(storage)?;
            snapshot
                .tenants
                .push((key.value().to_string(), bytes(value.value())));
        }
        for row in transaction
            .open_table(TOKENS)
            .map_err(storage)?
            .iter()
            .map_err(storage)?
        {
            let (key, value) = row.map_err(storage)?;
            snapshot
                .tokens
                .push((key.value().to_string(), value.value().to_string()));
        }
        for row in transaction
            .open_table(TYPES)
            .map_err(storage)?
            .iter()
            .map_err(storage)?
        {
            let (key, value) = row.map_err(storage)?;
            let (tenant, name) = key.value();
            snapshot
                .types
                .push(((tenant.to_string(), name.to_string()), bytes(value.value())));
        }
        for row in transaction
            .open_table(PLUGIN_REFS)
            .map_err(storage)?
            .iter()
            .map_err(storage)?
        {
            let (key, value) = row.map_err(storage)?;
            snapshot
                .plugin_refs
                .push((key.value().to_string(), value.value()));
        }
        for row in transaction
            .open_table(SHARDS)
            .map_err(storage)?
            .iter()
            .map_err(storage)?
        {
            let (key, value) = row.map_err(storage)?;
            let (tenant, name, shard) = key.value();
            let (node, generation) = value.value();
            snapshot.shards.push((
                (tenant.to_string(), name.to_string(), shard),
                (node.to_string(), generation),
            ));
        }
        for row in transaction
            .open_table(SHARD_HANDOFFS)
            .map_err(storage)?
            .iter()
            .map_err(storage)?
        {
            let (key, from) = row.map_err(storage)?;
            let (tenant, name, shard) = key.value();
            snapshot.handoffs.push((
                (tenant.to_string(), name.to_string(), shard),
                from.value().to_string(),
            ));
        }
        for row in transaction
            .open_table(COUNTERS)
            .map_err(storage)?
            .iter()
            .map_err(storage)?
        {
            let (key, value) = row.map_err(storage)?;
            snapshot
                .counters
                .push((key.value().to_string(), value.value()));
        }
        for row in transaction
            .open_table(MEMBERS)
            .map_err(storage)?
            .iter()
            .map_err(storage)?
        {
            let (key, value) = row.map_err(storage)?;
            snapshot
                .members
                .push((key.value().to_string(), bytes(value.value())));
        }
        (snapshot.partitions, snapshot.partition_epochs) = super::partitions::snapshot_rows(
            &transaction.open_table(PARTITIONS).map_err(storage)?,
        )?;
        snapshot.type_replication = super::replication::snapshot_rows(
            &transaction
                .open_table(super::store::TYPE_REPLICATION)
                .map_err(storage)?,
        )?;
        Ok(snapshot)
    }
}

/// Empties `table` in `transaction` (delete and reopen: redb frees its pages at once).
fn cleared<'t, K: redb::Key + 'static, V: redb::Value + 'static>(
    transaction: &'t WriteTransaction,
    table: TableDefinition<K, V>,
) -> Result<redb::Table<'t, K, V>, MetadataError> {
    transaction.delete_table(table).map_err(storage)?;
    transaction.open_table(table).map_err(storage)
}

fn write_snapshot(
    transaction: &WriteTransaction,
    snapshot: &CatalogSnapshot,
) -> Result<(), MetadataError> {
    let mut tenants = cleared(transaction, TENANTS)?;
    for (key, value) in &snapshot.tenants {
        tenants
            .insert(key.as_str(), value.as_slice())
            .map_err(storage)?;
    }
    let mut tokens = cleared(transaction, TOKENS)?;
    for (key, value) in &snapshot.tokens {
        tokens
            .insert(key.as_str(), value.as_str())
            .map_err(storage)?;
    }
    let mut types = cleared(transaction, TYPES)?;
    for ((tenant, name), value) in &snapshot.types {
        types
            .insert((tenant.as_str(), name.as_str()), value.as_slice())
            .map_err(storage)?;
    }
    for (sha256, bytes) in &snapshot.plugins {
        if let Err(error) = super::blobs::write_blob(transaction, sha256, bytes, 0) {
            tracing::warn!(%sha256, %error, "a plugin of an old checkpoint not moved to the blob store");
        }
    }
    let mut plugin_refs = cleared(transaction, PLUGIN_REFS)?;
    for (key, value) in &snapshot.plugin_refs {
        plugin_refs.insert(key.as_str(), *value).map_err(storage)?;
    }
    let mut shards = cleared(transaction, SHARDS)?;
    for ((tenant, name, shard), (node, generation)) in &snapshot.shards {
        shards
            .insert(
                (tenant.as_str(), name.as_str(), *shard),
                (node.as_str(), *generation),
            )
            .map_err(storage)?;
    }
    let mut handoffs = cleared(transaction, SHARD_HANDOFFS)?;
    for ((tenant, name, shard), from) in &snapshot.handoffs {
        handoffs
            .insert((tenant.as_str(), name.as_str(), *shard), from.as_str())
            .map_err(storage)?;
    }
    let mut counters = cleared(transaction, COUNTERS)?;
    for (key, value) in &snapshot.counters {
        counters.insert(key.as_str(), *value).map_err(storage)?;
    }
    let mut members = cleared(transaction, MEMBERS)?;
    for (key, value) in &snapshot.members {
        members
            .insert(key.as_str(), value.as_slice())
            .map_err(storage)?;
    }
    super::partitions::write_rows(
        transaction,
        &snapshot.partitions,
        &snapshot.partition_epochs,
    )?;
    super::replication::write_rows(transaction, &snapshot.type_replication)
}

impl GroupMachine for CatalogMachine {
    type Applied = Applied;

    fn reset(&mut self) -> Result<(), RestoreError> {
        CatalogMachine::reset(self)
    }

    fn take_applied(&mut self) -> Vec<Applied> {
        CatalogMachine::take_applied(self)
    }

    fn fault(&self) -> Option<&str> {
        CatalogMachine::fault(self)
    }
}

impl StateMachine for CatalogMachine {
    fn apply(&mut self, operation: &[u8]) -> Vec<u8> {
        if let Some(fault) = &self.fault {
            return Self::answer(&Err(MetadataError::Unavailable(fault.clone())));
        }
        let command: Command = match rmp_serde::from_slice(operation) {
            Ok(command) => command,
            Err(error) => {
                return Self::answer(&Err(MetadataError::Malformed(format!(
                    "the operation is not a catalog command: {error}"
                ))));
            }
        };
        let result = self.store.apply(command);
        match &result {
            Ok(applied) => {
                if self.unobserved.len() == UNOBSERVED_APPLIED_MAX {
                    self.unobserved.pop_front();
                    self.unobserved_dropped += 1;
                }
                self.unobserved.push_back(applied.clone());
            }
            Err(MetadataError::Storage(error)) => {
                tracing::error!(%error, "the catalog failed to apply a committed command");
                self.fault = Some(format!("the catalog's storage failed: {error}"));
            }
            Err(_) => {}
        }
        Self::answer(&result)
    }

    fn snapshot(&self) -> Vec<u8> {
        match self.read_snapshot() {
            Ok(snapshot) => rmp_serde::to_vec(&snapshot).unwrap_or_default(),
            Err(error) => {
                // An empty snapshot never matches a healthy replica's checksum, so a checkpoint
                // taken now is caught rather than trusted.
                tracing::error!(%error, "the catalog could not be read for a snapshot");
                Vec::new()
            }
        }
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), RestoreError> {
        let snapshot: CatalogSnapshot = rmp_serde::from_slice(bytes)
            .map_err(|error| RestoreError::Malformed(error.to_string()))?;
        let written = (|| {
            let transaction = self.store.database.begin_write().map_err(storage)?;
            write_snapshot(&transaction, &snapshot)?;
            transaction.commit().map_err(storage)
        })();
        if let Err(error) = written {
            // The transaction did not commit, so the catalog is as it was; but a replica that
            // cannot take a snapshot cannot follow the group either.
            self.fault = Some(format!("the catalog could not install a snapshot: {error}"));
            return Err(RestoreError::Malformed(error.to_string()));
        }
        self.unobserved.clear();
        self.unobserved.push_back(Applied::Restored);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
