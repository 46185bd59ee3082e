//! A request's trace at the edge: the client's W3C `traceparent` header read, a server span
//! started for the request when the node exports traces, and the trace context the request's
//! message carries into the entity layer (the span's, or the client's when this node records
//! nothing). See `docs/observability.md`.

use super::ApiError;
use axum::http::HeaderMap;
use tessera_contract::{EntityAddress, MessageTrace, TraceContext};
use tessera_entity::trace::EdgeSpan;

/// The W3C trace context header.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// One request's trace.
pub(crate) struct RequestTrace {
    edge: Option<EdgeSpan>,
    parent: Option<TraceContext>,
}

impl RequestTrace {
    /// Reads the client's `traceparent` (a malformed one is ignored, as the specification
    /// asks: the request starts a trace of its own) and starts the request's span `name`.
    pub(crate) fn start(name: &'static str, headers: &HeaderMap, to: &EntityAddress) -> Self {
        let parent = headers
            .get(TRACEPARENT_HEADER)
            .and_then(|value| value.to_str().ok())
            .and_then(TraceContext::from_traceparent);
        let edge = EdgeSpan::start(
            name,
            parent,
            vec![
                opentelemetry::KeyValue::new("tessera.tenant", to.tenant.clone()),
                opentelemetry::KeyValue::new("tessera.entity_type", to.entity_type.clone()),
                opentelemetry::KeyValue::new("tessera.entity_id", to.id.clone()),
            ],
        );
        RequestTrace { edge, parent }
    }

    /// What the request's message carries: `None` when there is no trace to continue.
    pub(crate) fn message_trace(&self) -> Option<MessageTrace> {
        let parent = self.edge.as_ref().map(EdgeSpan::context).or(self.parent)?;
        Some(MessageTrace::new(Some(parent)))
    }

    /// Ends the request's span with its outcome.
    pub(crate) fn end<T>(self, outcome: &Result<T, ApiError>) {
        if let Some(edge) = self.edge {
            edge.end(outcome.as_ref().err().map(ApiError::message));
        }
    }
}
