//! Request bodies, read once by the edge middleware under a byte limit and handed to handlers
//! as [`RequestBody`], and the JSON / MessagePack negotiation of message bodies and replies —
//! transcoded in one pass by [`tessera_codec`], never through a tree.

use super::error::ApiError;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use std::pin::Pin;
use std::time::Duration;
use tessera_codec::{self as codec, CodecError};

/// The media type of MessagePack bodies.
pub const MSGPACK: &str = "application/msgpack";

/// The form media type, which curl's `-d` sends by default: refused for messages, with a hint.
const FORM: &str = "application/x-www-form-urlencoded";

/// Capacity reserved up front for a body, whatever length it declares: a client cannot make
/// the node allocate by announcing a large body it never sends.
pub const BODY_RESERVE_BYTES_MAX: usize = 64 * 1024;

/// A request's body as the edge middleware read it (empty when there was none).
#[derive(Clone, Debug, Default)]
pub struct RequestBody(pub Bytes);

impl<S: Send + Sync> FromRequestParts<S> for RequestBody {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Ok(parts
            .extensions
            .get::<RequestBody>()
            .cloned()
            .unwrap_or_default())
    }
}

/// Reads `body` into memory, refusing with 413 as soon as it passes `limit` bytes (a declared
/// `Content-Length` over the limit is refused before anything is read), and with
/// `408 request_timeout` if the whole body has not arrived within `timeout`.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    tokio::time::timeout(timeout, read_within_limit(headers, body, limit))
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!("the body did not arrive within {} ms", timeout.as_millis()),
            ))
        })
}

async fn read_within_limit(
    headers: &HeaderMap,
    mut body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(over_limit(limit));
    }
    let reserve = declared.unwrap_or(0).min(BODY_RESERVE_BYTES_MAX as u64) as usize;
    let mut bytes = Vec::with_capacity(reserve);
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        let Some(frame) = frame else {
            debug_assert!(
                bytes.len() <= limit,
                "a body is refused once past its limit"
            );
            return Ok(Bytes::from(bytes));
        };
        let frame = frame.map_err(|error| {
            ApiError::bad_request("bad_body", format!("the body could not be read: {error}"))
        })?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > limit {
                return Err(over_limit(limit));
            }
            if bytes.is_empty() && data.len() >= reserve {
                // The common case: one frame holds the whole body; keep it without a copy.
                bytes = Vec::from(data);
            } else {
                bytes.extend_from_slice(&data);
            }
        }
    }
}

fn over_limit(limit: usize) -> ApiError {
    ApiError::too_large(format!("the body is over the limit of {limit} bytes"))
}

/// Whether the request says its body is MessagePack.
pub fn is_msgpack(headers: &HeaderMap) -> bool {
    media_type(headers, header::CONTENT_TYPE).is_some_and(|media| media == MSGPACK)
}

/// Whether the client asks for MessagePack replies.
pub fn wants_msgpack(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|accept| {
            accept
                .split(',')
                .any(|media| media.split(';').next().unwrap_or("").trim() == MSGPACK)
        })
}

/// The media type (without parameters, lower case) of header `name`.
pub fn media_type(headers: &HeaderMap, name: header::HeaderName) -> Option<String> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(|value| {
            value
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
}

/// Parses a JSON body into `T`: a syntax error or a wrong shape is a 400 `malformed_body`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|error| ApiError::bad_request("malformed_body", format!("bad JSON body: {error}")))
}

/// The MessagePack payload of a message body: checked and passed through when it is
/// MessagePack, transcoded when it is JSON.
pub fn message_payload(headers: &HeaderMap, bytes: &Bytes) -> Result<Vec<u8>, ApiError> {
    if is_msgpack(headers) {
        codec::validate_msgpack(bytes).map_err(|error| {
            ApiError::bad_request("malformed_body", format!("bad MessagePack body: {error}"))
        })?;
        return Ok(Vec::from(bytes.clone()));
    }
    match media_type(headers, header::CONTENT_TYPE).as_deref() {
        None | Some("application/json") => {}
        Some(other) => {
            // curl's `-d` sends a form type unless told otherwise: say how to fix it.
            let hint = if other == FORM {
                " (curl -d sends that: add -H 'content-type: application/json')"
            } else {
                ""
            };
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("message bodies are application/json or {MSGPACK}, not {other}{hint}"),
            ));
        }
    }
    codec::json_to_msgpack(bytes)
        .map_err(|error| ApiError::bad_request("malformed_body", format!("bad JSON body: {error}")))
}

/// An entity's reply in the form the client asked for: the MessagePack bytes as they are, or
/// JSON (a reply with no JSON form is a 406 that suggests asking for MessagePack).
pub fn reply_response(headers: &HeaderMap, reply: Vec<u8>) -> Result<Response, ApiError> {
    if wants_msgpack(headers) {
        return Ok(([(header::CONTENT_TYPE, MSGPACK)], reply).into_response());
    }
    let json = codec::msgpack_to_json(&reply).map_err(|error| no_json_form(&error))?;
    let mut response = Body::from(json).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

fn no_json_form(error: &CodecError) -> ApiError {
    if error.is_no_json_form() {
        ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            "no_json_form",
            format!("the reply has no JSON form ({error}); ask with `Accept: {MSGPACK}`"),
        )
    } else {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "bad_reply",
            format!("the entity replied with bytes that are not MessagePack: {error}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bodies_over_the_limit_are_refused() {
        let headers = HeaderMap::new();
        let body = Body::from(vec![0u8; 11]);
        let error = read_limited(&headers, body, 10, SECOND).await.unwrap_err();
        assert_eq!(error.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let body = Body::from(vec![0u8; 10]);
        let bytes = read_limited(&headers, body, 10, SECOND).await.unwrap();
        assert_eq!(bytes.len(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn bodies_that_stall_are_refused() {
        let headers = HeaderMap::new();
        let stalled = stalled_body();
        let error = read_limited(&headers, stalled, 10, SECOND)
            .await
            .unwrap_err();
        assert_eq!(error.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(error.code(), "request_timeout");
    }

    const SECOND: Duration = Duration::from_secs(1);

    /// A body whose first frame never comes.
    fn stalled_body() -> Body {
        struct Stalled;
        impl HttpBody for Stalled {
            type Data = Bytes;
            type Error = std::convert::Infallible;
            fn poll_frame(
                self: Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>>
            {
                std::task::Poll::Pending
            }
        }
        Body::new(Stalled)
    }

    #[test]
    fn accept_lists_are_understood() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, application/msgpack;q=0.9"),
        );
        assert!(wants_msgpack(&headers));
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert!(!wants_msgpack(&headers));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn config() -> ProptestConfig {
            ProptestConfig {
                cases: 256,
                failure_persistence: None,
                ..ProptestConfig::default()
            }
        }

        fn content_type() -> impl Strategy<Value = Option<String>> {
            prop_oneof![
                Just(None),
                Just(Some("application/json".to_string())),
                Just(Some("application/msgpack".to_string())),
                Just(Some("application/json; charset=utf-8".to_string())),
                "[ -~]{0,40}".prop_map(Some),
            ]
        }

        proptest! {
            #![proptest_config(config())]

            /// Any body under any content type is either taken as exactly one well-formed
            /// MessagePack value or refused with a 4xx: never a panic, never a 5xx.
            #[test]
            fn any_message_body_is_taken_whole_or_refused(
                content_type in content_type(),
                body in proptest::collection::vec(any::<u8>(), 0..256),
            ) {
                let mut headers = HeaderMap::new();
                if let Some(value) = content_type
                    .and_then(|value| header::HeaderValue::from_str(&value).ok())
                {
                    headers.insert(header::CONTENT_TYPE, value);
                }
                match message_payload(&headers, &Bytes::from(body)) {
                    Ok(payload) => prop_assert!(codec::validate_msgpack(&payload).is_ok()),
                    Err(error) => prop_assert!(error.status().is_client_error(), "{}", error.status()),
                }
            }

            /// A declared length is never trusted for allocation: any `Content-Length` header,
            /// true or not, gives the body read under the limit or a 4xx.
            #[test]
            fn any_declared_length_is_read_under_the_limit_or_refused(
                declared in "[0-9]{0,25}|[ -~]{0,12}",
                body in proptest::collection::vec(any::<u8>(), 0..64),
            ) {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                let mut headers = HeaderMap::new();
                if let Ok(value) = header::HeaderValue::from_str(&declared) {
                    headers.insert(header::CONTENT_LENGTH, value);
                }
                let length = body.len();
                let read = runtime.block_on(read_limited(&headers, Body::from(body), 32, SECOND));
                match read {
                    Ok(bytes) => prop_assert!(bytes.len() == length && length <= 32),
                    Err(error) => prop_assert!(error.status().is_client_error(), "{}", error.status()),
                }
            }
        }
    }
}
