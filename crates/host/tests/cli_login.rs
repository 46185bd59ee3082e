//! `tessera login` end to end against a real node: a login checks the token with the node and
//! keeps it in a profile of the user's config (directory 0700, file 0600), after which client
//! commands work from a directory where no `tessera up` ran; a tenant token read from standard
//! input goes in a second profile chosen with `--profile` or `TESSERA_PROFILE`; a wrong token is
//! refused at login and nothing is saved; and the precedence of `docs/cli.md` holds between a
//! named profile, `./.tessera/credentials` and the default profile.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use tessera_host::cli::Credentials;
use tessera_host::node::{Node, NodeConfig};

const ADMIN: &str = "cli-login-admin-token-0123456789";

/// A node serving its API on a free loopback port until the returned sender fires.
struct Served {
    runtime: tokio::runtime::Runtime,
    node: Arc<Node>,
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Served {
    fn start() -> Served {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let dir = tempfile::tempdir().expect("temp dir");
        let (node, url, stop) = runtime.block_on(async {
            let config = NodeConfig {
                data_dir: dir.path().to_path_buf(),
                admin_token: Some(ADMIN.into()),
                ..NodeConfig::default()
            };
            let node = Node::open(config).await.expect("node opens");
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
        Served {
            runtime,
            node,
            url,
            stop: Some(stop),
            _dir: dir,
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.runtime.block_on(self.node.shutdown());
    }
}

/// `tessera args` in `cwd` with `home` as the user's config home, `stdin` piped in, and no
/// `TESSERA_*` variables unless `env` sets them.
fn tessera(cwd: &Path, home: &Path, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .current_dir(cwd)
        .env_remove("TESSERA_URL")
        .env_remove("TESSERA_TOKEN")
        .env_remove("TESSERA_PROFILE")
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tessera binary runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("tessera exits")
}

fn assert_success(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("exists")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn after_login_commands_work_from_any_directory_with_private_credentials() {
    let served = Served::start();
    let home = tempfile::tempdir().expect("home");
    let elsewhere = tempfile::tempdir().expect("a directory where no up ran");
    let (home, elsewhere) = (home.path(), elsewhere.path());

    let login = tessera(
        home,
        home,
        &["login", &served.url, "--token", ADMIN],
        "",
        &[],
    );
    let said = assert_success(&login);
    assert!(said.contains("the admin token"), "{said}");
    let config = home.join("config").join("tessera").join("config.toml");
    assert_eq!(mode(&config), 0o600, "the config holds tokens");
    assert_eq!(mode(config.parent().unwrap()), 0o700);

    let created = tessera(
        elsewhere,
        home,
        &["tenant", "create", "acme", "--json"],
        "",
        &[],
    );
    let tenant: serde_json::Value = serde_json::from_str(&assert_success(&created)).expect("JSON");
    let token = tenant["token"]
        .as_str()
        .expect("a tenant token")
        .to_string();

    // A tenant's token, from standard input, into a profile of its own.
    let login = tessera(
        home,
        home,
        &["login", &format!("{}/", served.url), "--profile", "acme"],
        &format!("{token}\n"),
        &[],
    );
    assert!(assert_success(&login).contains("a tenant token"));
    assert_eq!(mode(&config), 0o600);
    let types = tessera(elsewhere, home, &["types", "--profile", "acme"], "", &[]);
    assert_success(&types);
    let types = tessera(
        elsewhere,
        home,
        &["types"],
        "",
        &[("TESSERA_PROFILE", "acme")],
    );
    assert_success(&types);
    // The default profile holds only the admin token, which is no tenant's.
    let types = tessera(elsewhere, home, &["types"], "", &[]);
    assert_eq!(types.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&types.stderr).contains("no token"));
    let unknown = tessera(elsewhere, home, &["types", "--profile", "nope"], "", &[]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no profile nope"));
}

#[test]
fn a_wrong_token_is_refused_at_login_and_nothing_is_saved() {
    let served = Served::start();
    let home = tempfile::tempdir().expect("home");
    let home = home.path();
    let login = tessera(
        home,
        home,
        &["login", &served.url, "--token", "not-a-token"],
        "",
        &[],
    );
    let stderr = String::from_utf8_lossy(&login.stderr);
    assert_eq!(login.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("refused the token"), "{stderr}");
    assert!(
        !home
            .join("config")
            .join("tessera")
            .join("config.toml")
            .exists()
    );

    let unreachable = tessera(
        home,
        home,
        &["login", "http://127.0.0.1:1", "--token", ADMIN],
        "",
        &[],
    );
    assert_eq!(unreachable.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unreachable.stderr).contains("cannot reach"));
}

#[test]
fn a_named_profile_beats_the_local_credentials_which_beat_the_default_profile() {
    let served = Served::start();
    let home = tempfile::tempdir().expect("home");
    let project = tempfile::tempdir().expect("a directory where up ran");
    let (home, project) = (home.path(), project.path());
    assert_success(&tessera(
        home,
        home,
        &["login", &served.url, "--token", ADMIN],
        "",
        &[],
    ));
    // A `tessera up` here once, whose node is gone.
    Credentials {
        url: "http://127.0.0.1:1".into(),
        admin_token: Some(ADMIN.into()),
        ..Credentials::default()
    }
    .save(&project.join(".tessera").join("credentials"))
    .expect("credentials");

    let local = tessera(project, home, &["tenant", "list"], "", &[]);
    assert_eq!(local.status.code(), Some(2), "the local file is used");
    assert!(String::from_utf8_lossy(&local.stderr).contains("127.0.0.1:1"));
    let named = tessera(
        project,
        home,
        &["tenant", "list", "--profile", "default"],
        "",
        &[],
    );
    assert_success(&named);
    let flag = tessera(
        project,
        home,
        &["tenant", "list", "--url", &served.url],
        "",
        &[],
    );
    assert_success(&flag);
}
