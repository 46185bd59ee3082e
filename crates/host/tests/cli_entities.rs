//! `tessera entities TYPE [--after ID] [--limit N] [--json]`: the request it makes (the cursor
//! percent-encoded) and what it prints — one id per line on stdout, the count and the next
//! cursor on stderr, or the server's JSON. The node is a canned one-request HTTP server.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;

const PAGE: &str = r#"{"type":"counter","ids":["a/c","b"],"count":2,"total":5,"next_after":"b"}"#;

/// Serves one request with [`PAGE`]; hands back the request's head.
fn canned_node() -> (String, std::thread::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let served = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let read = stream.read(&mut request).unwrap();
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{PAGE}",
            PAGE.len()
        );
        stream.write_all(response.as_bytes()).unwrap();
        String::from_utf8_lossy(&request[..read]).into_owned()
    });
    (url, served)
}

fn tessera(args: &[&str]) -> (String, String, String) {
    let (url, served) = canned_node();
    let mut all = args.to_vec();
    all.extend(["--url", &url, "--token", "t"]);
    let output = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(&all)
        .output()
        .unwrap();
    let request = served.join().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    (
        request,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr,
    )
}

#[test]
fn entities_pages_by_cursor_and_prints_one_id_per_line() {
    let (request, stdout, stderr) =
        tessera(&["entities", "counter", "--after", "a/b c", "--limit", "2"]);
    assert!(
        request.starts_with("GET /v1/types/counter/entities?after=a%2Fb%20c&limit=2 HTTP/1.1"),
        "{request}"
    );
    assert!(
        request
            .to_ascii_lowercase()
            .contains("authorization: bearer t"),
        "{request}"
    );
    assert_eq!(stdout, "a/c\nb\n");
    assert!(
        stderr.contains("2 listed of 5; next page: --after b"),
        "{stderr}"
    );
}

#[test]
fn entities_json_prints_the_servers_page() {
    let (request, stdout, _) = tessera(&["entities", "counter", "--json"]);
    assert!(
        request.starts_with("GET /v1/types/counter/entities HTTP/1.1"),
        "{request}"
    );
    let printed: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let served: serde_json::Value = serde_json::from_str(PAGE).unwrap();
    assert_eq!(printed, served);
}
