//! `tessera up --nodes 3` stopped by a SIGINT to the `up` process alone (not to its process
//! group, as a terminal's Ctrl-C would): it forwards the stop to its two child nodes, which
//! leave cleanly — each logs its graceful stop — and everything has exited well within the
//! 10 s grace after which `up` would kill them. Run outside a repository (no plugins
//! directory), `up` deploys nothing and its hint names no type.
//!
//! The binary has no test harness: `up` starts its children as its own executable with
//! `node ...`, so this binary is `tessera` itself when [`AS_CLI_ENV`] is set (which the
//! children inherit), and the test otherwise.

use std::io::BufRead;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tessera_tests::cluster::{ADMIN, PATIENCE, get, members_up};
use tessera_tests::processes::free_address;

/// Set in the environment of this binary's children: run as `tessera` with the arguments.
const AS_CLI_ENV: &str = "TESSERA_TEST_AS_CLI";

/// The most a clean stop of three idle nodes may take: below the 10 s after which `up` kills
/// children that did not stop.
const CLEAN_STOP_MAX: Duration = Duration::from_secs(8);

const TEST: &str = "sigint_to_up_alone_stops_every_node_cleanly";

fn main() -> ExitCode {
    if std::env::var_os(AS_CLI_ENV).is_some() {
        let mut args = vec![std::ffi::OsString::from("tessera")];
        args.extend(std::env::args_os().skip(1));
        return tessera_host::cli::run_from(args);
    }
    if std::env::args().any(|arg| arg == "--list") {
        println!("{TEST}: test");
        return ExitCode::SUCCESS;
    }
    sigint_to_up_alone_stops_every_node_cleanly();
    println!("test {TEST} ... ok");
    ExitCode::SUCCESS
}

/// Kills, on drop, every process it holds that is still running (a failed test leaves none).
struct Reaper(Vec<u32>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in &self.0 {
            if is_running(*pid) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

/// Whether process `pid` exists and is not a zombie.
fn is_running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// The processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                // `pid (comm) state ppid ...`: the fields after the last ')'.
                stat.rsplit(')')
                    .next()
                    .and_then(|rest| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(parent)
            })
        })
        .collect()
}

fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sigint_to_up_alone_stops_every_node_cleanly() {
    let dir = tempfile::tempdir().expect("a directory");
    let http = free_address();
    let stderr = std::fs::File::create(dir.path().join("up.log")).expect("a log");
    let mut up: Child = Command::new(std::env::current_exe().expect("this binary"))
        .args(["up", "--nodes", "3", "--http", &http.to_string()])
        .current_dir(dir.path())
        .env(AS_CLI_ENV, "1")
        .env("TESSERA_ADMIN_TOKEN", ADMIN)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("tessera up");
    let mut reaper = Reaper(vec![up.id()]);
    let (lines, printed) = mpsc::channel();
    let stdout = up.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(line);
        }
    });
    let mut output = Vec::new();
    while !output
        .iter()
        .any(|line: &String| line.starts_with("Ctrl-C"))
    {
        let line = printed
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("up printed only {output:?}"));
        output.push(line);
    }
    let output = output.join("\n");
    assert!(
        !output.contains("counter"),
        "no type was deployed:\n{output}"
    );
    assert!(output.contains("No entity types deployed"), "{output}");

    let url = format!("http://{http}/v1/cluster");
    wait_for("three members up", || {
        let reply = get(&url, ADMIN)?;
        (reply.status == 200 && members_up(&reply.json()) == 3).then_some(())
    });
    let children = children_of(up.id());
    assert_eq!(children.len(), 2, "up runs n2 and n3: {children:?}");
    reaper.0.extend(&children);

    // SIGINT to `up` alone.
    let signalled = Instant::now();
    let sent = Command::new("kill")
        .args(["-INT", &up.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(sent.success());
    let status = wait_for("up to exit", || up.try_wait().ok().flatten());
    let stopped_in = signalled.elapsed();
    let log = |name: &str| {
        std::fs::read_to_string(dir.path().join(".tessera").join(name)).unwrap_or_default()
    };
    assert!(
        status.success(),
        "up exited with {status:?}:\n{}",
        log("../up.log")
    );
    assert!(
        stopped_in < CLEAN_STOP_MAX,
        "everything stopped {stopped_in:?} after the signal"
    );
    for pid in &children {
        assert!(!is_running(*pid), "child node {pid} is gone");
    }
    for node in ["n2.log", "n3.log"] {
        let log = log(node);
        assert!(
            log.contains("stopping the node"),
            "{node} stopped gracefully:\n{log}"
        );
    }
    let up_log = log("../up.log");
    assert!(!up_log.contains("did not stop"), "{up_log}");
    eprintln!("up and its two nodes stopped {stopped_in:?} after SIGINT to up");
}
