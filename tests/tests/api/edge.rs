//! The HTTP edge against hostile clients on raw sockets: a request head or body that stalls, a
//! connection cap that is reached with every connection busy, idle keep-alive connections, and
//! shutdown with a connection open. Who gets a connection near the cap is in `admission`. Timeouts are set small; each wait is bounded generously only to prove nothing hangs.

use crate::support::*;
use tessera_host::node::EdgeSnapshot;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Longest any wait here may take: far above every timeout the tests set.
pub(crate) const HANG: Duration = Duration::from_secs(5);

/// Most bytes read from one raw connection.
const ANSWER_BYTES_MAX: usize = 64 * 1024;

pub(crate) const HEALTH: &str = "GET /v1/health HTTP/1.1\r\nhost: tessera\r\n\r\n";

pub(crate) async fn connect(server: &Server) -> TcpStream {
    TcpStream::connect(server.http.base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// Everything the server sends until it closes the connection (a reset counts as closed).
pub(crate) async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    let read_all = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => {
                    answer.extend_from_slice(&buffer[..read]);
                    assert!(answer.len() <= ANSWER_BYTES_MAX, "answer too long");
                }
            }
        }
    };
    tokio::time::timeout(HANG, read_all)
        .await
        .expect("the server closes the connection");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Reads one answer to `GET /v1/health`, leaving the connection open.
pub(crate) async fn read_health(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !answer.ends_with(br#"{"status":"ok"}"#) {
        let read = tokio::time::timeout(HANG, stream.read(&mut buffer))
            .await
            .expect("the server answers")
            .unwrap();
        assert!(
            read > 0,
            "closed early: {}",
            String::from_utf8_lossy(&answer)
        );
        answer.extend_from_slice(&buffer[..read]);
        assert!(answer.len() <= ANSWER_BYTES_MAX, "answer too long");
    }
    String::from_utf8_lossy(&answer).into_owned()
}

pub(crate) fn counters(server: &Server) -> EdgeSnapshot {
    server.node.edge_counters().snapshot()
}

#[tokio::test]
async fn a_stalled_request_head_is_cut_off() {
    let server = Server::start_with(|config| config.api.header_read_timeout_ms = 200).await;
    let mut stream = connect(&server).await;
    stream.write_all(b"GET /v1/hea").await.unwrap();
    let answer = read_until_closed(&mut stream).await;
    assert_eq!(answer, "", "no answer to half a request line");
    eventually("the header timeout is counted", async || {
        counters(&server).header_timeouts == 1
    })
    .await;
    // A client that never sends a byte is cut off the same way.
    let mut silent = connect(&server).await;
    assert_eq!(read_until_closed(&mut silent).await, "");
    server.stop().await;
}

#[tokio::test]
async fn a_stalled_body_is_answered_408() {
    let server = Server::start_with(|config| config.api.body_read_timeout_ms = 200).await;
    let mut stream = connect(&server).await;
    let head = format!(
        "POST /v1/tenants HTTP/1.1\r\nhost: tessera\r\nauthorization: Bearer {ADMIN}\r\n\
         content-type: application/json\r\ncontent-length: 1000\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(br#"{"name":"a"#).await.unwrap();
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""code":"request_timeout""#), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert_eq!(counters(&server).body_timeouts, 1);
    let tenants = server.http.get("/v1/tenants", Some(ADMIN)).await;
    assert_eq!(tenants.json()["tenants"], json!([]), "nothing was created");
    server.stop().await;
}

/// Opens a connection busy with an admin request whose body never comes. Once the server asks
/// for the body (`100 Continue`) the request is in the router: the connection cannot be shed.
pub(crate) async fn busy_connection(server: &Server) -> TcpStream {
    let mut stream = connect(server).await;
    make_busy(&mut stream).await;
    stream
}

/// Starts on `stream` an admin request whose body never comes; see [`busy_connection`].
pub(crate) async fn make_busy(stream: &mut TcpStream) {
    let head = format!(
        "POST /v1/tenants HTTP/1.1\r\nhost: tessera\r\nauthorization: Bearer {ADMIN}\r\n\
         content-type: application/json\r\nexpect: 100-continue\r\ncontent-length: 100\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 256];
    while !answer.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(HANG, stream.read(&mut buffer))
            .await
            .expect("the server asks for the body")
            .unwrap();
        assert!(read > 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buffer[..read]);
        assert!(answer.len() <= ANSWER_BYTES_MAX, "answer too long");
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 100"), "{answer}");
}

#[tokio::test]
async fn connections_past_the_cap_are_refused_when_none_can_be_shed() {
    let server = Server::start_with(|config| {
        config.api.connections_max = 2;
        config.api.admin_connections_reserved = 0;
    })
    .await;
    let first = busy_connection(&server).await;
    let second = busy_connection(&server).await;
    let mut third = connect(&server).await;
    let answer = read_until_closed(&mut third).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains(r#""code":"unavailable""#), "{answer}");
    assert_eq!(counters(&server).connections_refused, 1);
    assert_eq!(counters(&server).connections_shed, 0);

    drop(first);
    let mut served = None;
    eventually("a new connection is served once one closed", async || {
        let mut stream = connect(&server).await;
        // A refused connection may be closed before the request is written.
        let _ = stream.write_all(HEALTH.as_bytes()).await;
        let answer = read_until_closed_or_health(&mut stream).await;
        let ok = answer.starts_with("HTTP/1.1 200");
        if ok {
            served = Some(stream);
        }
        ok
    })
    .await;
    drop(served);
    drop(second);

    let mut text = String::new();
    eventually("the metrics are served", async || {
        let metrics = server.http.get("/metrics", Some(ADMIN)).await;
        text = metrics.text();
        metrics.status == 200
    })
    .await;
    for family in [
        "tessera_http_connections_total",
        "tessera_http_connections_refused_total{reason=\"connections_max\"}",
        "tessera_http_connections_refused_total{reason=\"per_address\"} 0",
        "tessera_http_connections_refused_total{reason=\"admin_reserve\"} 0",
        "tessera_http_connections_shed_total",
        "tessera_http_header_timeouts_total 0",
        "tessera_http_body_timeouts_total 0",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    server.stop().await;
}

/// Reads a health answer, or whatever comes before the server closes the connection.
async fn read_until_closed_or_health(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !answer.ends_with(br#"{"status":"ok"}"#) {
        let read = tokio::time::timeout(HANG, stream.read(&mut buffer))
            .await
            .expect("the server answers or closes");
        match read {
            Ok(0) | Err(_) => break,
            Ok(read) => answer.extend_from_slice(&buffer[..read]),
        }
        assert!(answer.len() <= ANSWER_BYTES_MAX, "answer too long");
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let server = Server::start_with(|config| config.api.idle_timeout_ms = 200).await;
    let mut stream = connect(&server).await;
    stream.write_all(HEALTH.as_bytes()).await.unwrap();
    assert!(read_health(&mut stream).await.starts_with("HTTP/1.1 200"));
    assert_eq!(read_until_closed(&mut stream).await, "");
    assert_eq!(
        counters(&server).header_timeouts,
        0,
        "idle is not a header timeout"
    );
    server.stop().await;
}

/// A server that allows 200 ms to read a request head and 30 s of idle between requests.
async fn short_head_long_idle_server() -> Server {
    Server::start_with(|config| {
        config.api.header_read_timeout_ms = 200;
        config.api.idle_timeout_ms = 30_000;
    })
    .await
}

#[tokio::test]
async fn a_keep_alive_connection_may_idle_longer_than_the_header_timeout() {
    let server = short_head_long_idle_server().await;
    let mut stream = connect(&server).await;
    stream.write_all(HEALTH.as_bytes()).await.unwrap();
    read_health(&mut stream).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    stream.write_all(HEALTH.as_bytes()).await.unwrap();
    assert!(read_health(&mut stream).await.starts_with("HTTP/1.1 200"));
    server.stop().await;
}

#[tokio::test]
async fn a_head_stalled_after_an_answer_is_cut_at_the_header_timeout_not_the_idle_one() {
    let server = short_head_long_idle_server().await;
    let mut stream = connect(&server).await;
    stream.write_all(HEALTH.as_bytes()).await.unwrap();
    assert!(read_health(&mut stream).await.starts_with("HTTP/1.1 200"));
    // Idle past the header bound (allowed: the idle bound applies between requests)...
    tokio::time::sleep(Duration::from_millis(600)).await;
    // ...then the first bytes of the next request end the idle spell: from here the header
    // bound applies, and the connection is cut long before the 30 s idle bound (`HANG` is 5 s).
    stream.write_all(b"GET /v1/hea").await.unwrap();
    assert_eq!(read_until_closed(&mut stream).await, "");
    eventually("the header timeout is counted", async || {
        counters(&server).header_timeouts == 1
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn shutdown_completes_while_a_connection_is_idle() {
    // A drain far over the bound below: shutdown must close the idle connection, not wait.
    let server = Server::start_with(|config| config.api.drain_timeout_ms = 60_000).await;
    let mut stream = connect(&server).await;
    stream.write_all(HEALTH.as_bytes()).await.unwrap();
    read_health(&mut stream).await;
    tokio::time::timeout(HANG, server.stop())
        .await
        .expect("shutdown does not wait for an idle connection");
    assert_eq!(read_until_closed(&mut stream).await, "");
}

/// Sends a `POST /v1/tenants` head for `body` and its first `sent` bytes.
async fn start_tenant_post(stream: &mut TcpStream, body: &[u8], sent: usize) {
    let head = format!(
        "POST /v1/tenants HTTP/1.1\r\nhost: tessera\r\nauthorization: Bearer {ADMIN}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body[..sent]).await.unwrap();
}

/// `{"name": name}` padded with spaces to `length` bytes.
fn padded_tenant(name: &str, length: usize) -> Vec<u8> {
    let mut body = serde_json::to_vec(&json!({ "name": name })).unwrap();
    body.resize(length, b' ');
    body
}

#[tokio::test]
async fn shutdown_lets_a_request_in_flight_finish() {
    let server = Server::start_with(|config| config.api.drain_timeout_ms = 30_000).await;
    let address = server.http.base.trim_start_matches("http://").to_string();
    let mut stream = connect(&server).await;
    let body = padded_tenant("drained", 1000);
    start_tenant_post(&mut stream, &body, 10).await;
    let node = server.node.clone();
    let stopped = tokio::spawn(server.stop());
    eventually("the listener is closed", async || {
        TcpStream::connect(&address).await.is_err()
    })
    .await;
    stream.write_all(&body[10..]).await.unwrap();
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    tokio::time::timeout(HANG, stopped)
        .await
        .expect("shutdown ends once the request is answered")
        .unwrap();
    assert_eq!(node.edge_counters().snapshot().body_timeouts, 0);
}

#[tokio::test]
async fn shutdown_cuts_requests_still_in_flight_after_the_drain() {
    let server = Server::start_with(|config| config.api.drain_timeout_ms = 200).await;
    let mut stream = connect(&server).await;
    start_tenant_post(&mut stream, &padded_tenant("stalled", 1000), 10).await;
    eventually("the connection is accepted", async || {
        counters(&server).connections == 1
    })
    .await;
    // Time for the server to read the head and start waiting for the body.
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::time::timeout(HANG, server.stop())
        .await
        .expect("shutdown does not wait past the drain timeout");
    assert_eq!(read_until_closed(&mut stream).await, "");
}
