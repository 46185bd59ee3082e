//! The region's warnings that come once per message — a tell dropped with no one waiting for
//! its answer, a reply lost on its way back, a shard transfer that cannot progress — counted per kind, so that a fault failing
//! thousands of messages (a peer down, a shard without a home) writes a few lines: the first
//! of a kind in a window, then one count (`tessera_logs`). A kind names the peer and the error,
//! whose message names the shard and the reason; never the entity, whose address only the
//! logged line carries. The region task writes the counts of closed windows on its tick.

use std::sync::Arc;
use std::time::Duration;
use tessera_contract::NodeId;
use tessera_logs::{RepeatedWarnings, WarningKey};

/// How long warnings like a logged one are counted before they are summarised.
const REPEATED_WARNING_WINDOW: Duration = Duration::from_secs(10);

/// Kinds of warning counted apart within a window; warnings of other kinds share one count.
const WARNING_KINDS_MAX: usize = 256;

/// Bytes of an error that tell kinds apart: bounds what each counted kind holds.
const WARNING_KIND_ERROR_BYTES_MAX: usize = 512;

/// The region's repeated warnings, shared by its task, its handles and the tasks that send
/// replies back.
pub(crate) type RegionWarnings = Arc<RepeatedWarnings<RegionWarning>>;

/// A new, empty set of counts.
pub(crate) fn region_warnings() -> RegionWarnings {
    Arc::new(RepeatedWarnings::new(
        "region warnings",
        REPEATED_WARNING_WINDOW,
        WARNING_KINDS_MAX,
    ))
}

/// A kind of per-message warning of the region.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RegionWarning {
    /// A tell failed after it was accepted, with no one to answer.
    TellDropped { error: String },
    /// A tell could not be forwarded to `node`.
    ForwardedTellDropped { node: NodeId, error: String },
    /// The failure of an ask forwarded from `node` could not be sent back to it.
    FailureReplyLost { node: NodeId, error: String },
    /// The reply to an ask forwarded from `node` could not be sent back to it.
    AskReplyLost { node: NodeId, error: String },
    /// A shard's state could not be sent to `node` (an error: a handoff is held up).
    TransferStalled { node: NodeId, error: String },
}

impl RegionWarning {
    /// What tells `error` apart from others, at most [`WARNING_KIND_ERROR_BYTES_MAX`] of it.
    pub(crate) fn error_kind(error: &impl std::fmt::Display) -> String {
        let text = error.to_string();
        text[..text.floor_char_boundary(WARNING_KIND_ERROR_BYTES_MAX)].to_string()
    }
}

impl WarningKey for RegionWarning {
    fn warn_summary(&self, suppressed: u64, over: Duration) {
        match self {
            RegionWarning::TellDropped { error } => tracing::warn!(
                %error,
                suppressed,
                "tell dropped … and {suppressed} more in {over:.1?}"
            ),
            RegionWarning::ForwardedTellDropped { node, error } => tracing::warn!(
                %node,
                %error,
                suppressed,
                "forwarded tell dropped … and {suppressed} more in {over:.1?}"
            ),
            RegionWarning::FailureReplyLost { node, error } => tracing::warn!(
                %node,
                %error,
                suppressed,
                "failure reply lost … and {suppressed} more in {over:.1?}"
            ),
            RegionWarning::AskReplyLost { node, error } => tracing::warn!(
                %node,
                %error,
                suppressed,
                "ask reply could not be sent … and {suppressed} more in {over:.1?}"
            ),
            RegionWarning::TransferStalled { node, error } => tracing::error!(
                %node,
                %error,
                suppressed,
                "shard state transfer cannot progress … and {suppressed} more in {over:.1?}"
            ),
        }
    }
}
