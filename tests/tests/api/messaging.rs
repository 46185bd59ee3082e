//! Effectively-once messaging seen from a client: money is conserved under concurrent
//! transfers, asks that would wait on each other fail with `deadlock`, idempotent tells run
//! once, and reminders survive a restart.

use super::support::*;

/// Accounts in the transfer tests, and what each starts with.
const ACCOUNTS: usize = 20;
const OPENING_BALANCE: u64 = 1_000;

/// A small deterministic generator, so a failing run can be replayed.
pub(crate) struct Lcg(pub(crate) u64);

impl Lcg {
    pub(crate) fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

async fn open_accounts(server: &Server, token: &str) {
    for index in 0..ACCOUNTS {
        let entity = format!("bank-account/a{index}");
        let reply = server
            .ask_json(token, &entity, json!({"Deposit": OPENING_BALANCE}))
            .await;
        assert_eq!(reply, json!(OPENING_BALANCE), "{entity}");
    }
}

pub(crate) async fn balances(server: &Server, token: &str) -> Vec<u64> {
    let mut balances = Vec::with_capacity(ACCOUNTS);
    for index in 0..ACCOUNTS {
        let entity = format!("bank-account/a{index}");
        let reply = server.ask_json(token, &entity, json!("Balance")).await;
        balances.push(
            reply
                .as_u64()
                .unwrap_or_else(|| panic!("{entity}: {reply}")),
        );
    }
    balances
}

/// Waits until every committed tell was acknowledged by its receiver.
async fn quiescent(server: &Server) {
    eventually("every outbox to drain", async || {
        server.node.entities().state().pending_messages().unwrap().0 == 0
    })
    .await;
}

/// 16 clients transfer among 20 accounts at once. Every acknowledged transfer moved money, and
/// once the outboxes drain the total is what was deposited: no money made or lost. (With
/// asks instead of tells this created money: two accounts transferring to each other waited
/// on each other, the withdrawals were discarded, the deposits still ran.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_transfers_conserve_money() {
    let server = Arc::new(Server::start().await);
    let token = server.tenant("acme", None).await;
    server
        .deploy(&token, "bank-account", BANK_ACCOUNT, "")
        .await;
    open_accounts(&server, &token).await;

    let mut clients = Vec::new();
    for client in 0..16u64 {
        let server = server.clone();
        let token = token.clone();
        clients.push(tokio::spawn(async move {
            let mut random = Lcg(client + 1);
            let mut acknowledged = 0u32;
            for _ in 0..40 {
                let from = random.next(ACCOUNTS as u64);
                let to = (from + 1 + random.next(ACCOUNTS as u64 - 1)) % ACCOUNTS as u64;
                let amount = 1 + random.next(200);
                let transfer = json!({"Transfer": {"to": format!("a{to}"), "amount": amount}});
                let response = server
                    .ask(&token, &format!("bank-account/a{from}"), transfer)
                    .await;
                match response.status {
                    200 => acknowledged += 1,
                    // Not enough money is a business rule, not a failure.
                    422 => response.assert_error(422, "rejected"),
                    _ => panic!("a transfer failed: {}", response.text()),
                }
            }
            acknowledged
        }));
    }
    let mut acknowledged = 0;
    for client in clients {
        acknowledged += client.await.unwrap();
    }
    assert!(
        acknowledged > 100,
        "only {acknowledged} transfers went through"
    );
    quiescent(&server).await;
    let balances = balances(&server, &token).await;
    assert_eq!(
        balances.iter().sum::<u64>(),
        ACCOUNTS as u64 * OPENING_BALANCE,
        "{balances:?}"
    );
    let stats = server.node.entities().stats();
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(stats.outbox_enqueued.load(Relaxed), u64::from(acknowledged));
    assert_eq!(stats.dead_letters.load(Relaxed), 0);
    Arc::into_inner(server).unwrap().stop().await;
}

/// `r1` asks `r2`, which asks `r1` back: the inner ask fails at once with `deadlock` naming the
/// chain, and the outer ask reports it — instead of both waiting out their timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_in_a_cycle_fail_with_deadlock() {
    let server = Server::start().await;
    let token = server.tenant("acme", None).await;
    server
        .deploy(&token, "relay", tessera_tests::RELAY, "")
        .await;
    let response = server
        .ask(
            &token,
            "relay/r1",
            json!({"Bounce": {"path": ["r2", "r1"]}}),
        )
        .await;
    response.assert_error(409, "deadlock");
    let message = response.json()["error"]["message"].to_string();
    assert!(
        message.contains("acme/relay/r1 -> acme/relay/r2 -> acme/relay/r1"),
        "{message}"
    );
    // A chain without a cycle still works, and the relays are not stuck.
    let reply = server
        .ask_json(
            &token,
            "relay/r1",
            json!({"Bounce": {"path": ["r2", "r3"]}}),
        )
        .await;
    assert_eq!(reply, json!(0));
    server.stop().await;
}

/// A tell with an `Idempotency-Key` is answered once committed and runs once per key, however
/// often the client retries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_tells_run_once_per_key() {
    let server = Server::start().await;
    let token = server.tenant("acme", None).await;
    server.deploy(&token, "counter", COUNTER, "").await;
    let path = "/v1/entities/counter/c1/tell";
    for key in ["k-1", "k-1", "k-2", "k-1", "k-2"] {
        let response = server
            .http
            .post_json_with(
                path,
                Some(&token),
                &json!({"Add": 5}),
                &[("Idempotency-Key", key)],
            )
            .await;
        assert_eq!(response.status, 202, "{}", response.text());
        assert_eq!(response.json()["status"], json!("committed"));
    }
    // Committed before the answer: no waiting needed.
    assert_eq!(
        server.ask_json(&token, "counter/c1", json!("Get")).await,
        json!(10)
    );
    let duplicates = server
        .node
        .entities()
        .stats()
        .duplicates_dropped
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(duplicates, 3);
    // A malformed key is refused and changes nothing.
    let response = server
        .http
        .post_json_with(
            path,
            Some(&token),
            &json!({"Add": 5}),
            &[("Idempotency-Key", "")],
        )
        .await;
    response.assert_error(400, "bad_header");
    assert_eq!(
        server.ask_json(&token, "counter/c1", json!("Get")).await,
        json!(10)
    );
    server.stop().await;
}

/// A reminder scheduled before a passivation and a node restart still fires, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reminders_survive_passivation_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::open(config(dir.path())).await.unwrap();
    node.create_tenant("acme", None).await.unwrap();
    let bytes = std::fs::read(tessera_tests::REMINDER).unwrap();
    node.deploy("acme", "reminder", bytes, TypeOptions::default())
        .await
        .unwrap();
    let address = EntityAddress::new("acme", "reminder", "r1");
    let ask = async |node: &Node, message: Json| {
        let reply = node
            .ask(&address, json_to_msgpack(&message), Duration::from_secs(10))
            .await
            .unwrap();
        msgpack_to_json(&reply).unwrap()
    };
    ask(&node, json!({"Remind": {"delay_ms": 1_500, "note": "tea"}})).await;
    ask(
        &node,
        json!({"Remind": {"delay_ms": 60_000, "note": "later"}}),
    )
    .await;
    node.passivate(&address).await.unwrap();
    node.shutdown().await;
    drop(node);

    let node = super::lifecycle::open_again(dir.path()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let fired = loop {
        let state = node.entity_state(&address).await.unwrap();
        if let Some((_, log)) = state.first() {
            break msgpack_to_json(log).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the reminder never fired after the restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(fired["count"], json!(1), "{fired}");
    assert_eq!(fired["notes"], json!(["tea"]), "{fired}");
    let (_, pending) = node.entities().state().pending_messages().unwrap();
    assert_eq!(pending, 1, "the later reminder is still held");
    node.shutdown().await;
}
