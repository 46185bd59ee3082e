//! `kill -9` of a node in the middle of concurrent transfers, then a restart on the same data
//! directory: every acknowledged transfer's effect is there, none twice, and the money is
//! conserved. The node runs in a child process — this same test binary, re-run with
//! [`CHILD_DIR_ENV`] set to serve one node until it is killed.

use super::messaging::Lcg;
use super::support::*;
use std::process::{Child, Command};

/// Set in the child's environment: the data directory of the node it serves.
const CHILD_DIR_ENV: &str = "TESSERA_CRASH_CHILD_DIR";

const ACCOUNTS: u64 = 20;
const OPENING_BALANCE: u64 = 1_000;
const CLIENTS: u64 = 16;

/// Not a test of its own: the child process's node. Serves until killed, writing its port to
/// `<dir>/port` once it listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by crash::transfers_survive_kill_9 as its child process"]
async fn child_node() {
    let Some(dir) = std::env::var_os(CHILD_DIR_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let node = super::lifecycle::open_again(&dir).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let temporary = dir.join("port.tmp");
    std::fs::write(&temporary, port.to_string()).unwrap();
    std::fs::rename(&temporary, dir.join("port")).unwrap();
    api::serve(node, listener, std::future::pending())
        .await
        .unwrap();
}

/// Starts the child node on `dir` and returns it with a client for its API.
async fn start_child(dir: &Path) -> (Child, Http) {
    let _ = std::fs::remove_file(dir.join("port"));
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash::child_node", "--ignored", "--nocapture"])
        .env(CHILD_DIR_ENV, dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let port = loop {
        if let Ok(port) = std::fs::read_to_string(dir.join("port")) {
            break port;
        }
        assert!(Instant::now() < deadline, "the child node never listened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    (child, Http::new(format!("http://127.0.0.1:{port}")))
}

/// What became of one transfer, as its client saw it.
#[derive(Clone, Copy, Debug)]
enum Outcome {
    /// 200: withdrawn and the credit committed to the outbox.
    Acknowledged,
    /// No answer (the node died): it happened entirely or not at all.
    Uncertain,
}

#[derive(Clone, Copy, Debug)]
struct Transfer {
    from: u64,
    to: u64,
    amount: u64,
    outcome: Outcome,
}

/// One transfer over a raw blocking request, so a dead node is an outcome, not a panic.
async fn transfer(http: &Http, token: &str, from: u64, to: u64, amount: u64) -> Option<u16> {
    let agent = http.agent.clone();
    let url = format!("{}/v1/entities/bank-account/a{from}/ask", http.base);
    let body = serde_json::to_vec(&json!({"Transfer": {"to": format!("a{to}"), "amount": amount}}))
        .unwrap();
    let token = token.to_string();
    tokio::task::spawn_blocking(move || {
        let request = ureq::http::Request::builder()
            .method("POST")
            .uri(&url)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(body)
            .unwrap();
        agent
            .run(request)
            .ok()
            .map(|response| response.status().as_u16())
    })
    .await
    .unwrap()
}

async fn balance(http: &Http, token: &str, account: u64) -> u64 {
    let path = format!("/v1/entities/bank-account/a{account}/ask");
    let response = http.post_json(&path, Some(token), &json!("Balance")).await;
    assert_eq!(response.status, 200, "{}", response.text());
    response.json().as_u64().unwrap()
}

/// Whether some subset of `uncertain` applied on top of `acknowledged` gives `actual`.
fn explained(actual: &[u64], acknowledged: &[i64], uncertain: &[Transfer]) -> bool {
    assert!(
        uncertain.len() <= 20,
        "too many uncertain transfers to check"
    );
    (0u32..1 << uncertain.len()).any(|subset| {
        let mut expected = acknowledged.to_vec();
        for (index, transfer) in uncertain.iter().enumerate() {
            if subset & (1 << index) != 0 {
                expected[transfer.from as usize] -= transfer.amount as i64;
                expected[transfer.to as usize] += transfer.amount as i64;
            }
        }
        expected
            .iter()
            .zip(actual)
            .all(|(expected, actual)| *expected == *actual as i64)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfers_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, http) = start_child(dir.path()).await;
    let response = http
        .post_json("/v1/tenants", Some(ADMIN), &json!({"name": "acme"}))
        .await;
    assert_eq!(response.status, 201, "{}", response.text());
    let token = response.json()["token"].as_str().unwrap().to_string();
    let plugin = std::fs::read(BANK_ACCOUNT).unwrap();
    let response = http
        .send(
            "POST",
            "/v1/types/bank-account/versions",
            Some(&token),
            Some(("application/wasm", plugin)),
            None,
        )
        .await;
    assert_eq!(response.status, 201, "{}", response.text());
    for account in 0..ACCOUNTS {
        let path = format!("/v1/entities/bank-account/a{account}/ask");
        let response = http
            .post_json(&path, Some(&token), &json!({"Deposit": OPENING_BALANCE}))
            .await;
        assert_eq!(response.status, 200, "{}", response.text());
    }

    // Clients transfer until the node dies under them; the parent kills it once enough went
    // through that tells are in flight.
    let acknowledged_so_far = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let http = http.clone();
        let token = token.clone();
        let counter = acknowledged_so_far.clone();
        clients.push(tokio::spawn(async move {
            let mut random = Lcg(client + 100);
            let mut seen = Vec::new();
            loop {
                let from = random.next(ACCOUNTS);
                let to = (from + 1 + random.next(ACCOUNTS - 1)) % ACCOUNTS;
                let amount = 1 + random.next(100);
                let outcome = match transfer(&http, &token, from, to, amount).await {
                    Some(200) => Outcome::Acknowledged,
                    Some(422) => continue,
                    _ => Outcome::Uncertain,
                };
                seen.push(Transfer {
                    from,
                    to,
                    amount,
                    outcome,
                });
                match outcome {
                    Outcome::Acknowledged => {
                        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Outcome::Uncertain => return seen,
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while acknowledged_so_far.load(std::sync::atomic::Ordering::Relaxed) < 300 {
        assert!(Instant::now() < deadline, "the transfers made no progress");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().unwrap(); // SIGKILL: no shutdown, no flush.
    child.wait().unwrap();
    let mut transfers = Vec::new();
    for client in clients {
        transfers.extend(client.await.unwrap());
    }

    eprintln!(
        "killed the node after {} transfers ({} uncertain)",
        transfers.len(),
        transfers
            .iter()
            .filter(|transfer| matches!(transfer.outcome, Outcome::Uncertain))
            .count()
    );
    let (mut child, http) = start_child(dir.path()).await;
    // Quiescence: every committed credit delivered after the restart.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = http.get("/metrics", Some(ADMIN)).await.text();
        if metrics.lines().any(|line| line == "tessera_outbox_depth 0") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the outboxes never drained:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut actual = Vec::new();
    for account in 0..ACCOUNTS {
        actual.push(balance(&http, &token, account).await);
    }
    let metrics = http.get("/metrics", Some(ADMIN)).await.text();
    child.kill().unwrap();
    child.wait().unwrap();

    let delivery: Vec<&str> = metrics
        .lines()
        .filter(|line| {
            [
                "tessera_outbox",
                "tessera_redeliveries",
                "tessera_duplicates",
                "tessera_dead",
            ]
            .iter()
            .any(|prefix| line.starts_with(prefix))
        })
        .collect();
    assert_eq!(
        actual.iter().sum::<u64>(),
        ACCOUNTS * OPENING_BALANCE,
        "money was made or lost: {actual:?}; {} transfers seen; after the restart: {delivery:?}",
        transfers.len()
    );
    let mut expected = vec![OPENING_BALANCE as i64; ACCOUNTS as usize];
    let mut uncertain = Vec::new();
    for transfer in &transfers {
        match transfer.outcome {
            Outcome::Acknowledged => {
                expected[transfer.from as usize] -= transfer.amount as i64;
                expected[transfer.to as usize] += transfer.amount as i64;
            }
            Outcome::Uncertain => uncertain.push(*transfer),
        }
    }
    assert!(
        explained(&actual, &expected, &uncertain),
        "the balances {actual:?} are not the acknowledged transfers plus some of the {} \
         uncertain ones",
        uncertain.len()
    );
}
