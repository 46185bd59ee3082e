//! What a node operation can fail with, in terms a client can act on.

use crate::envelope::MessageError;
use crate::metadata::MetadataError;

/// Why a node operation failed. Nothing changed when one is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// No or an unknown token.
    #[error("missing or unknown token")]
    Unauthorized,
    /// The token is valid but may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The named thing does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// The uploaded plugin is unusable.
    #[error("{0}")]
    BadPlugin(String),
    /// The thing exists already.
    #[error("{0}")]
    Conflict(String),
    /// A body or upload is over its limit.
    #[error("{0}")]
    TooLarge(String),
    /// A tenant quota refused the request.
    #[error("{0}")]
    Quota(String),
    /// A message to an entity failed.
    #[error(transparent)]
    Message(#[from] MessageError),
    /// A bug or an I/O failure.
    #[error("{0}")]
    Internal(String),
}

impl From<MetadataError> for NodeError {
    fn from(error: MetadataError) -> Self {
        match error {
            MetadataError::InvalidName(_) | MetadataError::InvalidQuotas(_) => {
                NodeError::BadRequest(error.to_string())
            }
            MetadataError::TenantExists(_) => NodeError::Conflict(error.to_string()),
            MetadataError::NoTenant(_)
            | MetadataError::NoType(_, _)
            | MetadataError::NoVersion(_, _)
            | MetadataError::NoPlugin(_) => NodeError::NotFound(error.to_string()),
            MetadataError::TooManyVersions(_) => NodeError::Quota(error.to_string()),
            _ => NodeError::Internal(error.to_string()),
        }
    }
}
