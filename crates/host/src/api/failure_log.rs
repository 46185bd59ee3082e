//! The log of requests that failed on the node's side (answered `5xx`): the first failure of a
//! kind in a window is written at `warn`, the rest are counted and written as one summary line
//! (`tessera_logs`). A shard out of reach answers every request for it `shard_unavailable`;
//! written one line each, thousands per fault buried the few lines that matter. A kind is the
//! error's code and message, and the message names the shard or node and the reason, so each
//! fault is counted apart. The accept loop writes the counts of closed windows on a timer.

use std::sync::LazyLock;
use std::time::Duration;
use tessera_logs::{RepeatedWarnings, WarningKey};

/// How long failures like a logged one are counted before they are summarised; also how often
/// the accept loop writes the summaries.
pub(super) const REPEATED_FAILURE_WINDOW: Duration = Duration::from_secs(10);

/// Kinds of failure counted apart within a window; failures of other kinds share one count.
const FAILURE_KINDS_MAX: usize = 256;

/// Bytes of a failure's message that tell kinds apart: bounds what each counted kind holds.
const FAILURE_KIND_MESSAGE_BYTES_MAX: usize = 512;

/// Every server of this process logs through the one subscriber, so it counts through one table.
static FAILURES: LazyLock<RepeatedWarnings<Failure>> = LazyLock::new(|| {
    RepeatedWarnings::new(
        "request failures",
        REPEATED_FAILURE_WINDOW,
        FAILURE_KINDS_MAX,
    )
});

/// A kind of failed request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Failure {
    code: &'static str,
    message: String,
}

impl WarningKey for Failure {
    fn warn_summary(&self, suppressed: u64, over: Duration) {
        tracing::warn!(
            code = self.code,
            message = %self.message,
            suppressed,
            "request failed … and {suppressed} more in {over:.1?}"
        );
    }
}

/// Writes a failed request at `warn`, unless one of its kind was written within the window.
pub(super) fn request_failed(code: &'static str, message: &str) {
    let kind_bytes = message.floor_char_boundary(FAILURE_KIND_MESSAGE_BYTES_MAX);
    let failure = Failure {
        code,
        message: message[..kind_bytes].to_string(),
    };
    if FAILURES.first_in_window(&failure) {
        tracing::warn!(code, message, "request failed");
    }
}

/// Writes the counts of failures whose window has closed.
pub(super) fn write_summaries() {
    FAILURES.flush();
}
