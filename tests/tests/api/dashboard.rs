//! The dashboard from outside: the page (and `/`, which redirects to it) is served to anyone
//! but holds nothing but the login form; everything it shows comes from admin-only JSON
//! (`/v1/overview`, `/v1/cluster/shards`), which refuses anonymous and tenant requests.

use crate::support::*;

/// The raw answer (head and body) to a `GET` of `path` without a token.
async fn raw_get(server: &Server, path: &str) -> String {
    let head = format!("GET {path} HTTP/1.1\r\nHost: tessera\r\nConnection: close\r\n\r\n");
    server.http.raw_head(&head).await
}

/// `/` redirects to `/ui`; `/ui` is the login page, with a policy that runs only the node's own
/// script; nothing on it names a member, a tenant or a type.
#[tokio::test(flavor = "multi_thread")]
async fn anyone_gets_the_login_page_and_nothing_else() {
    let server = Server::start().await;
    let token = server.tenant("acme-secret-tenant", None).await;
    server.deploy(&token, "counter", COUNTER, "").await;

    let root = raw_get(&server, "/").await.to_ascii_lowercase();
    assert!(root.starts_with("http/1.1 303"), "{root}");
    assert!(root.contains("\r\nlocation: /ui\r\n"), "{root}");

    let page = raw_get(&server, "/ui").await;
    let head = page.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{page}");
    assert!(head.contains("content-type: text/html"), "{page}");
    assert!(
        head.contains("content-security-policy: default-src 'none'; script-src 'self';"),
        "{page}"
    );
    assert!(head.contains("x-frame-options: deny"), "{page}");
    assert!(!head.contains("set-cookie"), "no session cookie: {page}");
    assert!(page.contains("id=\"login-form\""), "{page}");
    assert!(page.contains("type=\"password\""), "{page}");
    let node_id = server.node.config().node_id.clone();
    for secret in ["acme-secret-tenant", "counter", node_id.as_str()] {
        assert!(!page.contains(secret), "the page names {secret}: {page}");
    }
    for asset in ["/ui/dashboard.js", "/ui/dashboard.css"] {
        let response = server.http.get(asset, None).await;
        assert_eq!(response.status, 200, "{asset}");
        assert!(!response.text().contains("acme-secret-tenant"));
    }
    server.stop().await;
}

/// The JSON the page reads answers only the admin token.
#[tokio::test(flavor = "multi_thread")]
async fn the_pages_json_refuses_anonymous_and_tenant_requests() {
    let server = Server::start().await;
    let token = server.tenant("acme", None).await;
    for path in ["/v1/overview", "/v1/cluster/shards", "/v1/cluster"] {
        server
            .http
            .get(path, None)
            .await
            .assert_error(401, "unauthorized");
        server
            .http
            .get(path, Some("not-a-token"))
            .await
            .assert_error(401, "unauthorized");
        server
            .http
            .get(path, Some(&token))
            .await
            .assert_error(403, "forbidden");
        assert_eq!(
            server.http.get(path, Some(ADMIN)).await.status,
            200,
            "{path}"
        );
    }
    server.stop().await;
}

/// The overview of a single node: itself as the one member, its counters, every tenant's
/// types with their live entities, no moves.
#[tokio::test(flavor = "multi_thread")]
async fn the_overview_shows_members_counters_and_types() {
    let server = Server::start().await;
    let acme = server.tenant("acme", None).await;
    let globex = server.tenant("globex", None).await;
    server.deploy(&acme, "counter", COUNTER, "").await;
    server.deploy(&globex, "bank", BANK_ACCOUNT, "").await;
    for id in ["c1", "c2", "c3"] {
        let reply = server
            .ask(&acme, &format!("counter/{id}"), json!({"Add": 2}))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let response = server.http.get("/v1/overview", Some(ADMIN)).await;
    assert_eq!(response.status, 200, "{}", response.text());
    let overview = response.json();
    let node_id = server.node.config().node_id.clone();
    assert_eq!(overview["cluster"]["members"].as_array().unwrap().len(), 1);
    let nodes = overview["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{overview}");
    assert_eq!(nodes[0]["node"], json!(node_id));
    assert!(nodes[0]["messages"].as_u64().unwrap() >= 3, "{overview}");
    assert!(nodes[0]["commits"].as_u64().unwrap() >= 3, "{overview}");
    assert_eq!(overview["unanswered"], json!([]));
    assert_eq!(overview["moves"], json!([]));
    assert!(overview["num_shards"].as_u64().unwrap() > 0);
    let types = overview["types"].as_array().unwrap();
    let summary: Vec<(String, String, u64, u64)> = types
        .iter()
        .map(|ty| {
            (
                ty["tenant"].as_str().unwrap().to_string(),
                ty["type"].as_str().unwrap().to_string(),
                ty["active_version"].as_u64().unwrap(),
                ty["live_entities"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("acme".into(), "counter".into(), 1, 3),
            ("globex".into(), "bank".into(), 1, 0)
        ]
    );
    server.stop().await;
}
