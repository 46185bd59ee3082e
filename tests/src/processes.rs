//! Nodes in child processes for the tests and benchmarks that need real processes: the
//! calling binary re-runs itself with [`CHILD_ARGS_ENV`] set, and the child runs the real
//! `tessera` command line ([`run_child_if_asked`]) until it is killed or stops.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, ExitCode, Stdio};

/// Set in a child's environment: the `tessera` arguments it runs, as a JSON array.
pub const CHILD_ARGS_ENV: &str = "TESSERA_CHILD_ARGS";

/// In a child (with [`CHILD_ARGS_ENV`] set): runs the command line and exits, 0 on success
/// and 3 otherwise. In any other process it returns at once.
pub fn run_child_if_asked() {
    let Ok(args) = std::env::var(CHILD_ARGS_ENV) else {
        return;
    };
    let args: Vec<String> = serde_json::from_str(&args).expect("child arguments");
    exit_with_parent();
    let exit = tessera_host::cli::run_from(args);
    eprintln!("the node exited: {exit:?}");
    std::process::exit(if exit == ExitCode::SUCCESS { 0 } else { 3 });
}

/// Ends this child when the test that started it is gone (its parent changes: a panicking
/// test that never reached its cleanup must not leave nodes running).
fn exit_with_parent() {
    let parent = std::os::unix::process::parent_id();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_millis(500));
            if std::os::unix::process::parent_id() != parent {
                eprintln!("the test that started this node is gone: exiting");
                std::process::exit(4);
            }
        }
    });
}

/// A loopback address that was free a moment ago, outside Linux's ephemeral port range
/// (32768-60999): a node started long after the pick (a joiner, a restart) would otherwise
/// race every connection and port-0 listener on the machine for it.
pub fn free_address() -> SocketAddr {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 20_000;
    const PORTS: u16 = 12_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    // Spread processes over the range so that concurrent test binaries rarely probe alike.
    let start = (std::process::id() % u32::from(PORTS)) as u16;
    for _ in 0..PORTS {
        let offset = (start + NEXT.fetch_add(1, Ordering::Relaxed) % PORTS) % PORTS;
        let address = SocketAddr::from(([127, 0, 0, 1], FIRST + offset));
        if TcpListener::bind(address).is_ok() {
            return address;
        }
    }
    let probe = TcpListener::bind("127.0.0.1:0").expect("probe port");
    probe.local_addr().expect("probe address")
}

/// Starts this binary again as `tessera <args>` with `admin_token`, passing `harness_args` to
/// the binary's own harness (a test filter, say) and logging to `log`.
pub fn spawn_node(
    harness_args: &[&str],
    args: &[String],
    admin_token: &str,
    log_level: &str,
    log: std::fs::File,
    env: &[(String, String)],
) -> Child {
    let mut all = vec!["tessera".to_string()];
    all.extend(args.iter().cloned());
    Command::new(std::env::current_exe().expect("this binary"))
        .envs(env.iter().map(|(name, value)| (name, value)))
        .args(harness_args)
        .env(CHILD_ARGS_ENV, serde_json::to_string(&all).expect("args"))
        .env("TESSERA_ADMIN_TOKEN", admin_token)
        .env("RUST_LOG", log_level)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("child node")
}
