//! The test server, its HTTP client and the helpers every API test uses.

pub(crate) use serde_json::{Value as Json, json};
pub(crate) use std::collections::HashMap;
pub(crate) use std::path::Path;
pub(crate) use std::sync::Arc;
pub(crate) use std::time::{Duration, Instant};
pub(crate) use tessera_contract::EntityAddress;
pub(crate) use tessera_host::api;
pub(crate) use tessera_host::node::{Node, NodeConfig};
pub(crate) use tessera_metadata::TypeOptions;
pub(crate) use tessera_tests::{BANK_ACCOUNT, COUNTER, HUGE_REPLY, MEMORY_HOG, SPIN_FOREVER};
pub(crate) use tessera_tests::{from_msgpack as msgpack_to_json, to_msgpack as json_to_msgpack};
pub(crate) use tokio::sync::oneshot;

pub(crate) const ADMIN: &str = "admin-token-for-the-api-tests";

/// A core wasm module: valid wasm, but not a component.
pub(crate) const CORE_MODULE: &[u8] = b"\0asm\x01\0\0\0";

/// A valid but empty component: it exports no entity.
pub(crate) const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";

pub(crate) fn config(data_dir: &Path) -> NodeConfig {
    tessera_tests::node_config(data_dir, ADMIN, 500)
}

/// A node serving the API on a loopback port.
pub(crate) struct Server {
    pub(crate) node: Arc<Node>,
    pub(crate) http: Http,
    pub(crate) stop: Option<oneshot::Sender<()>>,
    pub(crate) served: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    pub(crate) _dir: tempfile::TempDir,
}

impl Server {
    pub(crate) async fn start() -> Server {
        Self::start_with(|_| {}).await
    }

    pub(crate) async fn start_with(tweak: impl FnOnce(&mut NodeConfig)) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path());
        tweak(&mut config);
        let node = Node::open(config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(api::serve(node.clone(), listener, async move {
            let _ = stopped.await;
        }));
        Server {
            node,
            http: Http::new(base),
            stop: Some(stop),
            served: Some(served),
            _dir: dir,
        }
    }

    /// Creates a tenant (with `quotas`, if any) and returns its token.
    pub(crate) async fn tenant(&self, name: &str, quotas: Option<Json>) -> String {
        let mut body = json!({ "name": name });
        if let Some(quotas) = quotas {
            body["quotas"] = quotas;
        }
        let response = self.http.post_json("/v1/tenants", Some(ADMIN), &body).await;
        assert_eq!(response.status, 201, "{}", response.text());
        response.json()["token"].as_str().unwrap().to_string()
    }

    /// Deploys `plugin` as `entity_type` for the tenant of `token`; returns the new version.
    pub(crate) async fn deploy(
        &self,
        token: &str,
        entity_type: &str,
        plugin: &str,
        query: &str,
    ) -> u64 {
        let bytes = std::fs::read(plugin).unwrap();
        let path = format!("/v1/types/{entity_type}/versions{query}");
        let response = self
            .http
            .send(
                "POST",
                &path,
                Some(token),
                Some(("application/wasm", bytes)),
                None,
            )
            .await;
        assert_eq!(response.status, 201, "{}", response.text());
        response.json()["version"].as_u64().unwrap()
    }

    pub(crate) async fn ask(&self, token: &str, entity: &str, message: Json) -> Response {
        let path = format!("/v1/entities/{entity}/ask");
        self.http.post_json(&path, Some(token), &message).await
    }

    /// Asks and decodes the answer's JSON body (success or error alike).
    pub(crate) async fn ask_json(&self, token: &str, entity: &str, message: Json) -> Json {
        self.ask(token, entity, message).await.json()
    }

    pub(crate) async fn state(&self, token: &str, entity: &str) -> Json {
        let response = self
            .http
            .get(&format!("/v1/entities/{entity}/state"), Some(token))
            .await;
        assert_eq!(response.status, 200, "{}", response.text());
        response.json()["entries"].clone()
    }

    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            served.await.unwrap().unwrap();
        }
        self.node.shutdown().await;
    }
}

/// One HTTP answer.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) content_type: String,
    pub(crate) bytes: Vec<u8>,
}

impl Response {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    pub(crate) fn json(&self) -> Json {
        serde_json::from_slice(&self.bytes)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.text()))
    }

    /// Asserts the answer is an API error with `status` and `code`.
    #[track_caller]
    pub(crate) fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{}", self.text());
        let json = self.json();
        assert_eq!(json["error"]["code"], json!(code), "{json}");
        assert!(
            json["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{json}"
        );
    }
}

/// A blocking ureq agent driven from blocking threads.
#[derive(Clone)]
pub(crate) struct Http {
    pub(crate) agent: ureq::Agent,
    pub(crate) base: String,
}

impl Http {
    pub(crate) fn new(base: String) -> Http {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Http { agent, base }
    }

    pub(crate) async fn get(&self, path: &str, token: Option<&str>) -> Response {
        self.send("GET", path, token, None, None).await
    }

    pub(crate) async fn post_json(&self, path: &str, token: Option<&str>, body: &Json) -> Response {
        let bytes = serde_json::to_vec(body).unwrap();
        self.send("POST", path, token, Some(("application/json", bytes)), None)
            .await
    }

    pub(crate) async fn put_json(&self, path: &str, token: Option<&str>, body: &Json) -> Response {
        let bytes = serde_json::to_vec(body).unwrap();
        self.send("PUT", path, token, Some(("application/json", bytes)), None)
            .await
    }

    /// Sends a request head (and no body) over a fresh connection and returns everything the
    /// server answers before it closes: how to see an early refusal of a large declared body.
    pub(crate) async fn raw_head(&self, head: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let address = self.base.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let mut buffer = [0u8; 4096];
        let deadline = Duration::from_secs(10);
        while !answer.ends_with(b"}}") {
            let read = tokio::time::timeout(deadline, stream.read(&mut buffer))
                .await
                .expect("the server answers a too-large declared body without reading it")
                .unwrap();
            if read == 0 {
                break;
            }
            answer.extend_from_slice(&buffer[..read]);
        }
        String::from_utf8_lossy(&answer).into_owned()
    }

    /// POSTs JSON with extra request headers.
    pub(crate) async fn post_json_with(
        &self,
        path: &str,
        token: Option<&str>,
        body: &Json,
        headers: &[(&str, &str)],
    ) -> Response {
        let bytes = serde_json::to_vec(body).unwrap();
        let body = Some(("application/json", bytes));
        self.send_with("POST", path, token, body, None, headers)
            .await
    }

    pub(crate) async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<(&str, Vec<u8>)>,
        accept: Option<&str>,
    ) -> Response {
        self.send_with(method, path, token, body, accept, &[]).await
    }

    pub(crate) async fn send_with(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<(&str, Vec<u8>)>,
        accept: Option<&str>,
        headers: &[(&str, &str)],
    ) -> Response {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect();
        let agent = self.agent.clone();
        let url = format!("{}{path}", self.base);
        let method = method.to_string();
        let token = token.map(str::to_string);
        let body = body.map(|(content_type, bytes)| (content_type.to_string(), bytes));
        let accept = accept.map(str::to_string);
        tokio::task::spawn_blocking(move || {
            let mut request = ureq::http::Request::builder()
                .method(method.as_str())
                .uri(&url);
            if let Some(token) = token {
                request = request.header("authorization", format!("Bearer {token}"));
            }
            if let Some(accept) = accept {
                request = request.header("accept", accept);
            }
            for (name, value) in headers {
                request = request.header(name, value);
            }
            let bytes = match body {
                Some((content_type, bytes)) => {
                    request = request.header("content-type", content_type);
                    bytes
                }
                None => Vec::new(),
            };
            let mut response = agent.run(request.body(bytes).unwrap()).unwrap();
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|value| value.to_str().ok())
                .unwrap_or("")
                .to_string();
            let bytes = response
                .body_mut()
                .with_config()
                .limit(64 << 20)
                .read_to_vec()
                .unwrap();
            Response {
                status: response.status().as_u16(),
                content_type,
                bytes,
            }
        })
        .await
        .unwrap()
    }
}

/// Polls `check` until it holds, failing after 10 s.
pub(crate) async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
