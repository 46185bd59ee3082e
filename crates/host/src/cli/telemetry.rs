//! Trace export for `tessera node`: OpenTelemetry's OTLP exporter (HTTP, protobuf), configured
//! by the standard variables — `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` — and off
//! when no endpoint is set (or `OTEL_SDK_DISABLED=true`, or `OTEL_TRACES_EXPORTER=none`).
//! Spans leave in batches from the SDK's own thread; a collector that is down loses spans,
//! never messages. See `docs/observability.md`.

use opentelemetry::KeyValue;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

/// The variables that turn export on.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// A running trace exporter; [`Telemetry::shutdown`] sends what is still batched.
pub(super) struct Telemetry {
    provider: SdkTracerProvider,
}

/// Whether the environment asks for trace export.
fn wanted() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|value| !value.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|value| value.trim() == "true")
        || std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|value| value.trim() == "none");
    !disabled && ENDPOINT_VARIABLES.iter().any(|name| set(name))
}

/// Starts exporting this node's spans if the environment asks for it (`None` if not). Call
/// it outside the async runtime: the exporter's HTTP client runs its own.
pub(super) fn start(node_id: &str) -> Result<Option<Telemetry>, String> {
    if !wanted() {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|error| format!("cannot start the OTLP trace exporter: {error}"))?;
    let mut resource = Resource::builder()
        .with_attribute(KeyValue::new("service.instance.id", node_id.to_string()));
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name("tessera");
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("tessera");
    tessera_entity::trace::install(BoxedTracer::new(Box::new(tracer)));
    tracing::info!("exporting traces over OTLP");
    Ok(Some(Telemetry { provider }))
}

impl Telemetry {
    /// Sends the spans still batched and stops the exporter.
    pub(super) fn shutdown(self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "the trace exporter did not shut down cleanly");
        }
    }
}
