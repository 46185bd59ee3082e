//! `/v1/entities/{type}/{id}/...` and `/v1/status` (tenant token): messages to entities,
//! passivation and state inspection. The address is always inside the token's tenant.

use super::{ApiError, path, query};
use crate::api::auth::TenantAuth;
use crate::api::body::{message_payload, read_limited, reply_response};
use crate::api::codec::msgpack_to_json;
use crate::envelope::EntityAddress;
use crate::node::Node;
use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The longest entity id the API accepts, so an id cannot bloat keys, logs and metrics.
pub const ENTITY_ID_BYTES_MAX: usize = 256;

/// The query of an ask.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskQuery {
    /// How long to wait for the reply; the node's default when left out.
    pub timeout_ms: Option<u64>,
}

type EntityPath = Result<Path<(String, String)>, PathRejection>;

/// The entity's address inside `tenant`, recorded on the request span.
fn address(tenant: &str, extracted: EntityPath) -> Result<EntityAddress, ApiError> {
    let (entity_type, id) = path(extracted)?;
    if id.len() > ENTITY_ID_BYTES_MAX {
        return Err(ApiError::bad_request(
            "bad_path",
            format!("entity ids are at most {ENTITY_ID_BYTES_MAX} bytes"),
        ));
    }
    let span = tracing::Span::current();
    span.record("entity_type", entity_type.as_str());
    span.record("id", id.as_str());
    Ok(EntityAddress::new(tenant, entity_type, id))
}

/// `POST /v1/entities/{type}/{id}/tell` → 202 once the node has taken the message.
pub async fn tell(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    entity: EntityPath,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let to = address(&tenant, entity)?;
    let bytes = read_limited(&headers, body, node.config().api.request_body_bytes_max).await?;
    let payload = message_payload(&headers, &bytes)?;
    node.tell(to, payload).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "status": "accepted" }))))
}

/// `POST /v1/entities/{type}/{id}/ask[?timeout_ms=N]` → the reply, as JSON or MessagePack.
pub async fn ask(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    entity: EntityPath,
    options: Result<Query<AskQuery>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let to = address(&tenant, entity)?;
    let options = query(options)?;
    let limits = &node.config().api;
    let timeout_ms = options.timeout_ms.unwrap_or(limits.ask_timeout_ms_default);
    if timeout_ms == 0 || timeout_ms > limits.ask_timeout_ms_max {
        return Err(ApiError::bad_request(
            "bad_query",
            format!(
                "timeout_ms must be between 1 and {}",
                limits.ask_timeout_ms_max
            ),
        ));
    }
    let bytes = read_limited(&headers, body, limits.request_body_bytes_max).await?;
    let payload = message_payload(&headers, &bytes)?;
    let reply = node
        .ask(to, payload, Duration::from_millis(timeout_ms))
        .await?;
    reply_response(&headers, reply)
}

/// `POST /v1/entities/{type}/{id}/passivate` → 202; the entity stops after its queued messages.
pub async fn passivate(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    entity: EntityPath,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let address = address(&tenant, entity)?;
    node.passivate(&address).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "status": "passivating" })),
    ))
}

/// `GET /v1/entities/{type}/{id}/state` → its committed entries: `value` where the bytes are
/// MessagePack with a JSON form, else `bytes` (an array of byte values).
pub async fn state(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    entity: EntityPath,
) -> Result<Json<Value>, ApiError> {
    let address = address(&tenant, entity)?;
    let entries = node.entity_state(&address)?;
    let bytes_total: usize = entries
        .iter()
        .map(|(key, value)| key.len() + value.len())
        .sum();
    let entries: Vec<Value> = entries
        .into_iter()
        .map(|(key, value)| match msgpack_to_json(&value) {
            Ok(json) => json!({ "key": key, "value": json }),
            Err(_) => json!({ "key": key, "bytes": value }),
        })
        .collect();
    Ok(Json(json!({
        "type": address.entity_type,
        "id": address.id,
        "entries": entries,
        "bytes_total": bytes_total,
    })))
}

/// `GET /v1/status` → per type: active version, live and remembered entities.
pub async fn status(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "types": node.status(&tenant)? })))
}
