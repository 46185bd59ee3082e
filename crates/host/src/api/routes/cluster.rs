//! Health and readiness (no token), Prometheus metrics and the cluster view (admin token).

use super::{ApiError, ReadQuery, path, read_consistency};
use crate::api::auth::Admin;
use crate::node::MemberAction;
use crate::node::{ClusterStatus, METRICS_CONTENT_TYPE, Node};
use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use std::sync::Arc;
use tessera_metadata::MemberRecord;

/// `GET /v1/health` → `{"status": "ok"}` while the node serves.
pub async fn health() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /v1/ready` (no token) → `200` with `{"ready": true, "state": "up", ...}` when this
/// node's member is up and in contact with a working metadata plane, else `503` with
/// `"ready": false` and the `reason`: a readiness probe.
pub async fn ready(State(node): State<Arc<Node>>) -> Result<impl IntoResponse, ApiError> {
    let readiness = node.readiness()?;
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    Ok((status, Json(readiness)))
}

/// `GET /metrics` → the Prometheus text format (admin token).
pub async fn metrics(
    State(node): State<Arc<Node>>,
    _: Admin,
) -> Result<impl IntoResponse, ApiError> {
    let text = node.render_metrics()?;
    Ok(([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text))
}

/// `GET /v1/cluster` → members (state, roles, addresses, shards owned) and the metadata
/// plane (voters, primary, view, commit).
pub async fn status(
    State(node): State<Arc<Node>>,
    _: Admin,
    consistency: Result<Query<ReadQuery>, QueryRejection>,
) -> Result<Json<ClusterStatus>, ApiError> {
    read_consistency(&node, consistency).await?;
    Ok(Json(node.cluster_status().await?))
}

/// `POST /v1/cluster/members/{node}/down` → the member, now `down`.
pub async fn down(
    State(node): State<Arc<Node>>,
    _: Admin,
    member: Result<Path<String>, PathRejection>,
) -> Result<Json<MemberRecord>, ApiError> {
    let member = path(member)?;
    Ok(Json(node.act_on_member(&member, MemberAction::Down).await?))
}

/// `POST /v1/cluster/members/{node}/up` → the member, `up` again: refused unless it is
/// `leaving` (a leave that could not hand its shards off is called off).
pub async fn up(
    State(node): State<Arc<Node>>,
    _: Admin,
    member: Result<Path<String>, PathRejection>,
) -> Result<Json<MemberRecord>, ApiError> {
    let member = path(member)?;
    Ok(Json(node.act_on_member(&member, MemberAction::Up).await?))
}

/// What a removal must say: `?state_lost=true`.
#[derive(Debug, Default, serde::Deserialize)]
pub struct RemoveQuery {
    #[serde(default)]
    state_lost: bool,
}

/// `POST /v1/cluster/members/{node}/remove?state_lost=true` → the member as it was removed.
/// Removing a member declares the state of the shards it owns lost (they restart empty on
/// other nodes once its lease has run out), so the request must say so.
pub async fn remove(
    State(node): State<Arc<Node>>,
    _: Admin,
    member: Result<Path<String>, PathRejection>,
    confirm: Result<Query<RemoveQuery>, QueryRejection>,
) -> Result<Json<MemberRecord>, ApiError> {
    let member = path(member)?;
    if !super::query(confirm)?.state_lost {
        return Err(ApiError::bad_request(
            "state_lost_not_confirmed",
            format!(
                "removing {member} declares the state of the shards it owns lost: they restart \
                 empty on other nodes; say so with ?state_lost=true (or bring it back, or \
                 leave it down to keep them waiting for it)"
            ),
        ));
    }
    Ok(Json(
        node.act_on_member(&member, MemberAction::Remove).await?,
    ))
}

/// `GET /v1/cluster/members` → `{"members": [...]}`, as in `GET /v1/cluster`.
pub async fn members(State(node): State<Arc<Node>>, _: Admin) -> Result<Json<Value>, ApiError> {
    let status = node.cluster_status().await?;
    Ok(Json(json!({ "members": status.members })))
}

/// `GET /v1/cluster/partitions` → the partition groups this node runs: each partition's
/// replicas, placement generation, the placement if it would move them, and the group's
/// view, commit, primary and contact age as this replica sees them.
pub async fn partitions_here(State(node): State<Arc<Node>>, _: Admin) -> Json<Value> {
    Json(json!({ "node": node.config().node_id, "partitions": node.partitions_here() }))
}

/// `GET /v1/cluster/shards` → the shard allocation table.
pub async fn shards(State(node): State<Arc<Node>>, _: Admin) -> Result<Json<Value>, ApiError> {
    let shards: Vec<Value> = node
        .shards()
        .await?
        .into_iter()
        .map(|(entity_type, shard, home, generation)| {
            json!({ "type": entity_type, "shard": shard, "node": home, "generation": generation })
        })
        .collect();
    Ok(Json(json!({ "shards": shards })))
}
