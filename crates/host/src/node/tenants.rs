//! Who a request comes from, and the tenants a node knows. Tokens are checked against the
//! catalog's token hashes held in memory (no database read per request); only tenants that
//! exist are in that index, so unknown tokens cost nothing to remember.

use super::{Node, NodeError};
use sha2::{Digest, Sha256};
use std::time::{SystemTime, UNIX_EPOCH};
use tessera_metadata::{Applied, Command, MetadataError, Quotas, Tenant};

/// Who a request comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// The node's administrator.
    Admin,
    /// A tenant, by name.
    Tenant(String),
}

/// Hex SHA-256 of a token.
///
/// ```
/// assert_eq!(tessera_host::node::token_hash("abc").len(), 64);
/// ```
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

impl Node {
    /// Who `token` belongs to.
    pub fn authenticate(&self, token: &str) -> Result<Principal, NodeError> {
        let hash = token_hash(token);
        if hash == self.admin_token_sha256 {
            return Ok(Principal::Admin);
        }
        match self.catalog.tenant_by_token_hash(&hash) {
            Some(tenant) => Ok(Principal::Tenant(tenant.name.clone())),
            None => Err(NodeError::Unauthorized),
        }
    }

    /// Creates a tenant; returns it with its token, which is not stored and never shown again.
    pub async fn create_tenant(
        &self,
        name: &str,
        quotas: Option<Quotas>,
    ) -> Result<(Tenant, String), NodeError> {
        let token = format!("tsr_{}", hex::encode(rand::random::<[u8; 24]>()));
        let applied = self
            .plane
            .submit(Command::CreateTenant {
                name: name.to_string(),
                token_sha256: token_hash(&token),
                quotas: quotas.unwrap_or_else(|| self.config.default_quotas.clone()),
                created_ms: now_ms(),
            })
            .await?;
        let tenant = expect_tenant(applied)?;
        tracing::info!(tenant = %tenant.name, "tenant created");
        Ok((tenant, token))
    }

    /// Every tenant, by name.
    pub fn tenants(&self) -> Vec<Tenant> {
        self.catalog
            .tenants()
            .into_iter()
            .map(|tenant| (*tenant).clone())
            .collect()
    }

    /// One tenant.
    pub fn tenant(&self, name: &str) -> Result<Tenant, NodeError> {
        self.catalog
            .tenant(name)
            .map(|tenant| (*tenant).clone())
            .ok_or_else(|| NodeError::NotFound(format!("no tenant {name}")))
    }

    /// Replaces a tenant's quotas; running types pick them up for new activations.
    pub async fn update_quotas(&self, name: &str, quotas: Quotas) -> Result<Tenant, NodeError> {
        let applied = self
            .plane
            .submit(Command::UpdateQuotas {
                name: name.to_string(),
                quotas,
            })
            .await?;
        self.rate.reset(name);
        expect_tenant(applied)
    }
}

fn expect_tenant(applied: Applied) -> Result<Tenant, NodeError> {
    match applied {
        Applied::Tenant(tenant) => Ok(tenant),
        other => {
            Err(MetadataError::Storage(format!("a tenant command applied as {other:?}")).into())
        }
    }
}
