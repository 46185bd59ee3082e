//! For tests (the `capture` feature): what a subscriber of the test's own writes at `warn` and
//! above while it is the default on the test's thread — which covers every task of a
//! current-thread runtime —, so a test can count the lines a flood of failures writes.
//!
//! ```
//! let captured = tessera_logs::CapturedWarnings::start();
//! tracing::warn!(shard = 7, "shard down");
//! tracing::info!("not a warning");
//! assert_eq!(captured.lines_with("shard down").len(), 1);
//! assert_eq!(captured.lines().len(), 1);
//! ```

use std::io;
use std::sync::{Arc, Mutex};
use tracing::subscriber::DefaultGuard;

/// The warnings written on this thread since [`CapturedWarnings::start`], until dropped.
pub struct CapturedWarnings {
    written: Written,
    _default: DefaultGuard,
}

/// The bytes the test's subscriber writes.
#[derive(Clone, Default)]
struct Written(Arc<Mutex<Vec<u8>>>);

impl io::Write for Written {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.bytes().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Written {
    fn bytes(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl CapturedWarnings {
    /// Makes a capturing subscriber the default on this thread.
    pub fn start() -> CapturedWarnings {
        let written = Written::default();
        let writer = written.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        CapturedWarnings {
            written,
            _default: tracing::subscriber::set_default(subscriber),
        }
    }

    /// Every line written so far.
    pub fn lines(&self) -> Vec<String> {
        let text = String::from_utf8_lossy(&self.written.bytes()).into_owned();
        text.lines().map(str::to_string).collect()
    }

    /// The lines written so far that contain `text`.
    pub fn lines_with(&self, text: &str) -> Vec<String> {
        let mut lines = self.lines();
        lines.retain(|line| line.contains(text));
        lines
    }
}
