//! A hot deploy under load and a restart with remembered entities.

use super::support::*;

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
pub(crate) async fn open_again(data_dir: &Path) -> Arc<Node> {
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
    let (_, token) = node.create_tenant("acme", None).await.unwrap();
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
            .ask(&address, json_to_msgpack(&add), Duration::from_secs(10))
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
            .await
            .unwrap();
        assert_eq!(state.len(), 1);
        assert_eq!(msgpack_to_json(&state[0].1).unwrap(), value, "{id}");
    }
    node.shutdown().await;
}

/// One stored plugin that no longer loads (here: its bytes damaged on disk) must not keep the
/// node from starting: that type is unavailable, every other type serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plugin_that_fails_to_load_leaves_only_its_type_unavailable() {
    use sha2::Digest;
    let dir = tempfile::tempdir().unwrap();
    // The compiled cache in the data directory, removed below: the restart loads the bytes.
    let config = || {
        let mut config = config(dir.path());
        config.runtime.compiled_cache_dir = None;
        config
    };
    let node = Node::open(config()).await.unwrap();
    node.create_tenant("acme", None).await.unwrap();
    let counter = std::fs::read(COUNTER).unwrap();
    let counter_hash = hex::encode(sha2::Sha256::digest(&counter));
    node.deploy("acme", "counter", counter, TypeOptions::default())
        .await
        .unwrap();
    let bank = std::fs::read(BANK_ACCOUNT).unwrap();
    node.deploy("acme", "bank", bank, TypeOptions::default())
        .await
        .unwrap();
    node.shutdown().await;
    drop(node);

    // Damage the counter's stored bytes, as a bad disk or an incompatible engine would.
    let deadline = Instant::now() + Duration::from_secs(10);
    let database = loop {
        match redb::Database::create(dir.path().join("tessera.redb")) {
            Ok(database) => break database,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(error) => panic!("the database does not open: {error}"),
        }
    };
    // The blob store's chunks, by (hash, index): the first chunk of the counter's bytes.
    let chunks: redb::TableDefinition<(&str, u32), &[u8]> =
        redb::TableDefinition::new("plugin_blobs");
    let transaction = database.begin_write().unwrap();
    {
        let mut table = transaction.open_table(chunks).unwrap();
        let stored = table.insert((counter_hash.as_str(), 0), b"not a component".as_slice());
        assert!(stored.unwrap().is_some(), "the counter's bytes were stored");
    }
    transaction.commit().unwrap();
    drop(database);
    // And its compiled artifact, which the node would otherwise load by hash.
    let _ = std::fs::remove_dir_all(dir.path().join("compiled"));

    let node = loop {
        match Node::open(config()).await {
            Ok(node) => break node,
            Err(error) if error.to_string().contains("already open") => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(error) => panic!("the node does not start: {error}"),
        }
    };
    let deposit = node
        .ask(
            &EntityAddress::new("acme", "bank", "a"),
            json_to_msgpack(&json!({"Deposit": 5})),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(msgpack_to_json(&deposit).unwrap(), json!(5));
    let error = node
        .ask(
            &EntityAddress::new("acme", "counter", "c"),
            json_to_msgpack(&json!("Get")),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("counter"), "{error}");
    node.shutdown().await;
}
