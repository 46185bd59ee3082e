//! `/v1/entities/{type}/{id}/...` and `/v1/status` (tenant token): messages to entities,
//! passivation and state inspection. The address is always inside the token's tenant.

use super::{ApiError, path, query};
use crate::api::auth::TenantAuth;
use crate::api::body::{RequestBody, message_payload, reply_response};
use crate::api::trace::RequestTrace;
use crate::node::Node;
use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use base64::Engine;
use base64::prelude::BASE64_STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tessera_contract::EntityAddress;

pub use tessera_contract::ENTITY_ID_BYTES_MAX;

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

/// The header that makes a tell effectively once.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// The longest idempotency key accepted.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 128;

/// `POST /v1/entities/{type}/{id}/tell` → 202 once the node has taken the message; with an
/// `Idempotency-Key` header, 202 once the entity has committed it (at most once per key).
pub async fn tell(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    entity: EntityPath,
    headers: HeaderMap,
    RequestBody(bytes): RequestBody,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let to = address(&tenant, entity)?;
    let trace = RequestTrace::start("tell", &headers, &to);
    let told = async {
        let key = idempotency_key(&headers)?;
        let payload = message_payload(&headers, &bytes)?;
        match (key, trace.message_trace()) {
            (Some(key), message_trace) => {
                let timeout = Duration::from_millis(node.config().api.ask_timeout_ms_default);
                node.tell_once(&to, payload, key, timeout, message_trace)
                    .await?;
                Ok((StatusCode::ACCEPTED, Json(json!({ "status": "committed" }))))
            }
            (None, Some(message_trace)) => {
                node.tell_in_trace(&to, payload, message_trace).await?;
                Ok((StatusCode::ACCEPTED, Json(json!({ "status": "accepted" }))))
            }
            (None, None) => {
                node.tell(&to, payload).await?;
                Ok((StatusCode::ACCEPTED, Json(json!({ "status": "accepted" }))))
            }
        }
    }
    .await;
    trace.end(&told);
    told
}

/// The request's `Idempotency-Key`, if any: printable ASCII, 1 to
/// [`IDEMPOTENCY_KEY_BYTES_MAX`] bytes.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY_HEADER) else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .ok()
        .filter(|key| {
            !key.is_empty()
                && key.len() <= IDEMPOTENCY_KEY_BYTES_MAX
                && key.bytes().all(|byte| byte.is_ascii_graphic())
        })
        .ok_or_else(|| {
            ApiError::bad_request(
                "bad_header",
                format!(
                    "Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_BYTES_MAX} printable ASCII \
                     characters"
                ),
            )
        })?;
    Ok(Some(key.to_string()))
}

/// `POST /v1/entities/{type}/{id}/ask[?timeout_ms=N]` → the reply, as JSON or MessagePack.
pub async fn ask(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    entity: EntityPath,
    options: Result<Query<AskQuery>, QueryRejection>,
    headers: HeaderMap,
    RequestBody(bytes): RequestBody,
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
    let payload = message_payload(&headers, &bytes)?;
    let timeout = Duration::from_millis(timeout_ms);
    let trace = RequestTrace::start("ask", &headers, &to);
    let reply = match trace.message_trace() {
        Some(message_trace) => {
            node.ask_in_trace(&to, payload, timeout, message_trace)
                .await
        }
        None => node.ask(&to, payload, timeout).await,
    }
    .map_err(ApiError::from);
    trace.end(&reply);
    reply_response(&headers, reply?)
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

/// One committed key of an entity, as `GET .../state` shows it.
#[derive(Debug, Serialize)]
pub struct StateEntry {
    /// The state key.
    pub key: String,
    /// The value's JSON form (see the codec mapping in `docs/api.md`), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Box<RawValue>>,
    /// The raw bytes in standard base64, when the value is not MessagePack with a JSON form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_base64: Option<String>,
}

/// The body of `GET .../state`.
#[derive(Debug, Serialize)]
pub struct EntityStateView {
    /// The entity type.
    #[serde(rename = "type")]
    pub entity_type: String,
    /// The entity id.
    pub id: String,
    /// Its committed keys, in key order.
    pub entries: Vec<StateEntry>,
    /// Keys plus values, in bytes.
    pub bytes_total: usize,
}

/// `GET /v1/entities/{type}/{id}/state` → its committed entries, as the owner of its shard
/// holds them (read there, whichever node answers): `value` where the bytes are MessagePack
/// with a JSON form, else `raw_base64`.
pub async fn state(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
    entity: EntityPath,
) -> Result<Json<EntityStateView>, ApiError> {
    let address = address(&tenant, entity)?;
    let entries = node.entity_state(&address).await?;
    let bytes_total: usize = entries
        .iter()
        .map(|(key, value)| key.len() + value.len())
        .sum();
    let entries = entries
        .into_iter()
        .map(|(key, value)| {
            let json = tessera_codec::msgpack_to_json_string(&value)
                .ok()
                .and_then(|text| RawValue::from_string(text).ok());
            let raw_base64 = json.is_none().then(|| BASE64_STANDARD.encode(&value));
            StateEntry {
                key,
                value: json,
                raw_base64,
            }
        })
        .collect();
    Ok(Json(EntityStateView {
        entity_type: address.entity_type,
        id: address.id,
        entries,
        bytes_total,
    }))
}

/// `GET /v1/status` → per type: active version, live and remembered entities.
pub async fn status(
    State(node): State<Arc<Node>>,
    TenantAuth(tenant): TenantAuth,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "types": node.status(&tenant)? })))
}
