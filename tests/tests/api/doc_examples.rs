//! The curl commands of `docs/api.md`'s *Example* run as written against a node: each must be
//! answered with a success, and the counter must count. Only the node's address is put in
//! place of `localhost:7070`, the tokens the commands print are put in `$ADMIN` and `$TOKEN`,
//! and they run where `plugins/target/plugins/counter.wasm` is the test build of the counter.

use crate::support::*;
use std::process::Command;

/// The commands of the *Example* section's `sh` block: continuation lines joined, the
/// `NAME=...` placeholders left out.
fn documented_commands() -> Vec<String> {
    let docs = include_str!("../../../docs/api.md");
    let example = docs
        .split("\n## Example\n")
        .nth(1)
        .expect("an Example section");
    let block = example
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("an sh block");
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = line.trim();
        if let Some(continued) = line.strip_suffix('\\') {
            current.push_str(continued);
            continue;
        }
        current.push_str(line);
        let command = std::mem::take(&mut current);
        if command.starts_with("curl ") {
            commands.push(command);
        }
    }
    commands
}

fn curl_installed() -> bool {
    Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

/// Runs `command` in `dir` with the variables set, and returns the HTTP status and the body.
fn run(dir: &Path, command: &str, address: &str, variables: &[(&str, &str)]) -> (u16, String) {
    let command = command.replace("localhost:7070", address);
    let output = Command::new("bash")
        .arg("-c")
        .arg(format!("{command} -w '\\n%{{http_code}}'"))
        .current_dir(dir)
        .envs(variables.iter().copied())
        .output()
        .expect("bash runs");
    assert!(output.status.success(), "{command}: {output:?}");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    let (body, status) = text.rsplit_once('\n').expect("the status line");
    (status.trim().parse().expect("a status"), body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_documented_curl_examples_work_as_written() {
    if !curl_installed() {
        eprintln!("SKIPPED: curl is not installed, the documented curl examples were not run");
        return;
    }
    let commands = documented_commands();
    assert!(commands.len() >= 4, "{commands:?}");
    let server = Server::start().await;
    let address = server.http.base.trim_start_matches("http://").to_string();
    let dir = tempfile::tempdir().expect("a directory");
    let plugins = dir.path().join("plugins/target/plugins");
    std::fs::create_dir_all(&plugins).expect("the plugins directory");
    std::fs::copy(COUNTER, plugins.join("counter.wasm")).expect("counter");
    let dir_path = dir.path().to_path_buf();
    let answers = tokio::task::spawn_blocking(move || {
        let mut token = String::new();
        let mut answers = Vec::new();
        for command in &commands {
            let variables = [("ADMIN", ADMIN), ("TOKEN", token.as_str())];
            let (status, body) = run(&dir_path, command, &address, &variables);
            assert!((200..300).contains(&status), "{command}\n{status} {body}");
            if command.contains("/v1/tenants") {
                let tenant: Json = serde_json::from_str(&body).expect("the tenant");
                token = tenant["token"].as_str().expect("its token").to_string();
            }
            answers.push((command.clone(), body));
        }
        answers
    })
    .await
    .expect("the commands ran");
    let asks: Vec<&String> = answers
        .iter()
        .filter(|(command, _)| command.contains("/ask"))
        .map(|(_, body)| body)
        .collect();
    // `{"Add":1}` asked, `{"Add":1}` told (committed before its answer), `"Get"` asked.
    assert_eq!(asks, ["1", "2"], "{answers:?}");
    let state = &answers.last().expect("the state read").1;
    let state: Json = serde_json::from_str(state).expect("the state");
    assert_eq!(state["entries"][0]["value"], json!(2), "{state}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_form_body_is_refused_with_the_fix() {
    let server = Server::start().await;
    let token = server.tenant("acme", None).await;
    server.deploy(&token, "counter", COUNTER, "").await;
    let response = server
        .http
        .send(
            "POST",
            "/v1/entities/counter/c1/ask",
            Some(&token),
            Some(("application/x-www-form-urlencoded", b"{\"Add\":1}".to_vec())),
            None,
        )
        .await;
    response.assert_error(415, "unsupported_media_type");
    assert!(
        response
            .text()
            .contains("-H 'content-type: application/json'"),
        "{}",
        response.text()
    );
    server.stop().await;
}
