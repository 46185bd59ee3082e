//! One HTTP attempt against one node: hyper-util's pooled HTTP/1 client (keep-alive
//! connections per node), the headers every call carries, a timeout over the whole exchange
//! and a bound on the answer read. It sorts failures into the [`Error`] kinds the retry
//! classification reads: no connection, a broken exchange, no answer in time, an error answer.

use crate::error::{ApiError, Error};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client as Pool;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// The largest answer read: an entity's state may be up to 32 MiB of keys and values, and its
/// JSON form larger; past this the answer is refused rather than buffered.
pub(crate) const ANSWER_BYTES_MAX: usize = 64 << 20;

/// Idle keep-alive connections kept per node, so a burst does not leave hundreds open.
const IDLE_CONNECTIONS_PER_NODE_MAX: usize = 32;

/// The header that makes a tell run at most once per key.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// One request, as it is sent again on each attempt.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) method: Method,
    /// The path and query, e.g. `/v1/entities/counter/c1/ask?timeout_ms=500`.
    pub(crate) path: String,
    /// A JSON body, if any.
    pub(crate) body: Option<Bytes>,
    /// The idempotency key, the same on every attempt.
    pub(crate) idempotency_key: Option<String>,
    /// How long one attempt may take, answer included.
    pub(crate) timeout: Duration,
}

/// The pooled connections to every node, and the token they send.
#[derive(Clone)]
pub(crate) struct Transport {
    pool: Pool<HttpConnector, Full<Bytes>>,
    authorization: HeaderValue,
}

impl Transport {
    /// A transport sending `token`, connecting within `connect_timeout`.
    pub(crate) fn new(token: &str, connect_timeout: Duration) -> Result<Transport, Error> {
        let mut authorization = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Error::Config("the token holds characters a header cannot".into()))?;
        authorization.set_sensitive(true);
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        let pool = Pool::builder(TokioExecutor::new())
            .pool_max_idle_per_host(IDLE_CONNECTIONS_PER_NODE_MAX)
            .build(connector);
        Ok(Transport {
            pool,
            authorization,
        })
    }

    /// Sends `call` to the node at `base` (`http://host:port`) once: the answer's body when
    /// its status is a success.
    pub(crate) async fn send(&self, base: &str, call: &Call) -> Result<Bytes, Error> {
        let request = self.request(base, call)?;
        let exchange = async {
            let response = self.pool.request(request).await.map_err(|error| {
                let reason = error_chain(&error);
                if error.is_connect() {
                    Error::Connect {
                        node: base.to_string(),
                        reason,
                    }
                } else {
                    Error::Interrupted {
                        node: base.to_string(),
                        reason,
                    }
                }
            })?;
            let status = response.status().as_u16();
            let body = Limited::new(response.into_body(), ANSWER_BYTES_MAX)
                .collect()
                .await
                .map_err(|error| Error::Interrupted {
                    node: base.to_string(),
                    reason: format!("reading the answer: {error}"),
                })?
                .to_bytes();
            Ok::<_, Error>((status, body))
        };
        let (status, body) = tokio::time::timeout(call.timeout, exchange)
            .await
            .map_err(|_| Error::TimedOut {
                node: base.to_string(),
                timeout: call.timeout,
            })??;
        if status < 400 {
            return Ok(body);
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        Err(match ApiError::from_answer(status, text.clone()) {
            Some(refusal) => Error::Api(refusal),
            None => Error::Protocol {
                node: base.to_string(),
                status,
                body: text,
            },
        })
    }

    fn request(&self, base: &str, call: &Call) -> Result<Request<Full<Bytes>>, Error> {
        let mut request = Request::builder()
            .method(call.method.clone())
            .uri(format!("{base}{}", call.path))
            .header(AUTHORIZATION, self.authorization.clone())
            .header(ACCEPT, "application/json");
        if call.body.is_some() {
            request = request.header(CONTENT_TYPE, "application/json");
        }
        if let Some(key) = &call.idempotency_key {
            request = request.header(IDEMPOTENCY_KEY, key);
        }
        request
            .body(Full::new(call.body.clone().unwrap_or_default()))
            .map_err(|error| Error::Config(format!("a request to {base} cannot be built: {error}")))
    }
}

/// An error and its sources on one line: hyper's own message is often only "client error".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
