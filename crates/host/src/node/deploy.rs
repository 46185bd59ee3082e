//! Deploys, rollbacks and deletes of entity types — each one catalog command. A deploy hashes
//! the upload once, compiles and checks it against the entity world before anything is
//! written, and sends the bytes with the version in the same command, so a refused deploy
//! leaves no bytes, no cache entry and no version behind.

use super::tenants::now_ms;
use super::{Node, NodeError};
use sha2::{Digest, Sha256};
use tessera_metadata::{
    Applied, Command, MetadataError, TypeOptions, TypeRecord, VersionRecord, validate_name,
};

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
        let stored = self.plane.store().has_plugin(&sha256)?;
        let size_bytes = bytes.len() as u64;
        let command = Command::DeployVersion {
            tenant: tenant.to_string(),
            entity_type: entity_type.to_string(),
            sha256: sha256.clone(),
            plugin: (!stored).then_some(bytes),
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
