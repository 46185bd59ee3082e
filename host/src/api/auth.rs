//! Bearer tokens: the admin token for tenants and the cluster, a tenant token for everything
//! a tenant owns. A tenant is always the one its token names, so it can only address its own
//! types and entities.

use super::error::ApiError;
use crate::node::{Node, Principal};
use axum::extract::FromRequestParts;
use axum::http::{HeaderMap, StatusCode, header, request::Parts};
use std::sync::Arc;

/// A request made with the admin token.
#[derive(Debug)]
pub struct Admin;

/// A request made with a tenant's token: the tenant's name.
#[derive(Debug)]
pub struct TenantAuth(pub String);

/// Who the `Authorization: Bearer` header of a request names.
pub(crate) fn principal(headers: &HeaderMap, node: &Node) -> Result<Principal, ApiError> {
    let value = headers.get(header::AUTHORIZATION).ok_or_else(|| {
        unauthorized("no Authorization header: send `Authorization: Bearer <token>`")
    })?;
    let token = value
        .to_str()
        .ok()
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|token| !token.is_empty())
        .ok_or_else(|| unauthorized("the Authorization header is not `Bearer <token>`"))?;
    node.authenticate(token)
        .map_err(|_| unauthorized("unknown token"))
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

impl FromRequestParts<Arc<Node>> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, node: &Arc<Node>) -> Result<Self, ApiError> {
        match principal(&parts.headers, node)? {
            Principal::Admin => Ok(Admin),
            Principal::Tenant(_) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "this endpoint needs the admin token",
            )),
        }
    }
}

impl FromRequestParts<Arc<Node>> for TenantAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, node: &Arc<Node>) -> Result<Self, ApiError> {
        match principal(&parts.headers, node)? {
            Principal::Tenant(name) => {
                tracing::Span::current().record("tenant", name.as_str());
                Ok(TenantAuth(name))
            }
            Principal::Admin => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "this endpoint needs a tenant token; the admin token belongs to no tenant",
            )),
        }
    }
}
