//! Messages to entities, inspection, bad messages, tenant isolation and body limits.

use super::support::*;

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
        json!({"$bin": "Wlpa"}),
        "bin replies are base64 in the documented $bin form"
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
