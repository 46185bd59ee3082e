//! Every tenant quota, enforced through the real server.

use super::support::*;

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
            tokio::spawn(async move { server.ask(&token, "spin-forever/s", json!("Ping")).await })
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

/// The instance pool is a cache over durable state: one tenant touching many more entities
/// than the pool has slots gets no errors (idle entities give their instances back), and
/// another tenant keeps being served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_instance_pool_swaps_idle_entities_instead_of_failing() {
    let server = Server::start_with(|config| config.runtime.instances_max = 16).await;
    let noisy = server.tenant("noisy", None).await;
    let calm = server.tenant("calm", None).await;
    server.deploy(&noisy, "counter", COUNTER, "").await;
    server.deploy(&calm, "counter", COUNTER, "").await;
    for index in 0..200 {
        let entity = format!("counter/c{index}");
        let reply = server.ask_json(&noisy, &entity, json!({"Add": 1})).await;
        assert_eq!(reply, json!(1), "{entity}");
        if index % 20 == 0 {
            let reply = server
                .ask_json(&calm, "counter/mine", json!({"Add": 1}))
                .await;
            assert_eq!(reply, json!(index / 20 + 1), "the calm tenant is served");
        }
    }
    // All 200 are still live entities (their state and mailboxes), on 16 instance slots.
    let status = server.http.get("/v1/status", Some(&noisy)).await.json();
    assert_eq!(status["types"][0]["live_entities"], json!(200), "{status}");
    let swaps = server
        .node
        .entities()
        .stats()
        .instance_swaps
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(swaps >= 200 - 16, "only {swaps} instances were swapped");
    // A swapped-out entity answers from its durable state.
    assert_eq!(
        server.ask_json(&noisy, "counter/c0", json!("Get")).await,
        json!(1)
    );
    server.stop().await;
}
