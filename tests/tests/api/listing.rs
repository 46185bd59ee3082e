//! `GET /v1/types/{type}/entities` on one node: the ids with state and the remembered ones, in
//! id order, one bounded page at a time, only the token's tenant's.

use crate::support::*;

/// One page of `entity_type` as the tenant of `token` sees it, asserted `200`.
async fn page(server: &Server, token: &str, entity_type: &str, query: &str) -> Json {
    let path = format!("/v1/types/{entity_type}/entities{query}");
    let response = server.http.get(&path, Some(token)).await;
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()
}

fn ids(page: &Json) -> Vec<String> {
    page["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_string())
        .collect()
}

/// Ids with state (written, then passivated, so no longer remembered), remembered ids that
/// never wrote, and ids that are both are listed once each, in id order; pages follow
/// `next_after`, and only the first counts them all.
#[tokio::test(flavor = "multi_thread")]
async fn ids_with_state_and_remembered_ids_are_listed_in_order() {
    let server = Server::start().await;
    let token = server.tenant("acme", None).await;
    server
        .deploy(&token, "counter", COUNTER, "?remember=true")
        .await;
    server.deploy(&token, "other", COUNTER, "").await;
    for id in ["c-03", "c-01", "c-05"] {
        let reply = server
            .ask(&token, &format!("counter/{id}"), json!({"Add": 1}))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    for id in ["c-04", "c-02"] {
        let reply = server
            .ask(&token, &format!("counter/{id}"), json!("Get"))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let reply = server.ask(&token, "other/c-00", json!({"Add": 1})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let passivated = server
        .http
        .post_json(
            "/v1/entities/counter/c-05/passivate",
            Some(&token),
            &json!(null),
        )
        .await;
    assert_eq!(passivated.status, 202, "{}", passivated.text());

    // The remembered ids are written behind: c-05 forgotten, the four others remembered.
    eventually("c-01..c-04 remembered and c-05 forgotten", async || {
        let status = server.http.get("/v1/status", Some(&token)).await.json();
        status["types"]
            .as_array()
            .unwrap()
            .iter()
            .any(|ty| ty["entity_type"] == "counter" && ty["remembered_entities"] == 4)
    })
    .await;
    assert_eq!(
        server.state(&token, "counter/c-02").await,
        json!([]),
        "c-02 never wrote"
    );
    assert_eq!(
        server.state(&token, "counter/c-04").await,
        json!([]),
        "c-04 never wrote"
    );

    let all = page(&server, &token, "counter", "").await;
    assert_eq!(ids(&all), ["c-01", "c-02", "c-03", "c-04", "c-05"], "{all}");
    assert_eq!(all["count"], 5);
    assert_eq!(all["total"], 5);
    assert_eq!(all["type"], "counter");
    assert_eq!(
        all["next_after"],
        Json::Null,
        "a page that is not full is the last"
    );

    let first = page(&server, &token, "counter", "?limit=2").await;
    assert_eq!(ids(&first), ["c-01", "c-02"]);
    assert_eq!(
        (first["total"].clone(), first["next_after"].clone()),
        (json!(5), json!("c-02"))
    );
    let second = page(&server, &token, "counter", "?after=c-02&limit=2").await;
    assert_eq!(ids(&second), ["c-03", "c-04"]);
    assert!(
        second.get("total").is_none(),
        "only the first page counts: {second}"
    );
    assert_eq!(second["next_after"], "c-04");
    let third = page(&server, &token, "counter", "?after=c-04&limit=2").await;
    assert_eq!(ids(&third), ["c-05"]);
    assert_eq!(third["next_after"], Json::Null);
    let past = page(&server, &token, "counter", "?after=c-05").await;
    assert_eq!(
        (past["count"].clone(), ids(&past)),
        (json!(0), Vec::<String>::new())
    );

    let other = page(&server, &token, "other", "").await;
    assert_eq!(ids(&other), ["c-00"], "each type lists its own ids");
    server.stop().await;
}

/// A page holds at most 1000 ids: 0 or more is a 400 naming the bound; the cursor is an id
/// (at most 256 bytes); an unknown type is a 404; the admin token lists no tenant's entities.
#[tokio::test(flavor = "multi_thread")]
async fn the_page_size_is_bounded() {
    let server = Server::start().await;
    let token = server.tenant("acme", None).await;
    server.deploy(&token, "counter", COUNTER, "").await;
    let get = async |query: &str, token: Option<&str>| {
        let path = format!("/v1/types/counter/entities{query}");
        server.http.get(&path, token).await
    };
    assert_eq!(
        tessera_host::node::ENTITY_LIST_LIMIT_MAX,
        1000,
        "the documented bound"
    );
    for query in ["?limit=0", "?limit=1001", "?limit=-1", "?limit=many"] {
        get(query, Some(&token))
            .await
            .assert_error(400, "bad_query");
    }
    let over = get("?limit=1001", Some(&token)).await.json();
    assert!(
        over["error"]["message"].as_str().unwrap().contains("1000"),
        "{over}"
    );
    assert_eq!(get("?limit=1000", Some(&token)).await.status, 200);
    let long_id = "x".repeat(257);
    get(&format!("?after={long_id}"), Some(&token))
        .await
        .assert_error(400, "bad_request");
    get("?unknown=1", Some(&token))
        .await
        .assert_error(400, "bad_query");
    server
        .http
        .get("/v1/types/nothing/entities", Some(&token))
        .await
        .assert_error(404, "not_found");
    get("", None).await.assert_error(401, "unauthorized");
    get("", Some(ADMIN)).await.assert_error(403, "forbidden");
    server.stop().await;
}

/// Two tenants with a type of the same name each list only their own entities.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_lists_only_its_own_entities() {
    let server = Server::start().await;
    let acme = server.tenant("acme", None).await;
    let globex = server.tenant("globex", None).await;
    for token in [&acme, &globex] {
        server.deploy(token, "counter", COUNTER, "").await;
    }
    for (token, id) in [(&acme, "a-2"), (&globex, "g-1"), (&acme, "a-1")] {
        let reply = server
            .ask(token, &format!("counter/{id}"), json!({"Add": 1}))
            .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    assert_eq!(
        ids(&page(&server, &acme, "counter", "").await),
        ["a-1", "a-2"]
    );
    let theirs = page(&server, &globex, "counter", "").await;
    assert_eq!(
        (ids(&theirs), theirs["total"].clone()),
        (vec!["g-1".to_string()], json!(1))
    );
    server.stop().await;
}
