//! Durable per-entity state and the commit path, on one redb database per node.
//!
//! [`StateStore`] owns the database and the entity tables and answers reads. A message's writes
//! are gathered in a [`WriteSet`] and handed to a [`StateCommit`]: today the
//! [`GroupCommitter`], which folds the write sets of many messages into one durable redb
//! transaction; later a consensus partition, without the entity layer noticing.

mod commit;
mod store;
mod write_set;

pub use commit::{
    CommitError, CommitFuture, DirectCommitter, GroupCommitConfig, GroupCommitStats,
    GroupCommitter, StateCommit,
};
pub use store::{StateStore, StoreError};
pub use write_set::{StateChange, WriteSet};
