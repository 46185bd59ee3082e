//! Deploys, rollbacks and deletes of entity types — each one catalog command. A deploy hashes
//! the upload once, compiles and checks it against the entity world and the tenant's plugin
//! quotas before anything is written, stores the bytes in this node's blob store, makes sure a
//! majority of the voters holds them (`blob_transfer.rs`), and only then submits the version —
//! its hash and size, never its bytes. A refused deploy leaves no version behind (bytes it
//! stored are collected once unused).

use super::tenants::now_ms;
use super::{Node, NodeError};
use sha2::{Digest, Sha256};
use tessera_metadata::{
    Applied, Command, MetadataError, Replication, TypeOptions, TypeRecord, VERSIONS_PER_TYPE_MAX,
    VersionRecord, deployed_replication, validate_name,
};

/// How many replicas keep a type's entities ([`Node::type_replicas`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TypeReplicas {
    /// Replicas of each of its partitions (fewer while fewer members are eligible).
    pub factor: usize,
    /// Whether the factor is the type's own (its first deploy's, or its tenant's default
    /// then) rather than the cluster's.
    pub own: bool,
}

impl Node {
    /// Validates, stores and activates a new version of `entity_type`. A bad upload changes
    /// nothing and the running version keeps serving.
    pub async fn deploy(
        &self,
        tenant: &str,
        entity_type: &str,
        bytes: Vec<u8>,
        options: TypeOptions,
    ) -> Result<VersionRecord, NodeError> {
        let quotas = self.tenant(tenant)?.quotas;
        validate_name(entity_type)?;
        if bytes.len() > quotas.plugin_bytes_max {
            self.count_quota_rejection(tenant, None, "plugin_size");
            return Err(NodeError::TooLarge(format!(
                "the plugin is {} bytes, over the tenant's limit of {}",
                bytes.len(),
                quotas.plugin_bytes_max
            )));
        }
        self.check_catalog_quotas(tenant, entity_type, &quotas, bytes.len() as u64)?;
        // Refused here too, before the plugin is compiled and sent to the voters.
        let kept = self.plane.store().kept_replication(tenant, entity_type)?;
        deployed_replication(
            entity_type,
            kept,
            options.replication_factor,
            quotas.replication_factor,
        )?;
        let _deploying = self.deploy_lock.lock().await;
        let runtime = self.runtime.clone();
        let (bytes, sha256, checked) = tokio::task::spawn_blocking(move || {
            let sha256 = hex::encode(Sha256::digest(&bytes));
            let checked = runtime.check(&bytes, sha256.clone());
            (bytes, sha256, checked)
        })
        .await
        .map_err(|error| tessera_runtime::LoadError::Compiler(error.to_string()))?;
        let plugin = checked?;
        let size_bytes = bytes.len() as u64;
        // Again under the deploy lock: a deploy through this node may have committed meanwhile.
        self.check_catalog_quotas(tenant, entity_type, &quotas, size_bytes)?;
        self.hold_blob(&sha256, bytes).await?;
        let command = Command::DeployVersion {
            tenant: tenant.to_string(),
            entity_type: entity_type.to_string(),
            sha256: sha256.clone(),
            size_bytes,
            options,
            deployed_ms: now_ms(),
        };
        self.catalog.stage(plugin);
        let applied = self.plane.submit(command).await;
        self.catalog.unstage(&sha256);
        let record = expect_type(applied?)?;
        let version = record.active().cloned().ok_or_else(|| {
            MetadataError::Storage("a deployed type has no active version".into())
        })?;
        tracing::info!(%tenant, %entity_type, version = version.version, "version deployed");
        Ok(version)
    }

    /// Refuses, before anything is compiled, stored or sent, a version the catalog would
    /// refuse: one past [`VERSIONS_PER_TYPE_MAX`], or a plugin that would take the tenant's
    /// versions past its `plugin_bytes_total_max` (the command checks both again when ordered).
    fn check_catalog_quotas(
        &self,
        tenant: &str,
        entity_type: &str,
        quotas: &tessera_metadata::Quotas,
        size_bytes: u64,
    ) -> Result<(), NodeError> {
        let store = self.plane.store();
        let versions = store
            .entity_type(tenant, entity_type)?
            .map_or(0, |record| record.versions.len());
        if versions >= VERSIONS_PER_TYPE_MAX {
            self.count_quota_rejection(tenant, None, "versions_per_type");
            return Err(MetadataError::TooManyVersions(entity_type.to_string()).into());
        }
        let kept = store.tenant_plugin_bytes(tenant)?;
        if kept.saturating_add(size_bytes) <= quotas.plugin_bytes_total_max as u64 {
            return Ok(());
        }
        self.count_quota_rejection(tenant, None, "plugin_bytes_total");
        Err(MetadataError::QuotaExceeded(format!(
            "tenant {tenant} keeps {kept} plugin bytes; {size_bytes} more would pass its \
             plugin_bytes_total_max of {} (delete a type to free its versions)",
            quotas.plugin_bytes_total_max
        ))
        .into())
    }

    /// Stores the plugin in this node's blob store and, in a cluster, waits until a majority
    /// of the voters holds it, so no committed version names bytes only one node has.
    async fn hold_blob(&self, sha256: &str, bytes: Vec<u8>) -> Result<(), NodeError> {
        let size_bytes = bytes.len() as u64;
        let blobs = self.catalog.sources.blobs.clone();
        let name = sha256.to_string();
        tokio::task::spawn_blocking(move || blobs.put(&name, &bytes, super::tenants::now_ms()))
            .await
            .map_err(|error| MetadataError::Storage(error.to_string()))?
            .map_err(|error| MetadataError::Storage(error.to_string()))?;
        let Some(transfer) = &self.catalog.sources.transfer else {
            return Ok(());
        };
        let started = std::time::Instant::now();
        let held = transfer
            .replicate(sha256, size_bytes)
            .await
            .map_err(MetadataError::Unavailable)?;
        tracing::info!(%sha256, held, elapsed_ms = started.elapsed().as_millis() as u64, "plugin held by a quorum of voters");
        Ok(())
    }

    /// Makes `version` the active version of a type (rollback or roll forward).
    pub async fn set_active_version(
        &self,
        tenant: &str,
        entity_type: &str,
        version: u32,
    ) -> Result<TypeRecord, NodeError> {
        let _deploying = self.deploy_lock.lock().await;
        let applied = self
            .plane
            .submit(Command::SetActiveVersion {
                tenant: tenant.to_string(),
                entity_type: entity_type.to_string(),
                version,
            })
            .await?;
        let record = expect_type(applied)?;
        tracing::info!(%tenant, %entity_type, version, "active version set");
        Ok(record)
    }

    /// Deletes a type: it is unregistered at once (its messages then fail with
    /// `entity_type_not_registered`) and its live entities stop. Their state stays in the store:
    /// deploying the type again under the same name brings the entities back with it.
    pub async fn delete_type(&self, tenant: &str, entity_type: &str) -> Result<(), NodeError> {
        let _deploying = self.deploy_lock.lock().await;
        self.plane
            .submit(Command::DeleteType {
                tenant: tenant.to_string(),
                entity_type: entity_type.to_string(),
            })
            .await?;
        tracing::info!(%tenant, %entity_type, "type deleted");
        Ok(())
    }

    /// The types of a tenant.
    pub fn types(&self, tenant: &str) -> Result<Vec<TypeRecord>, NodeError> {
        Ok(self.plane.store().entity_types(Some(tenant))?)
    }

    /// How many replicas keep the entities of `tenant`'s type `entity_type`, while the
    /// partition plane serves (`None` otherwise, or for a type never deployed).
    pub fn type_replicas(
        &self,
        tenant: &str,
        entity_type: &str,
    ) -> Result<Option<TypeReplicas>, NodeError> {
        let partitions = &self.config.sharding.partitions;
        if self.config.cluster.is_none() || partitions.count() == 0 {
            return Ok(None);
        }
        let kept = self.plane.store().kept_replication(tenant, entity_type)?;
        Ok(kept.map(|replication| TypeReplicas {
            factor: replication.replicas(partitions.replication_factor),
            own: replication != Replication::Cluster,
        }))
    }

    /// One type of a tenant.
    pub fn entity_type(&self, tenant: &str, entity_type: &str) -> Result<TypeRecord, NodeError> {
        self.plane
            .store()
            .entity_type(tenant, entity_type)?
            .ok_or_else(|| {
                NodeError::NotFound(format!("no entity type {entity_type} in tenant {tenant}"))
            })
    }
}

fn expect_type(applied: Applied) -> Result<TypeRecord, NodeError> {
    match applied {
        Applied::Type(record) => Ok(record),
        other => Err(MetadataError::Storage(format!("a type command applied as {other:?}")).into()),
    }
}
