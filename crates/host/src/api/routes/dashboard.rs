//! The dashboard: one static page (`GET /ui`, and `GET /` redirects there) with its script and
//! style, embedded in the binary and served to anyone — they hold no data. The page shows a
//! login form until it has the admin token, keeps the token in the tab's `sessionStorage`, and
//! reads everything it shows from the JSON API with `Authorization: Bearer` (`/v1/overview`,
//! `/v1/cluster/shards`), which refuses a request without the admin token. No cookie is ever
//! set, so there is no session on the node and nothing a cross-site request could ride on. See
//! `docs/dashboard.md`.
//!
//! The responses forbid inline script and style and every origin but the node's own
//! (`Content-Security-Policy`), framing, and content sniffing: the script inserts what the API
//! returns as text, never as markup.

use super::ApiError;
use crate::api::auth::Admin;
use crate::node::{Node, Overview};
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Redirect};
use std::sync::Arc;

/// The page: markup only; the login form and the empty panels the script fills.
const PAGE: &str = include_str!("../dashboard/index.html");
/// The page's script.
const SCRIPT: &str = include_str!("../dashboard/dashboard.js");
/// The page's style.
const STYLE: &str = include_str!("../dashboard/dashboard.css");

/// What the dashboard's responses allow the browser to load and run: only the node's own
/// script, style and API; no inline code, no frames, no forms posted anywhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// `GET /` → a redirect to `/ui`.
pub async fn root() -> Redirect {
    Redirect::to("/ui")
}

/// `GET /ui` → the dashboard page (no token: it holds no data).
pub async fn page() -> impl IntoResponse {
    asset("text/html; charset=utf-8", PAGE)
}

/// `GET /ui/dashboard.js`.
pub async fn script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /ui/dashboard.css`.
pub async fn style() -> impl IntoResponse {
    asset("text/css; charset=utf-8", STYLE)
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

/// `GET /v1/overview` (admin token) → what the dashboard shows: the cluster view, each node's
/// counters and entities, every tenant's types, the shard moves in flight.
pub async fn overview(State(node): State<Arc<Node>>, _: Admin) -> Result<Json<Overview>, ApiError> {
    Ok(Json(node.overview().await?))
}
