//! Health, metrics, tenants, bad JSON and tokens, and the admin-only cluster view.

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_and_readiness_need_no_token_and_metrics_need_the_admin() {
    let server = Server::start().await;
    let health = server.http.get("/v1/health", None).await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json(), json!({"status": "ok"}));
    // A single node is ready as soon as it serves: its member is up, and it orders its own
    // catalog (no plane to be in contact with).
    let ready = server.http.get("/v1/ready", None).await;
    assert_eq!(ready.status, 200, "{:?}", ready.json());
    assert_eq!(ready.json()["ready"], json!(true));
    assert_eq!(ready.json()["state"], json!("up"));
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
    // Every quota has a ceiling: a huge mailbox would make the node allocate without bound.
    let huge = server
        .http
        .put_json(
            "/v1/tenants/acme/quotas",
            Some(ADMIN),
            &json!({"mailbox_capacity": u64::MAX}),
        )
        .await;
    huge.assert_error(400, "bad_request");
    assert!(
        huge.text().contains("mailbox_capacity must be at most"),
        "{}",
        huge.text()
    );
    let shown = server
        .http
        .get("/v1/tenants/acme", Some(ADMIN))
        .await
        .json();
    assert_eq!(
        shown["quotas"]["mailbox_capacity"],
        json!(1024),
        "unchanged"
    );
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
    for path in [
        "/v1/tenants",
        "/v1/tenants/acme",
        "/v1/cluster/members",
        "/v1/cluster",
    ] {
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
    let members = members["members"].as_array().unwrap();
    assert_eq!(members.len(), 1, "{members:?}");
    assert_eq!(members[0]["node"], json!("node-1"));
    assert_eq!(members[0]["state"], json!("up"));
    let cluster = server.http.get("/v1/cluster", Some(ADMIN)).await.json();
    assert_eq!(cluster["node"], json!("node-1"));
    assert_eq!(cluster["primary"], json!("node-1"));
    assert_eq!(cluster["voters"], json!(["node-1"]));
    assert_eq!(cluster["view"], json!(0));
    // Joining, up, one tenant, one deploy, and at least one shard allocation.
    assert!(cluster["commit"].as_u64().unwrap() >= 5, "{cluster}");
    let member = &cluster["members"][0];
    assert_eq!(member["state"], json!("up"));
    assert!(member["shards"].as_u64().unwrap() >= 1, "{cluster}");
    assert_eq!(
        member["api_address"],
        json!(server.node.config().http.to_string())
    );
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

/// `/metrics` in the real exposition format: a Prometheus parser reads every family with its
/// type, the commit histogram whole, and no label value a client chose.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_parse_as_prometheus_and_carry_no_client_chosen_labels() {
    let server = Server::start().await;
    let token = server.tenant("acme", None).await;
    server.deploy(&token, "counter", COUNTER, "").await;
    for index in 0..5 {
        let entity = format!("counter/c{index}");
        assert_eq!(
            server.ask(&token, &entity, json!({"Add": 1})).await.status,
            200
        );
    }
    for index in 0..20 {
        server
            .ask(&token, &format!("bogus-{index}/x"), json!("Get"))
            .await
            .assert_error(404, "entity_type_not_registered");
    }
    let text = server.http.get("/metrics", Some(ADMIN)).await.text();
    let lines = text.lines().map(|line| Ok(line.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    for sample in &scrape.samples {
        for (label, value) in sample.labels.iter() {
            assert!(
                !value.starts_with("bogus-"),
                "{} carries {label}={value} from a request path",
                sample.metric
            );
        }
    }
    let commit = scrape
        .samples
        .iter()
        .find(|sample| sample.metric == "tessera_commit_seconds")
        .expect("the commit histogram");
    let prometheus_parse::Value::Histogram(buckets) = &commit.value else {
        panic!(
            "tessera_commit_seconds is not a histogram: {:?}",
            commit.value
        );
    };
    let infinite = buckets
        .iter()
        .find(|bucket| bucket.less_than.is_infinite())
        .expect("a +Inf bucket");
    assert_eq!(infinite.count, 5.0, "five committed messages");
    assert!(text.contains("# TYPE tessera_commit_seconds histogram"));
    assert!(text.contains("tessera_commit_seconds_sum{"));
    for family in [
        "tessera_messages_total",
        "tessera_activations_total",
        "tessera_entities_live",
        "tessera_region_refused_total",
        "tessera_region_forwarded_total",
        "tessera_region_shard_transfer_stalls_total",
        "tessera_entity_evictions_total",
        "tessera_instances_discarded_total",
        "tessera_outbox_enqueued_total",
        "tessera_redeliveries_total",
        "tessera_duplicates_dropped_total",
        "tessera_dead_letters_total",
        "tessera_reminders_fired_total",
        "tessera_expired_asks_total",
        "tessera_outbox_depth",
        "tessera_reminders_pending",
        "tessera_guest_log_lines_dropped_total",
        "tessera_commit_transactions_total",
        "tessera_remember_dropped_total",
        "tessera_plugin_compilations_total",
        "tessera_instances_retired_total",
    ] {
        assert!(
            scrape.samples.iter().any(|sample| sample.metric == family),
            "{family} missing from:\n{text}"
        );
    }
    let refused_unknown = scrape.samples.iter().find(|sample| {
        sample.metric == "tessera_region_refused_total"
            && sample.labels.get("kind") == Some("entity_type_not_registered")
    });
    assert!(
        refused_unknown.is_some(),
        "the refusals are counted:\n{text}"
    );
    server.stop().await;
}
