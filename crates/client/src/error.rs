//! What can go wrong talking to a node: [`Error`], and the stable error codes of the HTTP API
//! (`docs/api.md`, *Errors*) as [`ErrorKind`]. Which of them are worth another try is decided in
//! [`crate::retry`].

use std::time::Duration;

/// The error codes a node answers with (`{"error":{"code","message"}}`), one variant per code
/// of `docs/api.md`. A code this version does not know is [`ErrorKind::Unknown`].
///
/// ```
/// use tessera_client::ErrorKind;
/// assert_eq!(ErrorKind::from_code("shard_unavailable"), ErrorKind::ShardUnavailable);
/// assert_eq!(ErrorKind::Rejected.code(), "rejected");
/// assert_eq!(ErrorKind::from_code("something_new"), ErrorKind::Unknown);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `400 malformed_body`: the body is not JSON (or MessagePack), or not the expected shape.
    MalformedBody,
    /// `400 bad_body`: the body could not be read.
    BadBody,
    /// `400 bad_query`: an unknown or malformed query parameter.
    BadQuery,
    /// `400 bad_path`: an entity id over 256 bytes, or a malformed path segment.
    BadPath,
    /// `400 bad_header`: a malformed `Idempotency-Key`.
    BadHeader,
    /// `400 bad_request`: an invalid tenant or type name, invalid quotas.
    BadRequest,
    /// `400 state_lost_not_confirmed`: removing a member without `state_lost=true`.
    StateLostNotConfirmed,
    /// `401 unauthorized`: no, malformed or unknown token.
    Unauthorized,
    /// `403 forbidden`: the wrong kind of token for the endpoint.
    Forbidden,
    /// `404 not_found`: unknown tenant, type, version or endpoint.
    NotFound,
    /// `405 method_not_allowed`.
    MethodNotAllowed,
    /// `406 no_json_form`: the reply cannot be shown as JSON.
    NoJsonForm,
    /// `408 request_timeout`: the body did not arrive in time.
    RequestTimeout,
    /// `409 conflict`: the tenant exists already.
    Conflict,
    /// `413 payload_too_large`: a body or message over its limit.
    PayloadTooLarge,
    /// `415 unsupported_media_type`.
    UnsupportedMediaType,
    /// `422 bad_plugin`: the upload is not an entity component.
    BadPlugin,
    /// `429 quota_exceeded`: a tenant quota refused the request.
    QuotaExceeded,
    /// `500 storage`: the catalog or the state store failed.
    Storage,
    /// `500 internal`: a host bug.
    Internal,
    /// `502 bad_reply`: the entity's reply is not MessagePack.
    BadReply,
    /// `503 unavailable`: the node or the entity cannot take the request now (retryable).
    Unavailable,
    /// `400 bad_message`: the entity could not decode the message.
    BadMessage,
    /// `404 entity_type_not_registered`: no such type in the token's tenant.
    EntityTypeNotRegistered,
    /// `422 rejected`: the entity refused the message (a business rule).
    Rejected,
    /// `422 deadline`: the message ran past the tenant's CPU deadline.
    Deadline,
    /// `422 memory_limit`: the instance hit the tenant's memory cap.
    MemoryLimit,
    /// `422 reply_too_large`: the reply (or a state read) was over the host's limit.
    ReplyTooLarge,
    /// `422 state_too_large`: the message would take the entity over its state quota.
    StateTooLarge,
    /// `500 failed`: the entity reported a failure of its own.
    Failed,
    /// `500 trap`: the guest trapped or panicked.
    Trap,
    /// `500 instantiation`: the host could not run the plugin.
    Instantiation,
    /// `503 mailbox_full`: the entity's mailbox is full (retryable).
    MailboxFull,
    /// `503 buffer_overflow`: the shard's buffer is full while its home is resolved (retryable).
    BufferOverflow,
    /// `503 shard_unavailable`: the shard's owner is down or cut off (retryable).
    ShardUnavailable,
    /// `409 deadlock`: an ask cycle (`A → B → A`).
    Deadlock,
    /// `504 timeout`: no reply within the ask's timeout; the message may still run.
    Timeout,
    /// A code this version of the client does not know.
    Unknown,
}

/// Every code with its kind: the one table both directions read.
const CODES: &[(&str, ErrorKind)] = &[
    ("malformed_body", ErrorKind::MalformedBody),
    ("bad_body", ErrorKind::BadBody),
    ("bad_query", ErrorKind::BadQuery),
    ("bad_path", ErrorKind::BadPath),
    ("bad_header", ErrorKind::BadHeader),
    ("bad_request", ErrorKind::BadRequest),
    ("state_lost_not_confirmed", ErrorKind::StateLostNotConfirmed),
    ("unauthorized", ErrorKind::Unauthorized),
    ("forbidden", ErrorKind::Forbidden),
    ("not_found", ErrorKind::NotFound),
    ("method_not_allowed", ErrorKind::MethodNotAllowed),
    ("no_json_form", ErrorKind::NoJsonForm),
    ("request_timeout", ErrorKind::RequestTimeout),
    ("conflict", ErrorKind::Conflict),
    ("payload_too_large", ErrorKind::PayloadTooLarge),
    ("unsupported_media_type", ErrorKind::UnsupportedMediaType),
    ("bad_plugin", ErrorKind::BadPlugin),
    ("quota_exceeded", ErrorKind::QuotaExceeded),
    ("storage", ErrorKind::Storage),
    ("internal", ErrorKind::Internal),
    ("bad_reply", ErrorKind::BadReply),
    ("unavailable", ErrorKind::Unavailable),
    ("bad_message", ErrorKind::BadMessage),
    (
        "entity_type_not_registered",
        ErrorKind::EntityTypeNotRegistered,
    ),
    ("rejected", ErrorKind::Rejected),
    ("deadline", ErrorKind::Deadline),
    ("memory_limit", ErrorKind::MemoryLimit),
    ("reply_too_large", ErrorKind::ReplyTooLarge),
    ("state_too_large", ErrorKind::StateTooLarge),
    ("failed", ErrorKind::Failed),
    ("trap", ErrorKind::Trap),
    ("instantiation", ErrorKind::Instantiation),
    ("mailbox_full", ErrorKind::MailboxFull),
    ("buffer_overflow", ErrorKind::BufferOverflow),
    ("shard_unavailable", ErrorKind::ShardUnavailable),
    ("deadlock", ErrorKind::Deadlock),
    ("timeout", ErrorKind::Timeout),
];

impl ErrorKind {
    /// The kind of API error code `code`; [`ErrorKind::Unknown`] for a code not in
    /// `docs/api.md`.
    ///
    /// ```
    /// use tessera_client::ErrorKind;
    /// assert_eq!(ErrorKind::from_code("mailbox_full"), ErrorKind::MailboxFull);
    /// ```
    pub fn from_code(code: &str) -> ErrorKind {
        CODES
            .iter()
            .find(|(known, _)| *known == code)
            .map_or(ErrorKind::Unknown, |(_, kind)| *kind)
    }

    /// The API's code for this kind (`"unknown"` for [`ErrorKind::Unknown`]).
    ///
    /// ```
    /// use tessera_client::ErrorKind;
    /// assert_eq!(ErrorKind::ShardUnavailable.code(), "shard_unavailable");
    /// ```
    pub fn code(self) -> &'static str {
        CODES
            .iter()
            .find(|(_, kind)| *kind == self)
            .map_or("unknown", |(code, _)| code)
    }

    /// Whether a request answered with this kind was certainly not taken and may be sent again
    /// as it is, to this node or another: the `503` kinds (`unavailable`, `shard_unavailable`,
    /// `mailbox_full`, `buffer_overflow`). Every other answer is a definite refusal or an
    /// outcome a retry could repeat.
    ///
    /// ```
    /// use tessera_client::ErrorKind;
    /// assert!(ErrorKind::ShardUnavailable.is_transient());
    /// assert!(!ErrorKind::Rejected.is_transient());
    /// ```
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorKind::Unavailable
                | ErrorKind::ShardUnavailable
                | ErrorKind::MailboxFull
                | ErrorKind::BufferOverflow
        )
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code())
    }
}

/// An error answer from a node: its status, its code as an [`ErrorKind`], its message for
/// people, and the body as it came.
///
/// ```
/// # async fn example(client: tessera_client::Client) {
/// use tessera_client::{Error, ErrorKind};
/// match client.ask::<_, i64>("bank-account", "a", &serde_json::json!({"Withdraw": 5})).await {
///     Err(Error::Api(refusal)) if refusal.kind() == ErrorKind::Rejected => {
///         eprintln!("refused: {}", refusal.message());
///     }
///     other => println!("{other:?}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    status: u16,
    kind: ErrorKind,
    code: String,
    message: String,
    body: String,
}

impl ApiError {
    /// The error of an answer with `status` and `body` (`{"error":{"code","message"}}`); `None`
    /// when the body is not that shape (a proxy's page, say).
    pub(crate) fn from_answer(status: u16, body: String) -> Option<ApiError> {
        #[derive(serde::Deserialize)]
        struct Envelope {
            error: Detail,
        }
        #[derive(serde::Deserialize)]
        struct Detail {
            code: String,
            message: String,
        }
        let Envelope { error } = serde_json::from_str(&body).ok()?;
        Some(ApiError {
            status,
            kind: ErrorKind::from_code(&error.code),
            code: error.code,
            message: error.message,
            body,
        })
    }

    /// The HTTP status.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The code as a kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The code as the node wrote it (useful when the kind is [`ErrorKind::Unknown`]).
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The message, for people.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The answer's body as it came (`{"error":{"code","message"}}`).
    pub fn body(&self) -> &str {
        &self.body
    }
}

/// Why a call failed. After retries, the error of the last attempt.
///
/// ```
/// use tessera_client::{Client, Error};
/// let error = Client::builder().build().unwrap_err();
/// assert!(matches!(error, Error::Config(_)));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The node answered with an error (see [`ApiError::kind`]).
    #[error(transparent)]
    Api(#[from] ApiError),
    /// No connection to the node could be made: the request was not sent.
    #[error("cannot reach {node}: {reason}")]
    Connect {
        /// The node's base URL.
        node: String,
        /// What the connection attempt said.
        reason: String,
    },
    /// The connection broke after the request was sent: the message may or may not have run.
    #[error(
        "the connection to {node} broke before the answer: {reason} (the message may have run)"
    )]
    Interrupted {
        /// The node's base URL.
        node: String,
        /// What the connection said.
        reason: String,
    },
    /// No answer within the request timeout: the message may or may not have run.
    #[error("no answer from {node} within {timeout:?} (the message may have run)")]
    TimedOut {
        /// The node's base URL.
        node: String,
        /// The timeout that passed.
        timeout: Duration,
    },
    /// The node answered an error status without an error body (not a Tessera node, or a
    /// proxy's answer).
    #[error("{node} answered {status}: {body}")]
    Protocol {
        /// The node's base URL.
        node: String,
        /// The HTTP status.
        status: u16,
        /// The body as it came.
        body: String,
    },
    /// The message could not be written as JSON.
    #[error("the message cannot be written as JSON: {0}")]
    Encode(#[source] serde_json::Error),
    /// The reply did not decode as the type asked for (the message ran).
    #[error("the reply does not decode: {0}")]
    Decode(#[source] serde_json::Error),
    /// The client was built with a bad setting.
    #[error("bad client setting: {0}")]
    Config(String),
}

impl Error {
    /// The API error kind, when a node answered with one.
    ///
    /// ```
    /// use tessera_client::Error;
    /// let error = Error::Config("no nodes".into());
    /// assert_eq!(error.kind(), None);
    /// ```
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Error::Api(error) => Some(error.kind()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_maps_both_ways() {
        for (code, kind) in CODES {
            assert_eq!(ErrorKind::from_code(code), *kind);
            assert_eq!(kind.code(), *code);
        }
    }

    /// Every code the API documents (the `Errors` tables of `docs/api.md`) has its own kind: a
    /// code added to the docs without a kind here fails this test.
    #[test]
    fn every_documented_code_has_a_kind() {
        let docs = include_str!("../../../docs/api.md");
        let errors = docs.split("\n## Errors").nth(1).expect("an Errors section");
        let errors = errors.split("\n## ").next().expect("the section's text");
        let mut codes = 0;
        for row in errors.lines().filter(|line| line.starts_with("| ")) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            if cells.len() < 3 || !cells[1].chars().all(|c| c.is_ascii_digit()) {
                continue;
            }
            for code in cells[2].split(',') {
                let code = code.trim().trim_matches('`');
                assert_ne!(ErrorKind::from_code(code), ErrorKind::Unknown, "{code}");
                codes += 1;
            }
        }
        assert!(codes > 30, "the tables were read ({codes} codes)");
    }

    #[test]
    fn error_bodies_are_read() {
        let body = r#"{"error":{"code":"rejected","message":"no funds"}}"#.to_string();
        let error = ApiError::from_answer(422, body.clone()).expect("an error body");
        assert_eq!(error.kind(), ErrorKind::Rejected);
        assert_eq!(error.message(), "no funds");
        assert_eq!(error.body(), body);
        assert!(ApiError::from_answer(502, "<html>".into()).is_none());
    }
}
