//! The client against a scripted HTTP server: which failures it tries again (and where), and
//! that every retry of a tell carries the same idempotency key.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_client::{Client, Error, ErrorKind, Retry};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// How the scripted server answers one request.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// A status and an error code (`None`: a success with the body `1`).
    Status(u16, Option<&'static str>),
    /// Reads the request and closes the connection without an answer.
    Hangup,
}

/// A request the server saw.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    idempotency_key: Option<String>,
}

/// Serves `script` in order (its last answer for every later request) on one connection per
/// request, and records what it saw.
async fn scripted(script: Vec<Answer>) -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let address = listener.local_addr().expect("its address");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        let mut served = 0;
        while let Ok((mut stream, _)) = listener.accept().await {
            let Some(request) = read_request(&mut stream).await else {
                continue;
            };
            record.lock().unwrap().push(request);
            let answer = script[served.min(script.len() - 1)];
            served += 1;
            let (status, body) = match answer {
                Answer::Hangup => continue,
                Answer::Status(status, None) => (status, "1".to_string()),
                Answer::Status(status, Some(code)) => (
                    status,
                    format!(r#"{{"error":{{"code":"{code}","message":"scripted"}}}}"#),
                ),
            };
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 connection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
        }
    });
    (address, seen)
}

/// Reads one request (head and `content-length` body) from `stream`.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<Seen> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        bytes.extend_from_slice(&chunk[..read]);
        if let Some(end) = bytes.windows(4).position(|window| window == b"\r\n\r\n") {
            break end + 4;
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).to_string();
    let header = |name: &str| {
        head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_string())
        })
    };
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while bytes.len() < head_end + length {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        bytes.extend_from_slice(&chunk[..read]);
    }
    Some(Seen {
        path: head.split_whitespace().nth(1)?.to_string(),
        idempotency_key: header("idempotency-key"),
    })
}

/// Quick retries, so the tests take milliseconds.
fn quick() -> Retry {
    Retry {
        attempts_max: 5,
        backoff_initial: Duration::from_millis(1),
        backoff_max: Duration::from_millis(5),
        elapsed_max: Duration::from_secs(10),
    }
}

fn client(nodes: &[SocketAddr]) -> Client {
    Client::builder()
        .nodes(nodes.iter().map(|node| node.to_string()))
        .token("token")
        .retry(quick())
        .request_timeout(Duration::from_secs(5))
        .build()
        .expect("a client")
}

/// An address nothing listens on (bound, then closed).
async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    listener.local_addr().expect("its address")
}

#[tokio::test]
async fn a_retried_tell_carries_one_idempotency_key() {
    let (node, seen) = scripted(vec![
        Answer::Status(503, Some("shard_unavailable")),
        Answer::Hangup,
        Answer::Status(503, Some("unavailable")),
        Answer::Status(202, None),
    ])
    .await;
    client(&[node])
        .tell("counter", "c1", &serde_json::json!({"Add": 1}))
        .await
        .expect("told after three failures");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "{seen:?}");
    let key = seen[0].idempotency_key.clone().expect("a key");
    assert!(
        seen.iter()
            .all(|request| request.idempotency_key.as_deref() == Some(&key)),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .all(|request| request.path == "/v1/entities/counter/c1/tell")
    );

    // The next tell is another message: another key.
    let (node, seen) = scripted(vec![Answer::Status(202, None)]).await;
    let client = client(&[node]);
    client.tell("counter", "c1", &"Get").await.expect("told");
    client.tell("counter", "c1", &"Get").await.expect("told");
    let seen = seen.lock().unwrap().clone();
    assert_ne!(seen[0].idempotency_key, seen[1].idempotency_key);
}

#[tokio::test]
async fn a_definite_refusal_is_answered_after_one_attempt() {
    for code in [
        "rejected",
        "bad_message",
        "trap",
        "quota_exceeded",
        "deadlock",
    ] {
        let status = match code {
            "rejected" => 422,
            "bad_message" => 400,
            "quota_exceeded" => 429,
            "deadlock" => 409,
            _ => 500,
        };
        let (node, seen) = scripted(vec![Answer::Status(status, Some(code))]).await;
        let asked = client(&[node]).ask::<_, i64>("counter", "c1", &"Get").await;
        assert_eq!(asked.unwrap_err().kind(), Some(ErrorKind::from_code(code)));
        let told = client(&[node]).tell("counter", "c1", &"Get").await;
        assert_eq!(told.unwrap_err().kind(), Some(ErrorKind::from_code(code)));
        assert_eq!(seen.lock().unwrap().len(), 2, "{code}: one attempt each");
    }
}

#[tokio::test]
async fn an_ask_whose_answer_was_lost_is_not_sent_again() {
    let (node, seen) = scripted(vec![Answer::Hangup, Answer::Status(200, None)]).await;
    let asked = client(&[node])
        .ask::<_, i64>("counter", "c1", &serde_json::json!({"Add": 1}))
        .await;
    assert!(matches!(asked, Err(Error::Interrupted { .. })), "{asked:?}");
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the add may have run: not sent again"
    );
}

#[tokio::test]
async fn calls_fail_over_to_the_next_node() {
    let dead = closed_port().await;
    let (busy, busy_seen) = scripted(vec![Answer::Status(503, Some("shard_unavailable"))]).await;
    let (live, live_seen) = scripted(vec![Answer::Status(200, None)]).await;
    let client = client(&[dead, busy, live]);
    let value: i64 = client
        .ask("counter", "c1", &"Get")
        .await
        .expect("answered by the third node");
    assert_eq!(value, 1);
    assert_eq!(busy_seen.lock().unwrap().len(), 1);
    // The node that answered is tried first from now on.
    let value: i64 = client.ask("counter", "c1", &"Get").await.expect("answered");
    assert_eq!(value, 1);
    assert_eq!(
        busy_seen.lock().unwrap().len(),
        1,
        "the busy node is not tried first"
    );
    assert_eq!(live_seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn retries_stop_when_the_policy_is_spent() {
    let (node, seen) = scripted(vec![Answer::Status(503, Some("shard_unavailable"))]).await;
    let asked = client(&[node]).ask::<_, i64>("counter", "c1", &"Get").await;
    assert_eq!(asked.unwrap_err().kind(), Some(ErrorKind::ShardUnavailable));
    assert_eq!(seen.lock().unwrap().len(), quick().attempts_max as usize);
}
