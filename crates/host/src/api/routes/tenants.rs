//! `/v1/tenants`: create, list, show and re-quota tenants (admin token).

use super::{ApiError, ReadQuery, path, read_consistency};
use crate::api::auth::Admin;
use crate::api::body::{RequestBody, parse_json};
use crate::node::Node;
use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tessera_metadata::{Quotas, Tenant};

/// The body of `POST /v1/tenants`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    /// The tenant's name.
    pub name: String,
    /// Its quotas; the node's defaults when left out.
    #[serde(default)]
    pub quotas: Option<Quotas>,
}

/// A tenant as the API shows it (its token hash stays inside the node).
#[derive(Debug, Serialize)]
pub struct TenantView {
    /// The tenant's name.
    pub name: String,
    /// Its quotas.
    pub quotas: Quotas,
    /// When it was created (ms since the Unix epoch).
    pub created_ms: u64,
    /// Its token: only in the answer to its creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl From<Tenant> for TenantView {
    fn from(tenant: Tenant) -> Self {
        TenantView {
            name: tenant.name,
            quotas: tenant.quotas,
            created_ms: tenant.created_ms,
            token: None,
        }
    }
}

/// `POST /v1/tenants` → 201 with the tenant and its token.
pub async fn create(
    State(node): State<Arc<Node>>,
    _: Admin,
    RequestBody(bytes): RequestBody,
) -> Result<(StatusCode, Json<TenantView>), ApiError> {
    let request: CreateTenant = parse_json(&bytes)?;
    tracing::Span::current().record("tenant", request.name.as_str());
    let (tenant, token) = node.create_tenant(&request.name, request.quotas).await?;
    let mut view = TenantView::from(tenant);
    view.token = Some(token);
    Ok((StatusCode::CREATED, Json(view)))
}

/// `GET /v1/tenants` → `{"tenants": [...]}`.
pub async fn list(
    State(node): State<Arc<Node>>,
    _: Admin,
    consistency: Result<Query<ReadQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    read_consistency(&node, consistency).await?;
    let tenants: Vec<TenantView> = node.tenants().into_iter().map(TenantView::from).collect();
    Ok(Json(serde_json::json!({ "tenants": tenants })))
}

/// `GET /v1/tenants/{name}`.
pub async fn show(
    State(node): State<Arc<Node>>,
    _: Admin,
    name: Result<Path<String>, PathRejection>,
    consistency: Result<Query<ReadQuery>, QueryRejection>,
) -> Result<Json<TenantView>, ApiError> {
    let name = path(name)?;
    read_consistency(&node, consistency).await?;
    Ok(Json(node.tenant(&name)?.into()))
}

/// `PUT /v1/tenants/{name}/quotas` with the full quota set (missing fields take defaults).
pub async fn update_quotas(
    State(node): State<Arc<Node>>,
    _: Admin,
    name: Result<Path<String>, PathRejection>,
    RequestBody(bytes): RequestBody,
) -> Result<Json<TenantView>, ApiError> {
    let name = path(name)?;
    let quotas: Quotas = parse_json(&bytes)?;
    quotas
        .validate()
        .map_err(|error| ApiError::bad_request("bad_request", error))?;
    node.tenant(&name)?;
    Ok(Json(node.update_quotas(&name, quotas).await?.into()))
}
