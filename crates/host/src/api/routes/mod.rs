//! The endpoints, one module per resource. Each handler authenticates with an extractor from
//! [`super::auth`], reads its body under a limit with [`super::body`] and answers errors as
//! [`ApiError`].

pub mod backup;
pub mod cluster;
pub mod dashboard;
pub mod entities;
pub mod tenants;
pub mod types;

use super::error::ApiError;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query};

/// The path parameters, or a 400 naming what was wrong with them.
pub(crate) fn path<T>(extracted: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    extracted
        .map(|Path(value)| value)
        .map_err(|rejection| ApiError::bad_request("bad_path", rejection.body_text()))
}

/// The query parameters, or a 400 naming what was wrong with them.
pub(crate) fn query<T>(extracted: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    extracted
        .map(|Query(value)| value)
        .map_err(|rejection| ApiError::bad_request("bad_query", rejection.body_text()))
}

/// `?consistency=` on the catalog reads: `local` (the default) reads this node's applied
/// catalog, which trails the primary by the commands in flight; `linearizable` first passes
/// a barrier through the metadata plane, so the read sees every write acknowledged before it.
#[derive(Debug, Default, serde::Deserialize)]
pub struct ReadQuery {
    #[serde(default)]
    consistency: Consistency,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Consistency {
    #[default]
    Local,
    Linearizable,
}

/// Waits, if `?consistency=linearizable` asks, until this node's catalog holds every write
/// acknowledged before the request; a bad value is a 400.
pub(crate) async fn read_consistency(
    node: &crate::node::Node,
    extracted: Result<Query<ReadQuery>, QueryRejection>,
) -> Result<(), ApiError> {
    match query(extracted)?.consistency {
        Consistency::Local => Ok(()),
        Consistency::Linearizable => Ok(node.sync_catalog().await?),
    }
}
