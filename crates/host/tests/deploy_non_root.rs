//! What `deploy/Dockerfile` assumes of the binary, on the real `tessera`: it runs as the image's
//! non-root user (the Dockerfile's `USER`, 10001) with its data directory on a volume —
//! in an empty directory owned by that user (a fresh volume with `fsGroup`) it creates its
//! files and serves, and a data directory it cannot create is refused at once, naming the path
//! and why. Run as root (CI), the test drops to the image's user for the node; run as another
//! user it is that user. Linux only (it reads `/proc`).
#![cfg(target_os = "linux")]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The image's user and group: the Dockerfile's `USER uid:gid`.
fn image_user() -> (u32, u32) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/Dockerfile");
    let text = std::fs::read_to_string(path).expect("deploy/Dockerfile");
    let user = text
        .lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("USER "))
        .expect("a USER instruction");
    let (uid, gid) = user.trim().split_once(':').expect("USER uid:gid");
    let id = |text: &str| text.parse::<u32>().expect("a numeric id");
    (id(uid), id(gid))
}

const ADMIN_TOKEN: &str = "deploy-non-root-admin-token-0123456789";

/// Whether this test runs as root (then the node runs as the image's user).
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").expect("/proc/self").uid() == 0
}

/// The user the node runs as here: the image's when this process is root, else this one.
fn node_user() -> (u32, u32) {
    if running_as_root() {
        let (uid, gid) = image_user();
        assert_ne!(uid, 0, "the image's user is not root");
        (uid, gid)
    } else {
        let proc = std::fs::metadata("/proc/self").expect("/proc/self");
        (proc.uid(), proc.gid())
    }
}

/// A directory the node's user may traverse, holding a copy of the binary it may execute (the
/// build's own target directory may sit under a private home). The copy is written by `cp`, not
/// by this process: the tests run on several threads, and a child forked by one of them while
/// this process held the copy open for writing would keep it open until its `exec`, so the
/// other test's `exec` of the copy failed with "Text file busy" (ETXTBSY).
fn runnable_binary(dir: &Path) -> PathBuf {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let binary = dir.join("tessera");
    let copied = Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .arg(&binary)
        .status()
        .expect("cp runs");
    assert!(copied.success(), "cp copies the binary: {copied}");
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    binary
}

/// `tessera node` as the node's user, with an empty environment but the admin token.
fn node_command(binary: &Path, data_dir: &Path, http: &str) -> Command {
    let mut command = Command::new(binary);
    command
        .args(["node", "--http", http])
        .arg("--data-dir")
        .arg(data_dir)
        .env_clear()
        .env("TESSERA_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    if running_as_root() {
        let (uid, gid) = node_user();
        std::os::unix::process::CommandExt::uid(&mut command, uid);
        std::os::unix::process::CommandExt::gid(&mut command, gid);
    }
    command
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

#[test]
fn a_data_dir_the_user_cannot_create_is_refused_naming_the_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let binary = runnable_binary(dir.path());
    // A parent the user may read but not write, as the image's / is.
    let parent = dir.path().join("root-owned");
    std::fs::create_dir(&parent).expect("mkdir");
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o555)).expect("chmod");
    let data_dir = parent.join("data");
    let port = free_port();
    let output = node_command(&binary, &data_dir, &format!("127.0.0.1:{port}"))
        .output()
        .expect("the node runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(data_dir.to_str().unwrap()) && stderr.contains("Permission denied"),
        "the error names the path and why: {stderr}"
    );
    assert!(!data_dir.exists());
}

#[test]
fn the_node_runs_as_a_non_root_user_on_an_empty_volume_it_owns() {
    let dir = tempfile::tempdir().expect("temp dir");
    let binary = runnable_binary(dir.path());
    let (uid, gid) = node_user();
    // An empty volume, owned by the user (what fsGroup does to a fresh one), mode 0700.
    let volume = dir.path().join("volume");
    std::fs::create_dir(&volume).expect("mkdir");
    std::os::unix::fs::chown(&volume, Some(uid), Some(gid)).expect("chown");
    std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let port = free_port();
    let log = dir.path().join("node.log");
    let mut child = node_command(&binary, &volume, &format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("the node starts");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = format!("http://127.0.0.1:{port}/v1/ready");
    while agent.get(&ready).call().map(|r| r.status().as_u16()).ok() != Some(200) {
        if Instant::now() > deadline || child.try_wait().expect("wait").is_some() {
            let _ = child.kill();
            panic!(
                "the node never became ready:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let status = child.wait().expect("exit");
    assert!(
        status.success(),
        "{status}: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let database = std::fs::metadata(volume.join("tessera.redb")).expect("the database");
    assert_eq!(database.uid(), uid, "the node's files belong to its user");
}
