//! The one error shape every endpoint answers with — `{"error":{"code","message"}}` — and the
//! table from node and entity errors to HTTP status codes (documented in `docs/api.md`). A
//! server error is logged through `failure_log`, which writes repeats as one count.

use crate::node::NodeError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tessera_contract::{ErrorKind, MessageError};
use tessera_metadata::MetadataError;
use tessera_runtime::LoadError;

/// An error as a client sees it: a status, a stable `snake_case` code and a message.
///
/// ```
/// use tessera_host::api::ApiError;
/// let error = ApiError::bad_request("malformed_body", "expected a JSON value");
/// assert_eq!(error.status().as_u16(), 400);
/// assert_eq!(error.code(), "malformed_body");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// An error with an explicit status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// A 400 with `code`.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// A 413: a body over its limit.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable error code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The status an entity error is answered with; see the table in `docs/api.md`.
pub fn message_status(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::BadMessage => StatusCode::BAD_REQUEST,
        ErrorKind::EntityTypeNotRegistered => StatusCode::NOT_FOUND,
        ErrorKind::Rejected
        | ErrorKind::Deadline
        | ErrorKind::MemoryLimit
        | ErrorKind::ReplyTooLarge
        | ErrorKind::StateTooLarge => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::QuotaExceeded => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::MailboxFull
        | ErrorKind::BufferOverflow
        | ErrorKind::Unavailable
        | ErrorKind::ShardUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::Deadlock => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<MessageError> for ApiError {
    fn from(error: MessageError) -> Self {
        ApiError::new(message_status(error.kind), error.kind.code(), error.message)
    }
}

impl From<MetadataError> for ApiError {
    fn from(error: MetadataError) -> Self {
        let message = error.to_string();
        let (status, code) = match error {
            MetadataError::InvalidName(_)
            | MetadataError::InvalidQuotas(_)
            | MetadataError::InvalidOptions(_)
            | MetadataError::InvalidMember(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            MetadataError::TenantExists(_) | MetadataError::MemberTransition { .. } => {
                (StatusCode::CONFLICT, "conflict")
            }
            MetadataError::NoMember(_)
            | MetadataError::NoTenant(_)
            | MetadataError::NoType(_, _)
            | MetadataError::NoVersion(_, _) => (StatusCode::NOT_FOUND, "not_found"),
            MetadataError::TooManyVersions(_) | MetadataError::QuotaExceeded(_) => {
                (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded")
            }
            MetadataError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "storage"),
        };
        ApiError::new(status, code, message)
    }
}

impl From<LoadError> for ApiError {
    fn from(error: LoadError) -> Self {
        let status = match error {
            LoadError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::UNPROCESSABLE_ENTITY,
        };
        ApiError::new(status, "bad_plugin", error.to_string())
    }
}

impl From<NodeError> for ApiError {
    fn from(error: NodeError) -> Self {
        let message = error.to_string();
        let (status, code) = match error {
            NodeError::Message(error) => return error.into(),
            NodeError::Catalog(error) => return error.into(),
            NodeError::BadPlugin(error) => return error.into(),
            NodeError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            NodeError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            NodeError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            NodeError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            NodeError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            NodeError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            NodeError::Quota(_) => (StatusCode::TOO_MANY_REQUESTS, "quota_exceeded"),
            NodeError::Coordinator(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            NodeError::Storage(_) => (StatusCode::INTERNAL_SERVER_ERROR, "storage"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        ApiError::new(status, code, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            super::failure_log::request_failed(self.code, &self.message);
        } else {
            tracing::debug!(code = self.code, message = %self.message, "request refused");
        }
        let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE
            || self.status == StatusCode::TOO_MANY_REQUESTS
        {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_kind_has_a_status() {
        let table = [
            (ErrorKind::BadMessage, 400),
            (ErrorKind::Rejected, 422),
            (ErrorKind::Failed, 500),
            (ErrorKind::Trap, 500),
            (ErrorKind::Deadline, 422),
            (ErrorKind::MemoryLimit, 422),
            (ErrorKind::ReplyTooLarge, 422),
            (ErrorKind::StateTooLarge, 422),
            (ErrorKind::PayloadTooLarge, 413),
            (ErrorKind::MailboxFull, 503),
            (ErrorKind::BufferOverflow, 503),
            (ErrorKind::Unavailable, 503),
            (ErrorKind::ShardUnavailable, 503),
            (ErrorKind::QuotaExceeded, 429),
            (ErrorKind::Timeout, 504),
            (ErrorKind::Deadlock, 409),
            (ErrorKind::EntityTypeNotRegistered, 404),
            (ErrorKind::Instantiation, 500),
            (ErrorKind::Internal, 500),
        ];
        for (kind, status) in table {
            assert_eq!(message_status(kind).as_u16(), status, "{}", kind.code());
        }
    }

    #[test]
    fn a_fault_answered_a_thousand_times_is_logged_once_per_shard() {
        let unavailable = |shard: u32| {
            let message = format!("shard log-flood-test/counter/{shard} has no home: owner down");
            ApiError::from(MessageError::shard_unavailable(message))
        };
        let captured = tessera_logs::CapturedWarnings::start();
        for _ in 0..1_000 {
            let _ = unavailable(7).into_response();
        }
        let _ = unavailable(8).into_response();
        let _ = unavailable(7).into_response();
        let lines = captured.lines();
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(lines[0].contains("log-flood-test/counter/7"), "{lines:#?}");
        assert!(lines[1].contains("log-flood-test/counter/8"), "{lines:#?}");
        assert!(lines.iter().all(|line| line.contains("shard_unavailable")));
    }

    #[test]
    fn node_errors_keep_their_message() {
        let error = ApiError::from(NodeError::NotFound("no tenant x".into()));
        assert_eq!(error.status(), StatusCode::NOT_FOUND);
        assert_eq!(error.message(), "no tenant x");
    }
}
