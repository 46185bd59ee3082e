//! The HTTP API seen from a client: a real node serving on a loopback port, a real HTTP client
//! (ureq on blocking threads). Every endpoint, every bad input, every tenant quota, a hot
//! deploy under load, and a restart of a node with remembered entities.

use serde_json::{Value as Json, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_host::api;
use tessera_host::api::codec::{json_to_msgpack, msgpack_to_json};
use tessera_host::envelope::EntityAddress;
use tessera_host::metadata::TypeOptions;
use tessera_host::node::{Node, NodeConfig};
use tessera_tests::{BANK_ACCOUNT, COUNTER, HUGE_REPLY, MEMORY_HOG, SPIN_FOREVER};
use tokio::sync::oneshot;

const ADMIN: &str = "admin-token-for-the-api-tests";

/// A core wasm module: valid wasm, but not a component.
const CORE_MODULE: &[u8] = b"\0asm\x01\0\0\0";

/// A valid but empty component: it exports no entity.
const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\x00\x01\x00";

fn config(data_dir: &Path) -> NodeConfig {
    tessera_tests::node_config(data_dir, ADMIN, 500)
}

/// A node serving the API on a loopback port.
struct Server {
    node: Arc<Node>,
    http: Http,
    stop: Option<oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start() -> Server {
        Self::start_with(|_| {}).await
    }

    async fn start_with(tweak: impl FnOnce(&mut NodeConfig)) -> Server {
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
    async fn tenant(&self, name: &str, quotas: Option<Json>) -> String {
        let mut body = json!({ "name": name });
        if let Some(quotas) = quotas {
            body["quotas"] = quotas;
        }
        let response = self.http.post_json("/v1/tenants", Some(ADMIN), &body).await;
        assert_eq!(response.status, 201, "{}", response.text());
        response.json()["token"].as_str().unwrap().to_string()
    }

    /// Deploys `plugin` as `entity_type` for the tenant of `token`; returns the new version.
    async fn deploy(&self, token: &str, entity_type: &str, plugin: &str, query: &str) -> u64 {
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

    async fn ask(&self, token: &str, entity: &str, message: Json) -> Response {
        let path = format!("/v1/entities/{entity}/ask");
        self.http.post_json(&path, Some(token), &message).await
    }

    /// Asks and decodes the answer's JSON body (success or error alike).
    async fn ask_json(&self, token: &str, entity: &str, message: Json) -> Json {
        self.ask(token, entity, message).await.json()
    }

    async fn state(&self, token: &str, entity: &str) -> Json {
        let response = self
            .http
            .get(&format!("/v1/entities/{entity}/state"), Some(token))
            .await;
        assert_eq!(response.status, 200, "{}", response.text());
        response.json()["entries"].clone()
    }

    async fn stop(mut self) {
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
struct Response {
    status: u16,
    content_type: String,
    bytes: Vec<u8>,
}

impl Response {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    fn json(&self) -> Json {
        serde_json::from_slice(&self.bytes)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.text()))
    }

    /// Asserts the answer is an API error with `status` and `code`.
    #[track_caller]
    fn assert_error(&self, status: u16, code: &str) {
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
struct Http {
    agent: ureq::Agent,
    base: String,
}

impl Http {
    fn new(base: String) -> Http {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Http { agent, base }
    }

    async fn get(&self, path: &str, token: Option<&str>) -> Response {
        self.send("GET", path, token, None, None).await
    }

    async fn post_json(&self, path: &str, token: Option<&str>, body: &Json) -> Response {
        let bytes = serde_json::to_vec(body).unwrap();
        self.send("POST", path, token, Some(("application/json", bytes)), None)
            .await
    }

    async fn put_json(&self, path: &str, token: Option<&str>, body: &Json) -> Response {
        let bytes = serde_json::to_vec(body).unwrap();
        self.send("PUT", path, token, Some(("application/json", bytes)), None)
            .await
    }

    /// Sends a request head (and no body) over a fresh connection and returns everything the
    /// server answers before it closes: how to see an early refusal of a large declared body.
    async fn raw_head(&self, head: &str) -> String {
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

    async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<(&str, Vec<u8>)>,
        accept: Option<&str>,
    ) -> Response {
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
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_needs_no_token_and_metrics_need_the_admin() {
    let server = Server::start().await;
    let health = server.http.get("/v1/health", None).await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json(), json!({"status": "ok"}));
    server
        .http
        .get("/metrics", None)
        .await
        .assert_error(401, "unauthorized");
    let token = server.tenant("acme", None).await;
    server
        .http
        .get("/metrics", Some(&token))
        .await
        .assert_error(403, "forbidden");
    server.deploy(&token, "counter", COUNTER, "").await;
    assert_eq!(
        server
            .ask(&token, "counter/c1", json!({"Add": 1}))
            .await
            .status,
        200
    );
    let metrics = server.http.get("/metrics", Some(ADMIN)).await;
    assert_eq!(metrics.status, 200);
    assert!(metrics.content_type.starts_with("text/plain"));
    assert!(
        metrics.text().contains("tessera_messages_total"),
        "{}",
        metrics.text()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tenants_are_created_listed_shown_and_requoted_by_the_admin() {
    let server = Server::start().await;
    let created = server
        .http
        .post_json("/v1/tenants", Some(ADMIN), &json!({"name": "acme"}))
        .await;
    assert_eq!(created.status, 201);
    let created = created.json();
    assert_eq!(created["name"], json!("acme"));
    assert!(created["token"].as_str().unwrap().len() >= 32);
    assert!(
        created.get("token_sha256").is_none(),
        "the hash stays inside"
    );
    server
        .http
        .post_json("/v1/tenants", Some(ADMIN), &json!({"name": "acme"}))
        .await
        .assert_error(409, "conflict");
    let list = server.http.get("/v1/tenants", Some(ADMIN)).await.json();
    assert_eq!(list["tenants"].as_array().unwrap().len(), 1);
    assert!(
        list["tenants"][0].get("token").is_none(),
        "tokens are shown once"
    );
    let shown = server.http.get("/v1/tenants/acme", Some(ADMIN)).await;
    assert_eq!(shown.json()["quotas"]["live_entities_max"], json!(10_000));
    server
        .http
        .get("/v1/tenants/nobody", Some(ADMIN))
        .await
        .assert_error(404, "not_found");
    let updated = server
        .http
        .put_json(
            "/v1/tenants/acme/quotas",
            Some(ADMIN),
            &json!({"live_entities_max": 7}),
        )
        .await;
    assert_eq!(updated.status, 200, "{}", updated.text());
    let shown = server
        .http
        .get("/v1/tenants/acme", Some(ADMIN))
        .await
        .json();
    assert_eq!(shown["quotas"]["live_entities_max"], json!(7));
    server
        .http
        .put_json(
            "/v1/tenants/acme/quotas",
            Some(ADMIN),
            &json!({"live_entities_max": 0}),
        )
        .await
        .assert_error(400, "bad_request");
    server
        .http
        .put_json("/v1/tenants/nobody/quotas", Some(ADMIN), &json!({}))
        .await
        .assert_error(404, "not_found");
    let shown = server
        .http
        .get("/v1/tenants/acme", Some(ADMIN))
        .await
        .json();
    assert_eq!(
        shown["quotas"]["live_entities_max"],
        json!(7),
        "refused changes nothing"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_json_and_bad_tokens_are_refused_and_change_nothing() {
    let server = Server::start().await;
    let malformed = server
        .http
        .send(
            "POST",
            "/v1/tenants",
            Some(ADMIN),
            Some(("application/json", b"{\"name\": ".to_vec())),
            None,
        )
        .await;
    malformed.assert_error(400, "malformed_body");
    server
        .http
        .post_json(
            "/v1/tenants",
            Some(ADMIN),
            &json!({"name": "x", "colour": 1}),
        )
        .await
        .assert_error(400, "malformed_body");
    server
        .http
        .post_json("/v1/tenants", Some(ADMIN), &json!({"name": "bad name!"}))
        .await
        .assert_error(400, "bad_request");
    server
        .http
        .post_json("/v1/tenants", None, &json!({"name": "x"}))
        .await
        .assert_error(401, "unauthorized");
    server
        .http
        .post_json(
            "/v1/tenants",
            Some("not-a-real-token"),
            &json!({"name": "x"}),
        )
        .await
        .assert_error(401, "unauthorized");
    let token = server.tenant("acme", None).await;
    for path in ["/v1/tenants", "/v1/tenants/acme", "/v1/cluster/members"] {
        server
            .http
            .get(path, Some(&token))
            .await
            .assert_error(403, "forbidden");
    }
    server
        .http
        .get("/v1/types", Some(ADMIN))
        .await
        .assert_error(403, "forbidden");
    server
        .http
        .get("/v1/types", None)
        .await
        .assert_error(401, "unauthorized");
    server
        .http
        .get("/v1/nothing-here", None)
        .await
        .assert_error(404, "not_found");
    server
        .http
        .send("DELETE", "/v1/health", None, None, None)
        .await
        .assert_error(405, "method_not_allowed");
    let list = server.http.get("/v1/tenants", Some(ADMIN)).await.json();
    assert_eq!(
        list["tenants"].as_array().unwrap().len(),
        1,
        "only acme exists"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn types_are_deployed_listed_rolled_back_and_deleted() {
    let server = Server::start().await;
    let token = server.tenant("acme", None).await;
    let first = server
        .http
        .send(
            "POST",
            "/v1/types/counter/versions?remember=true&passivate_idle_ms=60000",
            Some(&token),
            Some(("application/octet-stream", std::fs::read(COUNTER).unwrap())),
            None,
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.text());
    let first = first.json();
    assert_eq!(first["type"], json!("counter"));
    assert_eq!(first["version"], json!(1));
    assert_eq!(first["options"]["remember"], json!(true));
    assert_eq!(first["options"]["passivate_idle_ms"], json!(60000));
    assert_eq!(server.deploy(&token, "counter", COUNTER, "").await, 2);
    let list = server.http.get("/v1/types", Some(&token)).await.json();
    assert_eq!(list["types"][0]["name"], json!("counter"));
    assert_eq!(list["types"][0]["active_version"], json!(2));
    let rolled = server
        .http
        .put_json(
            "/v1/types/counter/active",
            Some(&token),
            &json!({"version": 1}),
        )
        .await;
    assert_eq!(rolled.status, 200, "{}", rolled.text());
    let shown = server
        .http
        .get("/v1/types/counter", Some(&token))
        .await
        .json();
    assert_eq!(shown["active_version"], json!(1));
    assert_eq!(shown["versions"].as_array().unwrap().len(), 2);
    server
        .http
        .put_json(
            "/v1/types/counter/active",
            Some(&token),
            &json!({"version": 9}),
        )
        .await
        .assert_error(404, "not_found");
    server
        .http
        .put_json(
            "/v1/types/counter/active",
            Some(&token),
            &json!({"version": "one"}),
        )
        .await
        .assert_error(400, "malformed_body");
    server
        .http
        .put_json(
            "/v1/types/nothing/active",
            Some(&token),
            &json!({"version": 1}),
        )
        .await
        .assert_error(404, "not_found");
    server
        .http
        .get("/v1/types/nothing", Some(&token))
        .await
        .assert_error(404, "not_found");
    let shown = server
        .http
        .get("/v1/types/counter", Some(&token))
        .await
        .json();
    assert_eq!(
        shown["active_version"],
        json!(1),
        "refused rollbacks change nothing"
    );
    assert_eq!(
        server
            .ask_json(&token, "counter/c1", json!({"Add": 2}))
            .await,
        json!(2)
    );
    let deleted = server
        .http
        .send("DELETE", "/v1/types/counter", Some(&token), None, None)
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    server
        .http
        .get("/v1/types/counter", Some(&token))
        .await
        .assert_error(404, "not_found");
    server
        .http
        .send("DELETE", "/v1/types/counter", Some(&token), None, None)
        .await
        .assert_error(404, "not_found");
    server
        .ask(&token, "counter/c1", json!("Get"))
        .await
        .assert_error(404, "entity_type_not_registered");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_uploads_are_refused_and_the_running_version_keeps_serving() {
    let server = Server::start_with(|config| config.api.plugin_body_bytes_max = 1 << 20).await;
    let token = server.tenant("acme", None).await;
    server.deploy(&token, "counter", COUNTER, "").await;
    assert_eq!(
        server
            .ask_json(&token, "counter/c1", json!({"Add": 3}))
            .await,
        json!(3)
    );
    let before = server.http.get("/v1/types", Some(&token)).await.json();
    let uploads: [(&str, &[u8]); 3] = [
        ("garbage", b"this is not wasm at all"),
        ("a core module", CORE_MODULE),
        ("a component that is no entity", EMPTY_COMPONENT),
    ];
    for (what, bytes) in uploads {
        let response = server
            .http
            .send(
                "POST",
                "/v1/types/counter/versions",
                Some(&token),
                Some(("application/wasm", bytes.to_vec())),
                None,
            )
            .await;
        assert_eq!(response.status, 422, "{what}: {}", response.text());
        assert_eq!(
            response.json()["error"]["code"],
            json!("bad_plugin"),
            "{what}"
        );
    }
    server
        .http
        .send(
            "POST",
            "/v1/types/counter/versions",
            Some(&token),
            Some(("text/plain", std::fs::read(COUNTER).unwrap())),
            None,
        )
        .await
        .assert_error(415, "unsupported_media_type");
    let oversized = server
        .http
        .raw_head(&format!(
            "POST /v1/types/counter/versions HTTP/1.1\r\nhost: test\r\n\
             authorization: Bearer {token}\r\ncontent-type: application/wasm\r\n\
             content-length: {}\r\n\r\n",
            (1 << 20) + 1
        ))
        .await;
    assert!(oversized.starts_with("HTTP/1.1 413"), "{oversized}");
    assert!(oversized.contains("\"payload_too_large\""), "{oversized}");
    server
        .http
        .send(
            "POST",
            "/v1/types/counter/versions?remember=maybe",
            Some(&token),
            Some(("application/wasm", std::fs::read(COUNTER).unwrap())),
            None,
        )
        .await
        .assert_error(400, "bad_query");
    server
        .http
        .send(
            "POST",
            "/v1/types/not%20a%20name/versions",
            Some(&token),
            Some(("application/wasm", std::fs::read(COUNTER).unwrap())),
            None,
        )
        .await
        .assert_error(400, "bad_request");
    let after = server.http.get("/v1/types", Some(&token)).await.json();
    assert_eq!(before, after, "no refused upload changed the type list");
    assert_eq!(
        server
            .ask_json(&token, "counter/c1", json!({"Add": 1}))
            .await,
        json!(4)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn entities_are_told_asked_passivated_and_inspected() {
    let server = Server::start().await;
    let token = server.tenant("acme", None).await;
    server.deploy(&token, "counter", COUNTER, "").await;
    let told = server
        .http
        .post_json(
            "/v1/entities/counter/c1/tell",
            Some(&token),
            &json!({"Add": 5}),
        )
        .await;
    assert_eq!(told.status, 202, "{}", told.text());
    let asked = server.ask(&token, "counter/c1", json!({"Add": 1})).await;
    assert_eq!(asked.status, 200);
    assert!(asked.content_type.starts_with("application/json"));
    assert_eq!(asked.json(), json!(6), "the tell ran before the ask");
    let packed = server
        .http
        .send(
            "POST",
            "/v1/entities/counter/c1/ask?timeout_ms=2000",
            Some(&token),
            Some(("application/msgpack", json_to_msgpack(&json!({"Add": 1})))),
            Some("application/msgpack"),
        )
        .await;
    assert_eq!(packed.status, 200, "{}", packed.text());
    assert_eq!(packed.content_type, "application/msgpack");
    assert_eq!(msgpack_to_json(&packed.bytes).unwrap(), json!(7));
    let state = server.state(&token, "counter/c1").await;
    assert_eq!(state, json!([{"key": "value", "value": 7}]));
    assert_eq!(server.state(&token, "counter/never").await, json!([]));
    let status = server.http.get("/v1/status", Some(&token)).await.json();
    assert_eq!(status["types"][0]["entity_type"], json!("counter"));
    assert_eq!(status["types"][0]["live_entities"], json!(1));
    let passivated = server
        .http
        .post_json(
            "/v1/entities/counter/c1/passivate",
            Some(&token),
            &json!(null),
        )
        .await;
    assert_eq!(passivated.status, 202, "{}", passivated.text());
    eventually("c1 to passivate", async || {
        let status = server.http.get("/v1/status", Some(&token)).await.json();
        status["types"][0]["live_entities"] == json!(0)
    })
    .await;
    assert_eq!(
        server.ask(&token, "counter/c1", json!("Get")).await.json(),
        json!(7)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_messages_get_clear_errors_and_change_no_state() {
    let server = Server::start().await;
    let token = server.tenant("acme", None).await;
    server
        .deploy(&token, "bank-account", BANK_ACCOUNT, "")
        .await;
    server.deploy(&token, "huge-reply", HUGE_REPLY, "").await;
    assert_eq!(
        server
            .ask_json(&token, "bank-account/a", json!({"Deposit": 10}))
            .await,
        json!(10)
    );
    let before = server.state(&token, "bank-account/a").await;
    server
        .ask(&token, "bank-account/a", json!({"Withdraw": 11}))
        .await
        .assert_error(422, "rejected");
    server
        .ask(&token, "bank-account/a", json!({"Steal": 1}))
        .await
        .assert_error(400, "bad_message");
    server
        .http
        .send(
            "POST",
            "/v1/entities/bank-account/a/ask",
            Some(&token),
            Some(("application/json", b"{\"Deposit\": ".to_vec())),
            None,
        )
        .await
        .assert_error(400, "malformed_body");
    server
        .http
        .send(
            "POST",
            "/v1/entities/bank-account/a/ask",
            Some(&token),
            Some(("application/msgpack", vec![0x81])),
            None,
        )
        .await
        .assert_error(400, "malformed_body");
    server
        .http
        .send(
            "POST",
            "/v1/entities/bank-account/a/ask",
            Some(&token),
            Some(("text/csv", b"1,2".to_vec())),
            None,
        )
        .await
        .assert_error(415, "unsupported_media_type");
    for query in ["timeout_ms=0", "timeout_ms=999999999", "timeout_ms=soon"] {
        server
            .http
            .post_json(
                &format!("/v1/entities/bank-account/a/ask?{query}"),
                Some(&token),
                &json!("Balance"),
            )
            .await
            .assert_error(400, "bad_query");
    }
    server
        .ask(&token, "savings/a", json!("Balance"))
        .await
        .assert_error(404, "entity_type_not_registered");
    server
        .http
        .get("/v1/entities/savings/a/state", Some(&token))
        .await
        .assert_error(404, "not_found");
    let long_id = "x".repeat(300);
    server
        .ask(&token, &format!("bank-account/{long_id}"), json!("Balance"))
        .await
        .assert_error(400, "bad_path");
    assert_eq!(server.state(&token, "bank-account/a").await, before);
    let bin = server
        .ask(&token, "huge-reply/h", json!({"Bytes": 3}))
        .await;
    assert_eq!(
        bin.json(),
        json!([90, 90, 90]),
        "bin replies are byte arrays in JSON"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_can_never_reach_another_tenants_entities() {
    let server = Server::start().await;
    let alice = server.tenant("alice", None).await;
    let bob = server.tenant("bob", None).await;
    server.deploy(&alice, "counter", COUNTER, "").await;
    server
        .deploy(&alice, "bank-account", BANK_ACCOUNT, "")
        .await;
    server.deploy(&bob, "counter", COUNTER, "").await;
    assert_eq!(
        server
            .ask_json(&alice, "counter/c1", json!({"Add": 5}))
            .await,
        json!(5)
    );
    assert_eq!(
        server.ask(&bob, "counter/c1", json!("Get")).await.json(),
        json!(0)
    );
    assert_eq!(server.state(&bob, "counter/c1").await, json!([]));
    server
        .ask(&bob, "bank-account/a", json!("Balance"))
        .await
        .assert_error(404, "entity_type_not_registered");
    server
        .http
        .get("/v1/types/bank-account", Some(&bob))
        .await
        .assert_error(404, "not_found");
    let bob_types = server.http.get("/v1/types", Some(&bob)).await.json();
    assert_eq!(bob_types["types"].as_array().unwrap().len(), 1);
    assert_eq!(
        server.ask(&alice, "counter/c1", json!("Get")).await.json(),
        json!(5)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oversized_message_bodies_are_refused() {
    let server = Server::start_with(|config| config.api.request_body_bytes_max = 1024).await;
    let token = server.tenant("acme", None).await;
    server.deploy(&token, "counter", COUNTER, "").await;
    for path in [
        "/v1/entities/counter/c1/tell",
        "/v1/entities/counter/c1/ask",
    ] {
        let refused = server
            .http
            .raw_head(&format!(
                "POST {path} HTTP/1.1\r\nhost: test\r\nauthorization: Bearer {token}\r\n\
                 content-type: application/json\r\ncontent-length: 1025\r\n\r\n"
            ))
            .await;
        assert!(refused.starts_with("HTTP/1.1 413"), "{refused}");
        assert!(refused.contains("\"payload_too_large\""), "{refused}");
    }
    let refused = server
        .http
        .raw_head(&format!(
            "POST /v1/tenants HTTP/1.1\r\nhost: test\r\nauthorization: Bearer {ADMIN}\r\n\
             content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n\
             800\r\n{}\r\n800\r\n{}\r\n0\r\n\r\n",
            "x".repeat(0x800),
            "x".repeat(0x800)
        ))
        .await;
    assert!(
        refused.starts_with("HTTP/1.1 413"),
        "a chunked body is cut at the limit: {refused}"
    );
    assert_eq!(server.state(&token, "counter/c1").await, json!([]));
    let tenants = server.http.get("/v1/tenants", Some(ADMIN)).await.json();
    assert_eq!(tenants["tenants"].as_array().unwrap().len(), 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cluster_view_is_for_the_admin() {
    let server = Server::start().await;
    let token = server.tenant("acme", None).await;
    server.deploy(&token, "counter", COUNTER, "").await;
    assert_eq!(
        server.ask(&token, "counter/c1", json!("Get")).await.status,
        200
    );
    let members = server
        .http
        .get("/v1/cluster/members", Some(ADMIN))
        .await
        .json();
    assert_eq!(members, json!({"members": ["node-1"]}));
    let shards = server
        .http
        .get("/v1/cluster/shards", Some(ADMIN))
        .await
        .json();
    let shards = shards["shards"].as_array().unwrap();
    assert!(
        shards
            .iter()
            .any(|shard| shard["type"] == json!("acme/counter")),
        "{shards:?}"
    );
    server
        .http
        .get("/v1/cluster/shards", Some(&token))
        .await
        .assert_error(403, "forbidden");
    server.stop().await;
}

mod quota {
    use super::*;

    /// Quotas with one limit changed.
    fn with(name: &str, value: Json) -> Option<Json> {
        let mut quotas = serde_json::Map::new();
        quotas.insert(name.to_string(), value);
        Some(Json::Object(quotas))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn live_entities() {
        let server = Server::start().await;
        let token = server
            .tenant("acme", with("live_entities_max", json!(2)))
            .await;
        server.deploy(&token, "counter", COUNTER, "").await;
        for id in ["c1", "c2"] {
            assert_eq!(
                server
                    .ask(&token, &format!("counter/{id}"), json!({"Add": 1}))
                    .await
                    .status,
                200
            );
        }
        server
            .ask(&token, "counter/c3", json!({"Add": 1}))
            .await
            .assert_error(429, "quota_exceeded");
        assert_eq!(server.state(&token, "counter/c3").await, json!([]));
        assert_eq!(
            server
                .ask_json(&token, "counter/c1", json!({"Add": 1}))
                .await,
            json!(2)
        );
        server.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn mailbox_depth() {
        let server = Arc::new(Server::start().await);
        let quotas = json!({"mailbox_capacity": 1, "message_deadline_ms": 2000});
        let token = server.tenant("acme", Some(quotas)).await;
        server
            .deploy(&token, "spin-forever", SPIN_FOREVER, "")
            .await;
        let told = server
            .http
            .post_json(
                "/v1/entities/spin-forever/s/tell",
                Some(&token),
                &json!("Spin"),
            )
            .await;
        assert_eq!(told.status, 202, "{}", told.text());
        let pings: Vec<_> = (0..4)
            .map(|_| {
                let (server, token) = (server.clone(), token.clone());
                tokio::spawn(
                    async move { server.ask(&token, "spin-forever/s", json!("Ping")).await },
                )
            })
            .collect();
        let mut refused = 0;
        for ping in pings {
            let response = ping.await.unwrap();
            if response.status != 200 {
                response.assert_error(503, "mailbox_full");
                refused += 1;
            }
        }
        assert!(
            refused >= 3,
            "a one-message mailbox behind a 2 s spin takes at most one ping"
        );
        let metrics = server.http.get("/metrics", Some(ADMIN)).await.text();
        let series = format!(
            "tessera_quota_rejections_total{{tenant=\"acme\",type=\"spin-forever\",quota=\"mailbox_depth\"}} {refused}"
        );
        assert!(
            metrics.contains(&series),
            "{series} missing from:\n{metrics}"
        );
        Arc::into_inner(server).unwrap().stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn message_rate() {
        let server = Server::start().await;
        let quotas = json!({"messages_per_second": 1, "messages_burst": 3});
        let token = server.tenant("acme", Some(quotas)).await;
        server.deploy(&token, "counter", COUNTER, "").await;
        for expected in 1..=3 {
            assert_eq!(
                server
                    .ask_json(&token, "counter/c1", json!({"Add": 1}))
                    .await,
                json!(expected)
            );
        }
        let refused = server.ask(&token, "counter/c1", json!({"Add": 1})).await;
        refused.assert_error(429, "quota_exceeded");
        assert_eq!(
            server.state(&token, "counter/c1").await,
            json!([{"key": "value", "value": 3}])
        );
        let metrics = server.http.get("/metrics", Some(ADMIN)).await.text();
        assert!(metrics.contains("quota=\"message_rate\""), "{metrics}");
        server.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn plugin_size() {
        let server = Server::start().await;
        let token = server
            .tenant("acme", with("plugin_bytes_max", json!(1000)))
            .await;
        let response = server
            .http
            .send(
                "POST",
                "/v1/types/counter/versions",
                Some(&token),
                Some(("application/wasm", std::fs::read(COUNTER).unwrap())),
                None,
            )
            .await;
        response.assert_error(413, "payload_too_large");
        let types = server.http.get("/v1/types", Some(&token)).await.json();
        assert_eq!(types, json!({"types": []}));
        let metrics = server.http.get("/metrics", Some(ADMIN)).await.text();
        assert!(metrics.contains("quota=\"plugin_size\""), "{metrics}");
        server.stop().await;
    }

    /// A guest that breaks one of its tenant's limits fails that message with `code` (422),
    /// and the same entity answers its next message from a fresh instance.
    async fn assert_limit_contains(
        quota: &str,
        value: Json,
        plugin: (&str, &str),
        breaking: Json,
        code: &str,
    ) {
        let (entity_type, component) = plugin;
        let server = Server::start().await;
        let token = server.tenant("acme", with(quota, value)).await;
        server.deploy(&token, entity_type, component, "").await;
        let entity = format!("{entity_type}/x");
        server
            .ask(&token, &entity, breaking)
            .await
            .assert_error(422, code);
        let pong = server.ask(&token, &entity, json!("Ping")).await.json();
        assert_eq!(pong, json!("Pong"));
        server.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn memory_per_instance() {
        let hog = ("memory-hog", MEMORY_HOG);
        assert_limit_contains(
            "memory_bytes_max",
            json!(4 << 20),
            hog,
            json!("Grow"),
            "memory_limit",
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn cpu_deadline() {
        let spin = ("spin-forever", SPIN_FOREVER);
        assert_limit_contains(
            "message_deadline_ms",
            json!(100),
            spin,
            json!("Spin"),
            "deadline",
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn state_bytes_per_entity() {
        let server = Server::start().await;
        let token = server
            .tenant("acme", with("entity_state_bytes_max", json!(4)))
            .await;
        server.deploy(&token, "counter", COUNTER, "").await;
        server
            .ask(&token, "counter/c1", json!({"Add": 1}))
            .await
            .assert_error(422, "state_too_large");
        assert_eq!(server.state(&token, "counter/c1").await, json!([]));
        server.stop().await;
    }
}

/// Asks to 20 counters from 20 tasks while the counter is deployed again (version 2) and rolled
/// back to 1: no ask fails and every counter's replies go up by exactly one each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn hot_deploy_under_load_loses_nothing() {
    const COUNTERS: usize = 20;
    let server = Arc::new(Server::start().await);
    let token = server.tenant("acme", None).await;
    server.deploy(&token, "counter", COUNTER, "").await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for index in 0..COUNTERS {
        let (server, token, stop) = (server.clone(), token.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let entity = format!("counter/load-{index}");
            let mut replies = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || replies.len() < 5 {
                let response = server.ask(&token, &entity, json!({"Add": 1})).await;
                assert_eq!(response.status, 200, "{entity}: {}", response.text());
                replies.push(response.json().as_i64().unwrap());
            }
            replies
        }));
    }
    let wait_for_progress = async |minimum: i64| {
        eventually("the load to make progress", async || {
            let entries = server.state(&token, "counter/load-0").await;
            entries[0]["value"].as_i64().unwrap_or(0) >= minimum
        })
        .await;
    };
    wait_for_progress(10).await;
    assert_eq!(server.deploy(&token, "counter", COUNTER, "").await, 2);
    wait_for_progress(30).await;
    let rolled = server
        .http
        .put_json(
            "/v1/types/counter/active",
            Some(&token),
            &json!({"version": 1}),
        )
        .await;
    assert_eq!(rolled.status, 200, "{}", rolled.text());
    wait_for_progress(50).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    for worker in workers {
        let replies = worker.await.unwrap();
        let expected: Vec<i64> = (1..=replies.len() as i64).collect();
        assert_eq!(
            replies, expected,
            "replies go up by one, with no gap or repeat"
        );
        total += replies.len();
    }
    assert!(total >= COUNTERS * 5);
    let status = server
        .http
        .get("/v1/types/counter", Some(&token))
        .await
        .json();
    assert_eq!(status["active_version"], json!(1));
    Arc::into_inner(server).unwrap().stop().await;
}

/// Opens the node on `data_dir` again, waiting for the previous one's background tasks to let
/// go of the database file.
async fn open_again(data_dir: &Path) -> Arc<Node> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Node::open(config(data_dir)).await {
            Ok(node) => return node,
            Err(error)
                if Instant::now() < deadline && error.to_string().contains("already open") =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("the node does not reopen: {error}"),
        }
    }
}

/// A node reopened on its data directory brings its remembered entities back, with all state.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_node_brings_remembered_entities_back() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::open(config(dir.path())).await.unwrap();
    let (_, token) = node.create_tenant("acme", None).unwrap();
    let bytes = std::fs::read(COUNTER).unwrap();
    let options = TypeOptions {
        remember: true,
        ..TypeOptions::default()
    };
    node.deploy("acme", "counter", bytes, options)
        .await
        .unwrap();
    let mut expected = HashMap::new();
    for (index, id) in ["r1", "r2", "r3"].into_iter().enumerate() {
        let address = EntityAddress::new("acme", "counter", id);
        let add = json!({"Add": index as i64 + 10});
        let reply = node
            .ask(address, json_to_msgpack(&add), Duration::from_secs(10))
            .await
            .unwrap();
        expected.insert(id, msgpack_to_json(&reply).unwrap());
    }
    node.shutdown().await;
    drop(node);

    let node = open_again(dir.path()).await;
    assert_eq!(
        node.authenticate(&token).unwrap(),
        tessera_host::node::Principal::Tenant("acme".into()),
        "the tenant and its token survive"
    );
    eventually("the remembered counters to be live again", async || {
        let status = node.status("acme").unwrap();
        status[0].live_entities == 3
    })
    .await;
    let status = node.status("acme").unwrap();
    assert_eq!(status[0].remembered_entities, 3);
    for (id, value) in expected {
        let state = node
            .entity_state(&EntityAddress::new("acme", "counter", id))
            .unwrap();
        assert_eq!(state.len(), 1);
        assert_eq!(msgpack_to_json(&state[0].1).unwrap(), value, "{id}");
    }
    node.shutdown().await;
}
