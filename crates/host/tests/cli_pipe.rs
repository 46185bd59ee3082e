//! `tessera status | head -1`: when stdout is closed under it, the CLI stops quietly with status
//! 0 instead of panicking. The node is a canned one-request HTTP server on loopback; stdout is a
//! pipe whose read end is closed before the CLI writes.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};

/// Serves one `GET /v1/status` with a body listing many types, then stops.
fn canned_node() -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let served = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request).unwrap();
        let types: Vec<String> = (0..2_000)
            .map(|index| {
                format!(
                    r#"{{"entity_type":"t{index}","active_version":1,"versions":1,"remember":false,"live_entities":0,"remembered_entities":0}}"#
                )
            })
            .collect();
        let body = format!(r#"{{"types":[{}]}}"#, types.join(","));
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(response.as_bytes()).unwrap();
    });
    (url, served)
}

#[test]
fn a_closed_stdout_ends_the_cli_quietly() {
    let (url, served) = canned_node();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader); // every write to stdout now fails with a broken pipe
    let output = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["status", "--url", &url, "--token", "t"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    served.join().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
