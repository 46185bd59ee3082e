//! A span per message, exported with OpenTelemetry once the node installs a tracer
//! ([`install`]; the host does when `OTEL_EXPORTER_OTLP_ENDPOINT` is set). A message's span
//! (`MessageSpan`) starts when it reaches this node and ends with its answer; it names the
//! entity, the plugin version and the outcome, and says how long the message waited before
//! its guest call, how long the guest ran and how long its commit took. Its parent is the span
//! that sent the message (the message's [`MessageTrace`]), so a request's entity hops form one
//! tree; the messages the guest sends carry this span's context on (`links` keeps it for tells
//! and reminders, which leave later from their durable tables).
//!
//! With no tracer installed nothing is recorded: a message without a trace costs one branch,
//! and one that came with a context (a client's `traceparent`) passes it on unchanged, so a
//! node without an exporter does not break its peers' traces.

pub(crate) mod links;

use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};
use tessera_contract::{EntityAddress, MessageError, MessageTrace, TraceContext};

/// The tracer spans go to, once installed.
static TRACER: OnceLock<BoxedTracer> = OnceLock::new();

/// Whether spans go to the installed tracer now ([`set_recording`]).
static RECORDING: AtomicBool = AtomicBool::new(false);

/// Installs the tracer this node's spans go to, and starts recording (the first call wins);
/// false if one was installed already.
pub fn install(tracer: BoxedTracer) -> bool {
    let installed = TRACER.set(tracer).is_ok();
    if installed {
        RECORDING.store(true, Ordering::Relaxed);
    }
    installed
}

/// Stops (or starts again) recording spans with the installed tracer: messages then pass the
/// context they came with on, as on a node without one. For measuring what tracing costs
/// (`benches/benches/tracing.rs`) in one process.
pub fn set_recording(on: bool) {
    RECORDING.store(on, Ordering::Relaxed);
}

/// The tracer, while spans are recorded.
fn tracer() -> Option<&'static BoxedTracer> {
    if RECORDING.load(Ordering::Relaxed) {
        TRACER.get()
    } else {
        None
    }
}

/// Whether spans are recorded on this node.
pub fn is_on() -> bool {
    tracer().is_some()
}

/// The span of a request at the node's edge (an HTTP ask or tell), the parent of the span
/// of the message it sends; `None` with no tracer installed.
///
/// ```
/// use tessera_entity::trace::EdgeSpan;
/// // No tracer installed: nothing is recorded, and the client's context passes on.
/// assert!(EdgeSpan::start("POST /v1/ask", None, Vec::new()).is_none());
/// ```
pub struct EdgeSpan {
    span: BoxedSpan,
    context: TraceContext,
}

impl EdgeSpan {
    /// Starts a server span named `name` under `parent` (the client's `traceparent`).
    pub fn start(
        name: &'static str,
        parent: Option<TraceContext>,
        attributes: Vec<KeyValue>,
    ) -> Option<EdgeSpan> {
        let tracer = tracer()?;
        let builder = tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes);
        let span = tracer.build_with_context(builder, &parent_context(parent));
        let context = own_context(span.span_context());
        Some(EdgeSpan { span, context })
    }

    /// The context the request's message carries.
    pub fn context(&self) -> TraceContext {
        self.context
    }

    /// Ends the span, with the request's error if it failed.
    pub fn end(mut self, error: Option<&str>) {
        if let Some(error) = error {
            self.span.set_status(Status::error(error.to_string()));
        }
        self.span.end();
    }
}

/// One message's trace on this node: its span, if spans are recorded here, and the context
/// the messages it sends carry.
pub(crate) struct MessageSpan {
    /// The span (`None`: no tracer here; the message passes its parent's context on).
    span: Option<BoxedSpan>,
    /// What the messages this one sends carry: this span's context, or the parent's.
    context: Option<TraceContext>,
    arrived: Instant,
    call_started: Option<Instant>,
    /// Time the guest's asks had waited (cumulative, per instance) when its call began.
    asks_waited_before: Duration,
}

impl MessageSpan {
    /// The trace of a message for `entity` that came with `trace`: a span when a tracer is
    /// installed, else the parent's context passed on; `None` when there is nothing to do
    /// (no tracer, no context).
    #[inline]
    pub(crate) fn start(
        entity: &EntityAddress,
        trace: Option<Box<MessageTrace>>,
    ) -> Option<Box<MessageSpan>> {
        // The common case, inline: no context came, and nothing is recorded here.
        if trace.is_none() && !RECORDING.load(Ordering::Relaxed) {
            return None;
        }
        MessageSpan::start_traced(entity, trace)
    }

    /// [`start`](Self::start) past its common case. Out of line: most messages never get here.
    #[inline(never)]
    fn start_traced(
        entity: &EntityAddress,
        trace: Option<Box<MessageTrace>>,
    ) -> Option<Box<MessageSpan>> {
        let (parent, arrived) = match trace {
            Some(trace) => (trace.parent, trace.arrived),
            None if is_on() => (None, Instant::now()),
            None => return None,
        };
        let Some(tracer) = tracer() else {
            return Some(Box::new(MessageSpan {
                span: None,
                context: parent,
                arrived,
                call_started: None,
                asks_waited_before: Duration::ZERO,
            }));
        };
        let start = SystemTime::now() - arrived.elapsed();
        let builder = tracer
            .span_builder("message")
            .with_kind(SpanKind::Consumer)
            .with_start_time(start)
            .with_attributes([
                KeyValue::new("tessera.tenant", entity.tenant.clone()),
                KeyValue::new("tessera.entity_type", entity.entity_type.clone()),
                KeyValue::new("tessera.entity_id", entity.id.clone()),
            ]);
        let span = tracer.build_with_context(builder, &parent_context(parent));
        let context = own_context(span.span_context());
        Some(Box::new(MessageSpan {
            span: Some(span),
            context: Some(context),
            arrived,
            call_started: None,
            asks_waited_before: Duration::ZERO,
        }))
    }

    /// What the messages this one sends carry.
    pub(crate) fn context(&self) -> Option<TraceContext> {
        self.context
    }

    /// The guest call begins on plugin `version`; the guest's asks had waited `asks_waited`
    /// so far.
    pub(crate) fn call_begins(&mut self, version: u32, asks_waited: Duration) {
        let now = Instant::now();
        self.call_started = Some(now);
        self.asks_waited_before = asks_waited;
        if let Some(span) = &mut self.span {
            let waited = now.duration_since(self.arrived);
            span.set_attribute(KeyValue::new("tessera.version", i64::from(version)));
            span.set_attribute(KeyValue::new("tessera.queue_wait_us", micros(waited)));
        }
    }

    /// The guest call ended; its asks had waited `asks_waited` by then (cumulative).
    pub(crate) fn call_ends(&mut self, asks_waited: Duration) {
        let (Some(span), Some(started)) = (&mut self.span, self.call_started) else {
            return;
        };
        let in_asks = asks_waited.saturating_sub(self.asks_waited_before);
        let guest = started.elapsed().saturating_sub(in_asks);
        span.set_attribute(KeyValue::new("tessera.guest_us", micros(guest)));
        span.set_attribute(KeyValue::new("tessera.ask_wait_us", micros(in_asks)));
    }

    /// The message's writes took `took` to commit.
    pub(crate) fn committed(&mut self, took: Duration) {
        if let Some(span) = &mut self.span {
            span.set_attribute(KeyValue::new("tessera.commit_us", micros(took)));
        }
    }

    /// Ends the span with the message's outcome.
    pub(crate) fn end(self, outcome: Result<(), &MessageError>) {
        let Some(mut span) = self.span else {
            return;
        };
        match outcome {
            Ok(()) => span.set_attribute(KeyValue::new("tessera.outcome", "ok")),
            Err(error) => {
                span.set_attribute(KeyValue::new("tessera.outcome", <&str>::from(error.kind)));
                span.set_status(Status::error(error.message.clone()));
            }
        }
        span.end();
    }
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// The OpenTelemetry context of a remote parent span (empty: a new trace).
fn parent_context(parent: Option<TraceContext>) -> Context {
    match parent {
        Some(parent) => Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from_bytes(parent.trace_id),
            SpanId::from_bytes(parent.span_id),
            if parent.sampled {
                TraceFlags::SAMPLED
            } else {
                TraceFlags::NOT_SAMPLED
            },
            true,
            TraceState::default(),
        )),
        None => Context::new(),
    }
}

/// A span's own context, for what it sends.
fn own_context(span: &SpanContext) -> TraceContext {
    TraceContext {
        trace_id: span.trace_id().to_bytes(),
        span_id: span.span_id().to_bytes(),
        sampled: span.is_sampled(),
    }
}
