//! The cluster commands end to end: `tessera cluster status` against a real node (its only
//! member, up, the primary of its own plane), and `tessera certs create` writing a CA and node
//! certificates that it keeps on a second run, refusing a bad node id with exit code 2.

use std::process::Command;
use std::sync::Arc;
use tessera_host::node::{Node, NodeConfig};

const ADMIN: &str = "cli-cluster-admin-token-0123456789";

fn tessera(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .env_remove("TESSERA_URL")
        .env_remove("TESSERA_TOKEN")
        .output()
        .expect("the tessera binary runs")
}

#[test]
fn cluster_status_shows_the_node_as_an_up_member_and_primary() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let (node, url, stop) = runtime.block_on(async {
        let config = NodeConfig {
            data_dir: dir.path().to_path_buf(),
            admin_token: Some(ADMIN.into()),
            node_id: "alpha".into(),
            ..NodeConfig::default()
        };
        let node: Arc<Node> = Node::open(config).await.expect("node opens");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(tessera_host::api::serve(
            node.clone(),
            listener,
            async move {
                let _ = stopped.await;
            },
        ));
        (node, url, stop)
    });
    let text = tessera(&["cluster", "status", "--url", &url, "--token", ADMIN]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&text.stderr)
    );
    assert!(stdout.contains("primary alpha"), "{stdout}");
    assert!(stdout.contains("voters: alpha"), "{stdout}");
    let row = stdout
        .lines()
        .find(|line| line.starts_with("alpha "))
        .unwrap_or_else(|| panic!("a row for alpha in {stdout}"));
    assert!(row.split_whitespace().nth(1) == Some("up"), "{row}");

    let json = tessera(&[
        "cluster", "status", "--json", "--url", &url, "--token", ADMIN,
    ]);
    let status: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON output");
    assert_eq!(status["members"][0]["node"], "alpha");
    assert_eq!(status["members"][0]["state"], "up");
    assert_eq!(status["primary"], "alpha");

    let refused = tessera(&[
        "cluster",
        "status",
        "--url",
        &url,
        "--token",
        "not-the-admin",
    ]);
    assert_eq!(refused.status.code(), Some(1), "a wrong token is refused");
    let _ = stop.send(());
    runtime.block_on(node.shutdown());
}

#[test]
fn certs_create_writes_a_ca_and_node_certificates_and_keeps_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let certs = dir.path().join("certs");
    let certs_arg = certs.to_str().expect("a UTF-8 path");
    let first = tessera(&["certs", "create", "--dir", certs_arg, "--nodes", "n1,n2"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    for file in ["ca.pem", "ca.key", "n1.pem", "n1.key", "n2.pem", "n2.key"] {
        assert!(certs.join(file).is_file(), "{file} written");
    }
    let ca = std::fs::read(certs.join("ca.pem")).expect("ca.pem");
    let n1 = std::fs::read(certs.join("n1.pem")).expect("n1.pem");
    let second = tessera(&["certs", "create", "--dir", certs_arg, "--nodes", "n1,n3"]);
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(
        std::fs::read(certs.join("ca.pem")).expect("ca.pem"),
        ca,
        "the CA is kept"
    );
    assert_eq!(
        std::fs::read(certs.join("n1.pem")).expect("n1.pem"),
        n1,
        "n1 is kept"
    );
    assert!(certs.join("n3.pem").is_file(), "n3 is added");
    tessera_cluster::load_identity(&certs, "n3").expect("n3's identity loads");

    let bad = tessera(&[
        "certs",
        "create",
        "--dir",
        certs_arg,
        "--nodes",
        "Not_A_Label",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("error"),
        "the refusal says why"
    );
    assert!(!certs.join("Not_A_Label.pem").exists());
}
