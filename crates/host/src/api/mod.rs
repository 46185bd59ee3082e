//! The HTTP edge of a node: JSON (or MessagePack) in and out, bearer tokens, and the conversion
//! between the JSON clients write and the MessagePack entities read ([`tessera_codec`]).
//!
//! [`router`] maps the endpoints (listed in `docs/api.md`) onto [`Node`] methods, one module
//! per resource under [`routes`]. Every request passes the edge middleware once: it
//! authenticates the token ([`auth`]) and, only for a valid token, reads the body under its
//! route's limit ([`body`]), handing both to the handler. [`error`] is the single error shape
//! and the status table. [`serve`] runs the router on a listener until a shutdown signal, in
//! the accept loop of [`server`], which bounds connections (who gets one: `admission`) and the
//! time a client may take (`activity`). A message's request starts its trace (`trace`).

mod activity;
mod admission;
pub mod auth;
pub mod body;
pub mod error;
mod failure_log;
pub mod routes;
pub mod server;
mod trace;

pub use error::ApiError;

use crate::node::{EdgeCounters, Node};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use routes::{backup, cluster, dashboard, entities, tenants, types};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// The API's routes over `node`, with the body-buffering and tracing layers; [`serve`] runs it.
pub fn router(node: Arc<Node>) -> Router {
    Router::new()
        .route("/", get(dashboard::root))
        .route("/ui", get(dashboard::page))
        .route("/ui/dashboard.js", get(dashboard::script))
        .route("/ui/dashboard.css", get(dashboard::style))
        .route("/v1/overview", get(dashboard::overview))
        .route("/v1/health", get(cluster::health))
        .route("/v1/ready", get(cluster::ready))
        .route("/metrics", get(cluster::metrics))
        .route("/v1/tenants", post(tenants::create).get(tenants::list))
        .route("/v1/tenants/{name}", get(tenants::show))
        .route("/v1/tenants/{name}/quotas", put(tenants::update_quotas))
        .route("/v1/types", get(types::list))
        .route("/v1/types/{type}", get(types::show).delete(types::delete))
        .route("/v1/types/{type}/versions", post(types::deploy))
        .route("/v1/types/{type}/active", put(types::set_active))
        .route("/v1/types/{type}/entities", get(types::entities))
        .route("/v1/entities/{type}/{id}/tell", post(entities::tell))
        .route("/v1/entities/{type}/{id}/ask", post(entities::ask))
        .route(
            "/v1/entities/{type}/{id}/passivate",
            post(entities::passivate),
        )
        .route("/v1/entities/{type}/{id}/state", get(entities::state))
        .route("/v1/status", get(entities::status))
        .route("/v1/cluster", get(cluster::status))
        .route("/v1/cluster/members", get(cluster::members))
        .route("/v1/cluster/members/{node}/down", post(cluster::down))
        .route("/v1/cluster/members/{node}/up", post(cluster::up))
        .route("/v1/cluster/members/{node}/remove", post(cluster::remove))
        .route("/v1/cluster/shards", get(cluster::shards))
        .route("/v1/cluster/partitions", get(cluster::partitions_here))
        .route("/v1/backup", get(backup::plan))
        .route("/v1/backup/plugins/{sha256}", get(backup::plugin))
        .route("/v1/backup/shards", get(backup::shards))
        .route("/v1/restore/tenants", post(backup::tenant))
        .route("/v1/restore/versions", post(backup::version))
        .route("/v1/restore/active", post(backup::active))
        .route("/v1/restore/shards", post(backup::shard))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(node.clone(), edge))
        .layer(middleware::from_fn(trace_request))
        .with_state(node)
}

/// Serves the API on `listener` until `shutdown` completes, then stops accepting and lets
/// requests in flight finish for up to `api.drain_timeout_ms`. Connections, request heads,
/// bodies and idle keep-alive connections are bounded by the node's `[api]` limits
/// (`docs/api.md`). The node itself is not shut down here.
///
/// ```no_run
/// # async fn example(node: std::sync::Arc<tessera_host::node::Node>) -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:7070").await?;
/// tessera_host::api::serve(node, listener, async { let _ = tokio::signal::ctrl_c().await; }).await
/// # }
/// ```
pub async fn serve(
    node: Arc<Node>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::serve(node.clone(), router(node), listener, shutdown).await
}

/// One span per request; handlers record the tenant, entity type and entity id on it.
async fn trace_request(request: Request, next: Next) -> Response {
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        tenant = tracing::field::Empty,
        entity_type = tracing::field::Empty,
        id = tracing::field::Empty,
        status = tracing::field::Empty,
    );
    async move {
        let response = next.run(request).await;
        tracing::Span::current().record("status", response.status().as_u16());
        tracing::debug!("request done");
        response
    }
    .instrument(span)
    .await
}

/// The edge, once per request: authenticates the token (and tells the request's connection,
/// which on the admin reserve takes admin requests only: [`admission`]), and for a request with
/// a body reads the body under its route's limit and within `api.body_read_timeout_ms` — only
/// for a valid token, so an unauthenticated client cannot make the node buffer anything. Both
/// go to the handler in the request's extensions. A refusal here leaves the body unread and
/// closes the connection.
async fn edge(State(node): State<Arc<Node>>, mut request: Request, next: Next) -> Response {
    let principal = auth::principal(request.headers(), &node);
    if let Some(connection) = request.extensions().get::<admission::ConnectionRef>()
        && let Err(refused) = connection.check(&principal)
    {
        EdgeCounters::bump(&node.edge_counters().connections_refused_admin_reserve);
        return closing(refused);
    }
    let headers = request.headers();
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    let has_body = headers.contains_key(header::TRANSFER_ENCODING) || declared.unwrap_or(0) > 0;
    if has_body {
        if let Err(error) = &principal {
            return closing(error.clone());
        }
        let limits = &node.config().api;
        let path = request.uri().path();
        // A restored version carries a plugin, a restored shard part up to 4 MiB of rows.
        let limit = if path.ends_with("/versions") || path == "/v1/restore/shards" {
            limits.plugin_body_bytes_max
        } else {
            limits.request_body_bytes_max
        };
        let timeout = Duration::from_millis(limits.body_read_timeout_ms);
        let (parts, body) = request.into_parts();
        match body::read_limited(&parts.headers, body, limit, timeout).await {
            Ok(bytes) => {
                request = Request::from_parts(parts, Body::empty());
                request.extensions_mut().insert(body::RequestBody(bytes));
            }
            Err(error) => {
                if error.status() == StatusCode::REQUEST_TIMEOUT {
                    EdgeCounters::bump(&node.edge_counters().body_timeouts);
                }
                return closing(error);
            }
        }
    }
    request
        .extensions_mut()
        .insert(auth::Authenticated(principal));
    next.run(request).await
}

/// An early refusal that leaves the request body unread.
fn closing(error: ApiError) -> Response {
    let mut response = error.into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method",
    )
}
