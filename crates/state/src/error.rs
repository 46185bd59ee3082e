//! What the state layer fails with: [`StoreError`] for reads and for opening the database,
//! [`CommitError`] for a write that did not become durable.

/// A failure of the storage engine.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database could not be opened, created or migrated.
    #[error("cannot open the state database: {0}")]
    Open(String),
    /// A read or write failed.
    #[error("state storage failed: {0}")]
    Io(String),
    /// The writer has shut down (node stopping).
    #[error("the state writer is shut down")]
    Closed,
    /// The entity's state is not on this node now (its partition's replica moved away, or
    /// is not here yet): nothing was read, and the message may run again where it is.
    #[error("the state is not here: {0}")]
    Unavailable(String),
}

impl StoreError {
    pub(crate) fn io(error: impl std::fmt::Display) -> Self {
        StoreError::Io(error.to_string())
    }
}

/// Why a write set (or a batch of remembered ids) was not made durable. The message that
/// produced it fails; nothing of it is visible.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// The storage engine failed the transaction.
    #[error("commit failed: {0}")]
    Storage(String),
    /// The committer has shut down.
    #[error("the committer is shut down")]
    Closed,
    /// A replicated partition refused the writes: the entity changed since the copy the
    /// message ran against (another node served it, or this one is no longer its primary).
    /// Nothing was written; the message may run again against the current state.
    #[error(
        "the entity changed since this copy read it (its stamp is now {stamp}): nothing was written"
    )]
    Stale {
        /// The entity's stamp now.
        stamp: u64,
    },
    /// A replicated partition could not take the writes now (too many in flight, no replica
    /// here): nothing was sent, nothing was written; the message may run again.
    #[error("the partition could not commit: {0}")]
    Unavailable(String),
    /// A replicated partition did not answer in time (no quorum, a view change): the writes
    /// were sent and may still commit. Whoever waits for the message must not take it as
    /// not run (see [`CommitError::may_have_committed`]).
    #[error("the partition did not confirm the commit, which may still land: {0}")]
    Unknown(String),
}

impl CommitError {
    /// Whether the writes may have been (or may yet be) made durable despite the error: an
    /// answer that said "not run" would let a sender run the message twice.
    ///
    /// ```
    /// use tessera_state::CommitError;
    /// assert!(CommitError::Unknown("no quorum".into()).may_have_committed());
    /// assert!(!CommitError::Stale { stamp: 3 }.may_have_committed());
    /// ```
    pub fn may_have_committed(&self) -> bool {
        matches!(self, CommitError::Unknown(_))
    }
}

impl From<StoreError> for CommitError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Closed => CommitError::Closed,
            StoreError::Unavailable(reason) => CommitError::Unavailable(reason),
            other => CommitError::Storage(other.to_string()),
        }
    }
}

impl From<CommitError> for StoreError {
    fn from(error: CommitError) -> Self {
        match error {
            CommitError::Closed => StoreError::Closed,
            CommitError::Storage(message)
            | CommitError::Unavailable(message)
            | CommitError::Unknown(message) => StoreError::Io(message),
            stale @ CommitError::Stale { .. } => StoreError::Io(stale.to_string()),
        }
    }
}
