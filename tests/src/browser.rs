//! A real headless Chromium (Debian's `chromium` package) for the dashboard's tests: finding
//! it, loading a page until its scripts have run and its polls answered (`--virtual-time-budget`
//! lets timers and fetches run without waiting for the wall clock), and dumping the DOM or
//! writing a screenshot. Each run gets a fresh profile, so nothing (no sessionStorage) carries
//! over from one run to the next.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set to the path of a Chromium (or Chrome) binary to use instead of looking one up.
pub const CHROMIUM_ENV: &str = "TESSERA_CHROMIUM";

/// How long one headless run may take before the test fails (a loaded CI machine starts a
/// browser slowly; the page's own work is bounded by the virtual time budget).
pub const BROWSER_PATIENCE: Duration = Duration::from_secs(120);

/// The virtual time a page gets to run its scripts, polls and timers, in milliseconds: room
/// for several of the dashboard's 3 s polls, so its rate charts have points.
pub const VIRTUAL_TIME_BUDGET_MS: u64 = 10_000;

/// The browser to drive: [`CHROMIUM_ENV`], else `chromium` or `chromium-browser` on `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(CHROMIUM_ENV) {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// What one headless run produces.
pub enum Capture<'a> {
    /// The DOM after the page ran, serialized (on stdout).
    Dom,
    /// A PNG of the window, written to the path.
    Screenshot(&'a Path),
}

/// Loads `url` in a fresh headless `chromium` (a `width`×`height` window) and captures it; the
/// serialized DOM for [`Capture::Dom`], else an empty string. Panics with the browser's
/// stderr if it fails or outlives [`BROWSER_PATIENCE`].
pub fn headless(chromium: &Path, url: &str, capture: Capture<'_>, size: (u32, u32)) -> String {
    let profile = tempfile::tempdir().expect("a browser profile directory");
    let mut command = Command::new(chromium);
    command
        .arg("--headless")
        .arg("--no-sandbox") // tests and CI run as root, where the sandbox refuses to start
        .arg("--disable-gpu")
        .arg("--no-first-run")
        .arg("--hide-scrollbars")
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={},{}", size.0, size.1))
        .arg(format!("--virtual-time-budget={VIRTUAL_TIME_BUDGET_MS}"));
    match capture {
        Capture::Dom => command.arg("--dump-dom"),
        Capture::Screenshot(path) => command.arg(format!("--screenshot={}", path.display())),
    };
    // Files, not pipes: a DOM larger than a pipe's buffer must not stall the browser.
    let (stdout_path, stderr_path) = (profile.path().join("out"), profile.path().join("err"));
    let file = |path: &Path| Stdio::from(std::fs::File::create(path).expect("an output file"));
    let mut child = command
        .arg(url)
        .stdout(file(&stdout_path))
        .stderr(file(&stderr_path))
        .spawn()
        .expect("chromium starts");
    let deadline = Instant::now() + BROWSER_PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("chromium's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish {url} within {BROWSER_PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(status.success(), "chromium failed on {url}: {stderr}");
    std::fs::read_to_string(&stdout_path).expect("chromium's output")
}
