//! Backups and restores (`docs/backup.md`): the plan, plugins and a node's shards out, and
//! tenants, versions, active versions and shard parts in. The admin token reaches every
//! tenant; a tenant token only its own — its tenant comes from the token, never from a body,
//! so a tenant can neither read nor write another's data. Bodies in are single backup records
//! in MessagePack, as the file holds them.

use super::ApiError;
use crate::api::auth::{Admin, TenantAuth};
use crate::api::body::RequestBody;
use crate::backup::{BackupPlan, Record, ShardRestored};
use crate::node::{Node, Principal};
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use std::sync::Arc;
use tessera_metadata::{Tenant, VersionRecord};

/// The media type of a stream of backup frames.
pub const BACKUP_FRAMES: &str = "application/vnd.tessera.backup-frames";

/// Who calls: the admin, or the tenant a token names.
fn principal(
    admin: Result<Admin, ApiError>,
    tenant: Result<TenantAuth, ApiError>,
) -> Result<Principal, ApiError> {
    match (admin, tenant) {
        (Ok(Admin), _) => Ok(Principal::Admin),
        (_, Ok(TenantAuth(name))) => Ok(Principal::Tenant(name)),
        (_, Err(error)) => Err(error),
    }
}

/// `GET /v1/backup` → the [`BackupPlan`]: the catalog at one commit and each shard's owner.
pub async fn plan(
    State(node): State<Arc<Node>>,
    admin: Result<Admin, ApiError>,
    tenant: Result<TenantAuth, ApiError>,
) -> Result<Json<BackupPlan>, ApiError> {
    let principal = principal(admin, tenant)?;
    Ok(Json(node.backup_plan(&principal).await?))
}

/// `GET /v1/backup/plugins/{sha256}` → the plugin's bytes.
pub async fn plugin(
    State(node): State<Arc<Node>>,
    admin: Result<Admin, ApiError>,
    tenant: Result<TenantAuth, ApiError>,
    sha256: Result<Path<String>, PathRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let principal = principal(admin, tenant)?;
    let sha256 = super::path(sha256)?;
    let bytes = node.backup_plugin(&principal, &sha256)?;
    Ok(([(header::CONTENT_TYPE, "application/wasm")], bytes))
}

/// `GET /v1/backup/shards` → this node's shards as a stream of backup frames, ended by an end
/// record (a stream cut short has none).
pub async fn shards(
    State(node): State<Arc<Node>>,
    admin: Result<Admin, ApiError>,
    tenant: Result<TenantAuth, ApiError>,
) -> Result<impl IntoResponse, ApiError> {
    let principal = principal(admin, tenant)?;
    let frames = node.backup_shards(&principal);
    let stream = futures::stream::unfold(frames, |mut frames| async move {
        let frame = frames.recv().await?;
        let item = frame.map(Bytes::from).map_err(std::io::Error::other);
        Some((item, frames))
    });
    Ok((
        [(header::CONTENT_TYPE, BACKUP_FRAMES)],
        Body::from_stream(stream),
    ))
}

/// `POST /v1/restore/tenants` (admin) with a JSON tenant record → `201` and the tenant.
pub async fn tenant(
    State(node): State<Arc<Node>>,
    _: Admin,
    RequestBody(bytes): RequestBody,
) -> Result<(StatusCode, Json<Tenant>), ApiError> {
    let tenant: Tenant = serde_json::from_slice(&bytes)
        .map_err(|error| ApiError::bad_request("bad_body", error.to_string()))?;
    Ok((
        StatusCode::CREATED,
        Json(node.restore_tenant(tenant).await?),
    ))
}

/// `POST /v1/restore/versions` with a version record → `201` and the deployed version.
pub async fn version(
    State(node): State<Arc<Node>>,
    admin: Result<Admin, ApiError>,
    tenant: Result<TenantAuth, ApiError>,
    RequestBody(bytes): RequestBody,
) -> Result<(StatusCode, Json<VersionRecord>), ApiError> {
    let principal = principal(admin, tenant)?;
    let Record::Version {
        tenant,
        entity_type,
        version,
        plugin,
    } = record(&bytes)?
    else {
        return Err(ApiError::bad_request("bad_body", "not a version record"));
    };
    let tenant = tenant_for(&principal, tenant);
    let deployed = node
        .restore_version(&tenant, &entity_type, version, plugin)
        .await?;
    Ok((StatusCode::CREATED, Json(deployed)))
}

/// `POST /v1/restore/active` with an active-version record → the type.
pub async fn active(
    State(node): State<Arc<Node>>,
    admin: Result<Admin, ApiError>,
    tenant: Result<TenantAuth, ApiError>,
    RequestBody(bytes): RequestBody,
) -> Result<Json<tessera_metadata::TypeRecord>, ApiError> {
    let principal = principal(admin, tenant)?;
    let Record::Active {
        tenant,
        entity_type,
        version,
    } = record(&bytes)?
    else {
        return Err(ApiError::bad_request(
            "bad_body",
            "not an active-version record",
        ));
    };
    let tenant = tenant_for(&principal, tenant);
    Ok(Json(
        node.set_active_version(&tenant, &entity_type, version)
            .await?,
    ))
}

/// `POST /v1/restore/shards` with a shard record → whether this node installed it, or which
/// node owns the shard.
pub async fn shard(
    State(node): State<Arc<Node>>,
    admin: Result<Admin, ApiError>,
    tenant: Result<TenantAuth, ApiError>,
    RequestBody(bytes): RequestBody,
) -> Result<Json<ShardRestored>, ApiError> {
    let principal = principal(admin, tenant)?;
    let Record::Shard(shard) = record(&bytes)? else {
        return Err(ApiError::bad_request("bad_body", "not a shard record"));
    };
    let tenant = tenant_for(&principal, shard.tenant.clone());
    Ok(Json(node.restore_shard(&tenant, shard).await?))
}

fn record(bytes: &[u8]) -> Result<Record, ApiError> {
    rmp_serde::from_slice(bytes)
        .map_err(|error| ApiError::bad_request("bad_body", format!("not a backup record: {error}")))
}

/// The tenant a record goes to: the one a tenant token names, whatever the record says (an
/// import into another cluster may name the tenant differently); the record's for the admin.
fn tenant_for(principal: &Principal, named: String) -> String {
    match principal {
        Principal::Admin => named,
        Principal::Tenant(tenant) => tenant.clone(),
    }
}
