//! Deploys, listing, rollbacks, deletes, and uploads that are refused without harm.

use super::support::*;

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
    server
        .http
        .post_json(
            "/v1/entities/counter/c1/tell",
            Some(&token),
            &json!({"Add": 1}),
        )
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
    let refused_hash = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(EMPTY_COMPONENT))
    };
    let cached = std::fs::read_dir(tessera_tests::compiled_cache_dir())
        .unwrap()
        .filter_map(Result::ok)
        .any(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with(&refused_hash)
        });
    assert!(
        !cached,
        "a component refused by the world check is not cached on disk"
    );
    assert_eq!(
        server
            .ask_json(&token, "counter/c1", json!({"Add": 1}))
            .await,
        json!(4)
    );
    server.stop().await;
}
