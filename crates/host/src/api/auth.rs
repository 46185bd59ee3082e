//! Bearer tokens: the admin token for tenants and the cluster, a tenant token for everything
//! a tenant owns. The edge middleware authenticates each request once, before any body is read,
//! and leaves the result in the request; the [`Admin`] and [`TenantAuth`] extractors read it.
//! A tenant is always the one its token names, so it can only address its own types and
//! entities.

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

/// Who a request is from, as the edge middleware found it.
#[derive(Clone, Debug)]
pub(crate) struct Authenticated(pub(crate) Result<Principal, ApiError>);

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

/// The request's principal: from the middleware, or (for a router used without it) now.
fn principal_of(parts: &Parts, node: &Node) -> Result<Principal, ApiError> {
    match parts.extensions.get::<Authenticated>() {
        Some(Authenticated(result)) => result.clone(),
        None => principal(&parts.headers, node),
    }
}

impl FromRequestParts<Arc<Node>> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, node: &Arc<Node>) -> Result<Self, ApiError> {
        match principal_of(parts, node)? {
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
        match principal_of(parts, node)? {
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
