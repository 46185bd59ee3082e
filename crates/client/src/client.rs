//! [`Client`] and its [`ClientBuilder`]: the node addresses and token, and the calls an
//! application makes — ask, tell (with an idempotency key, or at most once), state, passivate —
//! each tried on one node after another under the [`Retry`] policy.

use crate::error::Error;
use crate::retry::{Repeat, Retry, should_retry};
use crate::transport::{Call, Transport};
use bytes::Bytes;
use hyper::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The longest idempotency key the API takes.
pub const IDEMPOTENCY_KEY_BYTES_MAX: usize = 128;

/// How much longer than an ask's own timeout one attempt waits for the answer: the node
/// answers `504 timeout` at the ask's deadline, and that answer must have time to arrive.
const ASK_ANSWER_MARGIN: Duration = Duration::from_secs(2);

/// Builds a [`Client`]: at least one node address and a tenant token.
///
/// ```
/// use std::time::Duration;
/// use tessera_client::{Client, Retry};
/// let client = Client::builder()
///     .nodes(["http://10.0.0.1:7070", "10.0.0.2:7070"])
///     .token("the tenant's token")
///     .request_timeout(Duration::from_secs(10))
///     .retry(Retry { attempts_max: 5, ..Retry::default() })
///     .build()?;
/// assert_eq!(client.nodes(), ["http://10.0.0.1:7070", "http://10.0.0.2:7070"]);
/// # Ok::<(), tessera_client::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    nodes: Vec<String>,
    token: Option<String>,
    retry: Retry,
    request_timeout: Duration,
    connect_timeout: Duration,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            nodes: Vec::new(),
            token: None,
            retry: Retry::default(),
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(2),
        }
    }
}

impl ClientBuilder {
    /// Adds a node's API address (`http://host:port`, or `host:port`).
    pub fn node(mut self, url: impl Into<String>) -> Self {
        self.nodes.push(url.into());
        self
    }

    /// Adds several node addresses; a call that cannot be served by one goes on to the next.
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.nodes.extend(urls.into_iter().map(Into::into));
        self
    }

    /// The tenant token (`POST /v1/tenants` answers it once). Every address is inside its
    /// tenant.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The retry policy (default [`Retry::default`]; [`Retry::never`] for one attempt).
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// How long one attempt may take, answer included (default 30 s); an ask given its own
    /// timeout waits that long plus a margin for the node's answer.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long a connection attempt to one node may take (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The client; [`Error::Config`] without a node or a token, for an address that is not
    /// `http`, or for a zero timeout or attempt count.
    pub fn build(self) -> Result<Client, Error> {
        if self.nodes.is_empty() {
            return Err(Error::Config("no node address: add one with `node`".into()));
        }
        let token = self
            .token
            .ok_or_else(|| Error::Config("no token: set one with `token`".into()))?;
        if self.retry.attempts_max == 0 {
            return Err(Error::Config(
                "retry.attempts_max must be at least 1".into(),
            ));
        }
        if self.request_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::Config("timeouts must be above zero".into()));
        }
        let nodes = self
            .nodes
            .iter()
            .map(|url| base_url(url))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Client {
            inner: Arc::new(Inner {
                transport: Transport::new(&token, self.connect_timeout)?,
                nodes,
                preferred: AtomicUsize::new(0),
                retry: self.retry,
                request_timeout: self.request_timeout,
            }),
        })
    }
}

/// `http://host:port` without a trailing slash, from what a user wrote.
fn base_url(url: &str) -> Result<String, Error> {
    let trimmed = url.trim();
    let rest = match trimmed.split_once("://") {
        None => trimmed,
        Some(("http", rest)) => rest,
        Some((scheme, _)) => {
            return Err(Error::Config(format!(
                "{url:?}: the API is plain http (put TLS in a proxy in front), not {scheme}"
            )));
        }
    };
    let rest = rest.trim_end_matches('/');
    let base = format!("http://{rest}");
    let parsed = base
        .parse::<hyper::Uri>()
        .map_err(|error| Error::Config(format!("{url:?} is not a node address: {error}")))?;
    if rest.is_empty() || parsed.path() != "/" {
        return Err(Error::Config(format!(
            "{url:?} is not a node address: write http://host:port"
        )));
    }
    Ok(base)
}

/// A client of one tenant over one or more nodes. Cheap to clone; clones share connections.
///
/// ```no_run
/// # async fn example() -> Result<(), tessera_client::Error> {
/// use serde::{Deserialize, Serialize};
/// use tessera_client::Client;
///
/// #[derive(Serialize)]
/// enum Counter { Add(i64), Get }
///
/// let client = Client::builder()
///     .nodes(["http://127.0.0.1:7070", "http://127.0.0.1:7071"])
///     .token(std::env::var("TESSERA_TOKEN").unwrap_or_default())
///     .build()?;
/// let value: i64 = client.ask("counter", "c1", &Counter::Add(1)).await?;
/// client.tell("counter", "c1", &Counter::Add(1)).await?; // runs once, even if retried
/// let now: i64 = client.ask("counter", "c1", &Counter::Get).await?;
/// assert!(now >= value + 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    transport: Transport,
    nodes: Vec<String>,
    /// The node the last successful call went to: the next call starts there.
    preferred: AtomicUsize,
    retry: Retry,
    request_timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("nodes", &self.inner.nodes)
            .field("retry", &self.inner.retry)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A builder; see [`ClientBuilder`].
    ///
    /// ```
    /// let client = tessera_client::Client::builder().node("127.0.0.1:7070").token("t").build();
    /// assert!(client.is_ok());
    /// ```
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The node base URLs, in the order they are tried.
    ///
    /// ```
    /// let client = tessera_client::Client::builder().node("127.0.0.1:7070/").token("t").build()?;
    /// assert_eq!(client.nodes(), ["http://127.0.0.1:7070"]);
    /// # Ok::<(), tessera_client::Error>(())
    /// ```
    pub fn nodes(&self) -> &[String] {
        &self.inner.nodes
    }

    /// Sends `message` to entity `entity_type/id` and decodes its reply as `R`, waiting the
    /// node's default ask timeout (`api.ask_timeout_ms_default`, 5 s). Retried only while the
    /// message was certainly not taken (no connection, a `503`): an ask is never run twice by
    /// the client. A broken connection or a missing answer is [`Error::Interrupted`] or
    /// [`Error::TimedOut`]: the message may have run.
    ///
    /// ```no_run
    /// # async fn example(client: tessera_client::Client) -> Result<(), tessera_client::Error> {
    /// let value: i64 = client.ask("counter", "c1", &serde_json::json!({"Add": 1})).await?;
    /// # Ok(()) }
    /// ```
    pub async fn ask<M, R>(&self, entity_type: &str, id: &str, message: &M) -> Result<R, Error>
    where
        M: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let call = Call {
            method: Method::POST,
            path: format!("{}/ask", entity_path(entity_type, id)),
            body: Some(encode(message)?),
            idempotency_key: None,
            timeout: self.inner.request_timeout,
        };
        decode(&self.call(&call, Repeat::Unsafe).await?)
    }

    /// [`Client::ask`] with the ask's own `timeout` (the node answers `504 timeout` after it;
    /// at most `api.ask_timeout_ms_max`, 60 s by default).
    ///
    /// ```no_run
    /// # async fn example(client: tessera_client::Client) -> Result<(), tessera_client::Error> {
    /// use std::time::Duration;
    /// let value: i64 = client.ask_within("counter", "c1", &"Get", Duration::from_millis(500)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn ask_within<M, R>(
        &self,
        entity_type: &str,
        id: &str,
        message: &M,
        timeout: Duration,
    ) -> Result<R, Error>
    where
        M: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let timeout_ms = timeout.as_millis().max(1);
        let call = Call {
            method: Method::POST,
            path: format!(
                "{}/ask?timeout_ms={timeout_ms}",
                entity_path(entity_type, id)
            ),
            body: Some(encode(message)?),
            idempotency_key: None,
            timeout: timeout.saturating_add(ASK_ANSWER_MARGIN),
        };
        decode(&self.call(&call, Repeat::Unsafe).await?)
    }

    /// Tells `message` to entity `entity_type/id` with a fresh idempotency key, and returns
    /// once the entity has committed it. Every retry carries the same key, so however often
    /// the request is sent the entity runs it once. An error of the message itself (the
    /// entity rejected it, trapped) is returned.
    ///
    /// ```no_run
    /// # async fn example(client: tessera_client::Client) -> Result<(), tessera_client::Error> {
    /// client.tell("counter", "c1", &serde_json::json!({"Add": 1})).await?;
    /// # Ok(()) }
    /// ```
    pub async fn tell<M>(&self, entity_type: &str, id: &str, message: &M) -> Result<(), Error>
    where
        M: Serialize + ?Sized,
    {
        let key = new_idempotency_key();
        self.tell_with_key(entity_type, id, message, &key).await
    }

    /// [`Client::tell`] with the application's own key (1 to 128 printable ASCII characters):
    /// the way to run a message once across restarts of the application itself (a key derived
    /// from an order id, say). The node keeps keys for 24 h.
    ///
    /// ```no_run
    /// # async fn example(client: tessera_client::Client) -> Result<(), tessera_client::Error> {
    /// let message = serde_json::json!({"Deposit": 100});
    /// client.tell_with_key("bank-account", "a", &message, "order-1789").await?;
    /// client.tell_with_key("bank-account", "a", &message, "order-1789").await?; // not run again
    /// # Ok(()) }
    /// ```
    pub async fn tell_with_key<M>(
        &self,
        entity_type: &str,
        id: &str,
        message: &M,
        key: &str,
    ) -> Result<(), Error>
    where
        M: Serialize + ?Sized,
    {
        if key.is_empty()
            || key.len() > IDEMPOTENCY_KEY_BYTES_MAX
            || !key.bytes().all(|byte| byte.is_ascii_graphic())
        {
            return Err(Error::Config(format!(
                "an idempotency key is 1 to {IDEMPOTENCY_KEY_BYTES_MAX} printable ASCII characters"
            )));
        }
        let call = Call {
            method: Method::POST,
            path: format!("{}/tell", entity_path(entity_type, id)),
            body: Some(encode(message)?),
            idempotency_key: Some(key.to_string()),
            timeout: self.inner.request_timeout,
        };
        self.call(&call, Repeat::Safe).await.map(drop)
    }

    /// Tells `message` without an idempotency key: answered once the node has taken it (in
    /// the entity's mailbox, buffered or forwarded), before it runs; at most once. Retried only
    /// while it was certainly not taken.
    ///
    /// ```no_run
    /// # async fn example(client: tessera_client::Client) -> Result<(), tessera_client::Error> {
    /// client.tell_at_most_once("counter", "c1", &serde_json::json!({"Add": 1})).await?;
    /// # Ok(()) }
    /// ```
    pub async fn tell_at_most_once<M>(
        &self,
        entity_type: &str,
        id: &str,
        message: &M,
    ) -> Result<(), Error>
    where
        M: Serialize + ?Sized,
    {
        let call = Call {
            method: Method::POST,
            path: format!("{}/tell", entity_path(entity_type, id)),
            body: Some(encode(message)?),
            idempotency_key: None,
            timeout: self.inner.request_timeout,
        };
        self.call(&call, Repeat::Unsafe).await.map(drop)
    }

    /// The entity's committed state, read on the node that owns its shard.
    ///
    /// ```no_run
    /// # async fn example(client: tessera_client::Client) -> Result<(), tessera_client::Error> {
    /// let state = client.state("counter", "c1").await?;
    /// for entry in &state.entries {
    ///     println!("{} = {:?}", entry.key, entry.value);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn state(&self, entity_type: &str, id: &str) -> Result<crate::EntityState, Error> {
        let call = Call {
            method: Method::GET,
            path: format!("{}/state", entity_path(entity_type, id)),
            body: None,
            idempotency_key: None,
            timeout: self.inner.request_timeout,
        };
        decode(&self.call(&call, Repeat::Safe).await?)
    }

    /// Asks the entity to stop after the messages it has queued (its state stays).
    ///
    /// ```no_run
    /// # async fn example(client: tessera_client::Client) -> Result<(), tessera_client::Error> {
    /// client.passivate("counter", "c1").await?;
    /// # Ok(()) }
    /// ```
    pub async fn passivate(&self, entity_type: &str, id: &str) -> Result<(), Error> {
        let call = Call {
            method: Method::POST,
            path: format!("{}/passivate", entity_path(entity_type, id)),
            body: None,
            idempotency_key: None,
            timeout: self.inner.request_timeout,
        };
        self.call(&call, Repeat::Safe).await.map(drop)
    }

    /// Sends `call`, starting at the preferred node and moving to the next after each
    /// retryable failure, until it is answered, fails for good, or the policy is spent.
    async fn call(&self, call: &Call, repeat: Repeat) -> Result<Bytes, Error> {
        let inner = &self.inner;
        let started = Instant::now();
        let mut node = inner.preferred.load(Ordering::Relaxed) % inner.nodes.len();
        let mut attempt = 1;
        loop {
            let error = match inner.transport.send(&inner.nodes[node], call).await {
                Ok(body) => {
                    inner.preferred.store(node, Ordering::Relaxed);
                    return Ok(body);
                }
                Err(error) => error,
            };
            let wait = inner.retry.backoff(attempt);
            let spent = attempt >= inner.retry.attempts_max
                || started.elapsed() + wait > inner.retry.elapsed_max;
            if spent || !should_retry(&error, repeat) {
                return Err(error);
            }
            node = (node + 1) % inner.nodes.len();
            attempt += 1;
            tokio::time::sleep(wait).await;
        }
    }
}

/// A fresh idempotency key: 128 random bits in hex, with a prefix that says who made it.
///
/// ```
/// let key = tessera_client::new_idempotency_key();
/// assert!(key.starts_with("tc-") && key.len() == 35);
/// assert_ne!(key, tessera_client::new_idempotency_key());
/// ```
pub fn new_idempotency_key() -> String {
    format!("tc-{:032x}", rand::random::<u128>())
}

/// The API path of entity `entity_type/id`, each segment percent-encoded.
fn entity_path(entity_type: &str, id: &str) -> String {
    format!("/v1/entities/{}/{}", segment(entity_type), segment(id))
}

/// Percent-encodes one path segment (entity ids may hold any character).
///
/// ```
/// assert_eq!(tessera_client::segment("a/b c"), "a%2Fb%20c");
/// ```
pub fn segment(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

fn encode<M: Serialize + ?Sized>(message: &M) -> Result<Bytes, Error> {
    serde_json::to_vec(message)
        .map(Bytes::from)
        .map_err(Error::Encode)
}

fn decode<R: DeserializeOwned>(body: &[u8]) -> Result<R, Error> {
    serde_json::from_slice(body).map_err(Error::Decode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_become_base_urls() {
        assert_eq!(base_url("127.0.0.1:7070").unwrap(), "http://127.0.0.1:7070");
        assert_eq!(base_url("http://n1:7070/").unwrap(), "http://n1:7070");
        assert!(matches!(base_url("https://n1"), Err(Error::Config(_))));
        assert!(matches!(base_url("http://"), Err(Error::Config(_))));
    }

    #[test]
    fn keys_are_checked_before_anything_is_sent() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let client = Client::builder()
            .node("127.0.0.1:1")
            .token("t")
            .build()
            .expect("a client");
        for key in ["", "has space", &"k".repeat(129)] {
            let told = runtime.block_on(client.tell_with_key("counter", "c", &"Get", key));
            assert!(matches!(told, Err(Error::Config(_))), "{key:?}");
        }
    }

    #[test]
    fn entity_paths_are_encoded() {
        assert_eq!(entity_path("counter", "a/b"), "/v1/entities/counter/a%2Fb");
    }
}
