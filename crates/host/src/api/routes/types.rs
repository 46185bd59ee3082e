//! `/v1/types`: deploy versions of a tenant's entity types, list them, roll back or forward,
//! delete, and list a type's entities (tenant token).

use super::{ApiError, ReadQuery, path, query, read_consistency};
use crate::api::auth::TenantAuth;
use crate::api::body::{RequestBody, media_type, parse_json};
use crate::node::{ENTITY_LIST_LIMIT_DEFAULT, ENTITY_LIST_LIMIT_MAX, EntityPage, Node};
use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tessera_metadata::{TypeOptions, TypeRecord, VersionRecord};

/// The query of `POST /v1/types/{type}/versions`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployQuery {
    /// Remember started entities across restarts.
    #[serde(default)]
    pub remember: bool,
    /// Passivate entities idle this long.
    pub passivate_idle_ms: Option<u64>,
    /// Replicas of the partitions that keep the type's entities (fixed by its first deploy).
    pub replication_factor: Option<u8>,
}

/// The answer to a deploy.
#[derive(Debug, Serialize)]
pub struct Deployed {
    /// The type.
    #[serde(rename = "type")]
    pub entity_type: String,
    /// The new version and its details.
    #[serde(flatten)]
    pub version: VersionRecord,
}

/// The body of `PUT /v1/types/{type}/active`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetActive {
    /// The version to make active.
    pub version: u32,
}

/// `POST /v1/types/{type}/versions` with the component as the body → 201.
pub async fn deploy(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    entity_type: Result<Path<String>, PathRejection>,
    options: Result<Query<DeployQuery>, QueryRejection>,
    headers: HeaderMap,
    RequestBody(bytes): RequestBody,
) -> Result<(StatusCode, Json<Deployed>), ApiError> {
    let entity_type = path(entity_type)?;
    tracing::Span::current().record("entity_type", entity_type.as_str());
    let options = query(options)?;
    match media_type(&headers, header::CONTENT_TYPE).as_deref() {
        None | Some("application/wasm") | Some("application/octet-stream") => {}
        Some(other) => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("upload the component as application/wasm, not {other}"),
            ));
        }
    }
    let options = TypeOptions {
        remember: options.remember,
        passivate_idle_ms: options.passivate_idle_ms,
        replication_factor: options.replication_factor,
    };
    let version = node
        .deploy(&tenant, &entity_type, Vec::from(bytes), options)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(Deployed {
            entity_type,
            version,
        }),
    ))
}

/// `GET /v1/types` → `{"types": [...]}`.
pub async fn list(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    consistency: Result<Query<ReadQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    read_consistency(&node, consistency).await?;
    let types = node
        .types(&tenant)?
        .into_iter()
        .map(|record| with_replicas(&node, record))
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(Json(serde_json::json!({ "types": types })))
}

/// A type's record as the API shows it: with `replication`, how many replicas keep its
/// entities (`{"factor", "own"}`; `null` where the partition plane does not serve).
fn with_replicas(node: &Node, record: TypeRecord) -> Result<serde_json::Value, ApiError> {
    let replicas = node.type_replicas(&record.tenant, &record.name)?;
    let mut shown = serde_json::to_value(record).map_err(|error| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("a type record did not serialize: {error}"),
        )
    })?;
    if let Some(fields) = shown.as_object_mut() {
        fields.insert("replication".into(), serde_json::json!(replicas));
    }
    Ok(shown)
}

/// `GET /v1/types/{type}`.
pub async fn show(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    entity_type: Result<Path<String>, PathRejection>,
    consistency: Result<Query<ReadQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let entity_type = path(entity_type)?;
    tracing::Span::current().record("entity_type", entity_type.as_str());
    read_consistency(&node, consistency).await?;
    let record = node.entity_type(&tenant, &entity_type)?;
    Ok(Json(with_replicas(&node, record)?))
}

/// `PUT /v1/types/{type}/active` with `{"version": n}`.
pub async fn set_active(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    entity_type: Result<Path<String>, PathRejection>,
    RequestBody(bytes): RequestBody,
) -> Result<Json<TypeRecord>, ApiError> {
    let entity_type = path(entity_type)?;
    tracing::Span::current().record("entity_type", entity_type.as_str());
    let request: SetActive = parse_json(&bytes)?;
    node.entity_type(&tenant, &entity_type)?;
    Ok(Json(
        node.set_active_version(&tenant, &entity_type, request.version)
            .await?,
    ))
}

/// `DELETE /v1/types/{type}`: its entities stop; their state stays.
pub async fn delete(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    entity_type: Result<Path<String>, PathRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let entity_type = path(entity_type)?;
    tracing::Span::current().record("entity_type", entity_type.as_str());
    node.entity_type(&tenant, &entity_type)?;
    node.delete_type(&tenant, &entity_type).await?;
    Ok(Json(serde_json::json!({ "deleted": entity_type })))
}

/// The query of `GET /v1/types/{type}/entities`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntitiesQuery {
    /// List the ids strictly after this one (the previous page's `next_after`).
    pub after: Option<String>,
    /// At most this many ids: 1 to [`ENTITY_LIST_LIMIT_MAX`], [`ENTITY_LIST_LIMIT_DEFAULT`]
    /// when left out.
    pub limit: Option<usize>,
}

/// `GET /v1/types/{type}/entities[?after=ID][&limit=N]` → one page of the ids of the type's
/// entities that have state or are remembered, in id order, from every node of the cluster;
/// the first page counts them all (`total`).
pub async fn entities(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    entity_type: Result<Path<String>, PathRejection>,
    page: Result<Query<EntitiesQuery>, QueryRejection>,
) -> Result<Json<EntityPage>, ApiError> {
    let entity_type = path(entity_type)?;
    tracing::Span::current().record("entity_type", entity_type.as_str());
    let page = query(page)?;
    let limit = page.limit.unwrap_or(ENTITY_LIST_LIMIT_DEFAULT);
    if limit == 0 || limit > ENTITY_LIST_LIMIT_MAX {
        return Err(ApiError::bad_request(
            "bad_query",
            format!(
                "limit must be between 1 and {ENTITY_LIST_LIMIT_MAX} (the most ids a page lists)"
            ),
        ));
    }
    Ok(Json(
        node.list_entities(&tenant, &entity_type, page.after, limit)
            .await?,
    ))
}
