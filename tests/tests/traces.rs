//! Traces across a cluster of three `tessera node` processes that export to a small OTLP/HTTP
//! receiver in this test: a client's request with a W3C `traceparent` is one trace whose tree
//! follows the request through three entities on three nodes (asks that cross nodes), through a
//! tell that waits in the durable outbox, and through a reminder's firing; each message span
//! names its entity, version and outcome and says how long it waited and ran.
//!
//! Each node is this test binary re-run as a child (`tessera_tests::processes`).

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Relays woken to find one on each node (each misses a given node with chance 2/3).
const CANDIDATES: usize = 40;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by a_request_is_one_trace_across_entities_nodes_the_outbox_and_a_reminder as its child processes"]
fn traces_child_node() {
    run_child_if_asked();
}

/// One span as the receiver got it.
#[derive(Clone, Debug)]
struct Span {
    trace_id: String,
    span_id: String,
    parent: String,
    name: String,
    /// The node that exported it (`service.instance.id`).
    node: String,
    attributes: BTreeMap<String, String>,
}

impl Span {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

fn text(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .filter_map(|attribute| {
            let value = match attribute.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(value) => value.clone(),
                AnyValue::IntValue(value) => value.to_string(),
                AnyValue::BoolValue(value) => value.to_string(),
                other => format!("{other:?}"),
            };
            Some((attribute.key.clone(), value))
        })
        .collect()
}

/// An OTLP/HTTP trace receiver (protobuf) on loopback, keeping every span it is sent.
fn start_receiver() -> (String, Arc<Mutex<Vec<Span>>>) {
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let kept = spans.clone();
    let (address_sender, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("receiver runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("receiver listens");
            let address = listener.local_addr().expect("receiver address");
            address_sender.send(address).expect("address sent");
            let receive = move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                        return axum::http::StatusCode::BAD_REQUEST;
                    };
                    let mut kept = kept.lock().expect("spans");
                    for resource_spans in request.resource_spans {
                        let resource = resource_spans
                            .resource
                            .map(|resource| text(&resource.attributes))
                            .unwrap_or_default();
                        let node = resource
                            .get("service.instance.id")
                            .cloned()
                            .unwrap_or_default();
                        for scope in resource_spans.scope_spans {
                            for span in scope.spans {
                                kept.push(Span {
                                    trace_id: hex::encode(&span.trace_id),
                                    span_id: hex::encode(&span.span_id),
                                    parent: hex::encode(&span.parent_span_id),
                                    name: span.name.clone(),
                                    node: node.clone(),
                                    attributes: text(&span.attributes),
                                });
                            }
                        }
                    }
                    axum::http::StatusCode::OK
                }
            };
            let app = axum::Router::new().route("/v1/traces", axum::routing::post(receive));
            axum::serve(listener, app).await.expect("receiver serves");
        });
    });
    let address = address.recv().expect("the receiver's address");
    (format!("http://{address}"), spans)
}

/// Asks `entity_type/id` through node 1 with `traceparent`, expecting 200.
fn ask(
    cluster: &Cluster,
    token: &str,
    entity: (&str, &str),
    body: &serde_json::Value,
    traceparent: &str,
) {
    let url = format!(
        "{}/v1/entities/{}/{}/ask",
        cluster.url(0),
        entity.0,
        entity.1
    );
    let request = ureq::http::Request::post(&url)
        .header("authorization", format!("Bearer {token}"))
        .header("traceparent", traceparent)
        .header("content-type", "application/json")
        .body(body.to_string())
        .expect("a request");
    let status = ureq::run(request).map(|reply| reply.status().as_u16());
    assert!(matches!(status, Ok(200)), "ask {entity:?}: {status:?}");
}

/// The node that owns entity `id` of `entity_type` (its shard's home), once allocated.
fn owner(cluster: &Cluster, entity_type: &str, id: &str) -> Option<String> {
    let shards = tessera_host::node::NodeConfig::default()
        .sharding
        .num_shards;
    let shard = tessera_sharding::FnvExtractor::new(shards);
    let shard = tessera_sharding::ShardExtractor::shard_of(&shard, id);
    let reply = get(&format!("{}/v1/cluster/shards", cluster.url(0)), ADMIN)?;
    let table = reply.json();
    table["shards"].as_array()?.iter().find_map(|row| {
        let ours = row["type"].as_str()?.ends_with(&format!("/{entity_type}"))
            && row["shard"].as_u64()? == u64::from(shard);
        ours.then(|| row["node"].as_str().map(str::to_string))?
    })
}

/// The spans of `trace`, once `count` of them arrived.
fn trace_of(cluster: &Cluster, spans: &Mutex<Vec<Span>>, trace: &str, count: usize) -> Vec<Span> {
    eventually(&format!("{count} spans of trace {trace}"), cluster, || {
        let of_trace: Vec<Span> = spans
            .lock()
            .expect("spans")
            .iter()
            .filter(|span| span.trace_id == trace)
            .cloned()
            .collect();
        (of_trace.len() >= count).then_some(of_trace)
    })
}

fn message_span<'a>(spans: &'a [Span], entity_type: &str, id: &str) -> &'a Span {
    spans
        .iter()
        .find(|span| {
            span.name == "message"
                && span.attribute("tessera.entity_type") == Some(entity_type)
                && span.attribute("tessera.entity_id") == Some(id)
        })
        .unwrap_or_else(|| panic!("no message span of {entity_type}/{id}: {spans:#?}"))
}

#[test]
fn a_request_is_one_trace_across_entities_nodes_the_outbox_and_a_reminder() {
    let (endpoint, spans) = start_receiver();
    let cluster = Cluster::new(&NODES, NODES.len(), "traces_child_node")
        .with_env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .with_env("OTEL_BSP_SCHEDULE_DELAY", "100");
    cluster.start_until_up(NODES.len());
    let token = create_tenant(&cluster, 0, "acme").expect("a tenant");
    for (entity_type, plugin) in [
        ("relay", tessera_tests::RELAY),
        ("counter", tessera_tests::COUNTER),
        ("reminder", tessera_tests::REMINDER),
    ] {
        let plugin = std::fs::read(plugin).expect("plugin");
        let url = format!("{}/v1/types/{entity_type}/versions", cluster.url(0));
        let reply = request("POST", &url, &token, Some(("application/wasm", plugin)))
            .expect("deploy answered");
        assert_eq!(reply.status, 201, "deploy {entity_type}: {}", reply.body);
        for index in 0..NODES.len() {
            wait_bound(&cluster, index, &token, entity_type, 1);
        }
    }

    // A relay on each node: wake candidates (allocating their shards), then pick by owner.
    let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in 0..CANDIDATES {
        let id = format!("r{n}");
        let url = format!("{}/v1/entities/relay/{id}/ask", cluster.url(0));
        let reply = post_json(&url, &token, &json!("Sent")).expect("answered");
        assert_eq!(reply.status, 200, "{id}: {}", reply.body);
        let home = eventually("the relay's shard allocated", &cluster, || {
            owner(&cluster, "relay", &id)
        });
        by_node.entry(home).or_default().push(id);
    }
    let [first, second, third] = NODES.map(|node| &by_node[node][0]);

    // An ask through n1 to a relay on n1, which asks one on n2, which asks one on n3.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let bounce = json!({ "Bounce": { "path": [second, third] } });
    ask(
        &cluster,
        &token,
        ("relay", first),
        &bounce,
        &format!("00-{trace}-{client_span}-01"),
    );
    let tree = trace_of(&cluster, &spans, trace, 4);
    let edge = tree
        .iter()
        .find(|span| span.name == "ask")
        .unwrap_or_else(|| panic!("no edge span: {tree:#?}"));
    assert_eq!(
        edge.parent, client_span,
        "the edge span continues the client's"
    );
    let hops = [first, second, third].map(|id| message_span(&tree, "relay", id));
    assert_eq!(hops[0].parent, edge.span_id, "{tree:#?}");
    assert_eq!(hops[1].parent, hops[0].span_id, "{tree:#?}");
    assert_eq!(hops[2].parent, hops[1].span_id, "{tree:#?}");
    assert_eq!(
        hops.map(|span| span.node.as_str()),
        NODES,
        "each hop is recorded where it ran"
    );
    for span in hops {
        assert_eq!(span.attribute("tessera.outcome"), Some("ok"), "{span:#?}");
        assert_eq!(span.attribute("tessera.version"), Some("1"), "{span:#?}");
        assert_eq!(span.attribute("tessera.tenant"), Some("acme"), "{span:#?}");
        for timing in ["tessera.queue_wait_us", "tessera.guest_us"] {
            let micros = span
                .attribute(timing)
                .and_then(|value| value.parse::<i64>().ok());
            assert!(
                micros.is_some_and(|micros| micros >= 0),
                "{timing}: {span:#?}"
            );
        }
    }

    // A tell through the durable outbox: the counter's span is a child of the teller's.
    let trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    let tell = json!({ "TellAdd": { "entity_type": "counter", "id": "c1", "amount": 2 } });
    ask(
        &cluster,
        &token,
        ("relay", second),
        &tell,
        &format!("00-{trace}-{client_span}-01"),
    );
    let tree = trace_of(&cluster, &spans, trace, 3);
    let teller = message_span(&tree, "relay", second);
    let counter = message_span(&tree, "counter", "c1");
    assert_eq!(counter.parent, teller.span_id, "{tree:#?}");
    assert!(
        counter.attribute("tessera.commit_us").is_some(),
        "the counter's add committed: {counter:#?}"
    );

    // A reminder's firing: a child of the message that scheduled it.
    let trace = "6bf92f3577b34da6a3ce929d0e0e4738";
    let remind = json!({ "Remind": { "delay_ms": 200, "note": "later" } });
    ask(
        &cluster,
        &token,
        ("reminder", "m1"),
        &remind,
        &format!("00-{trace}-{client_span}-01"),
    );
    let tree = trace_of(&cluster, &spans, trace, 3);
    let edge = tree
        .iter()
        .find(|span| span.name == "ask")
        .unwrap_or_else(|| panic!("no edge span: {tree:#?}"));
    let scheduled = tree
        .iter()
        .find(|span| span.name == "message" && span.parent == edge.span_id)
        .unwrap_or_else(|| panic!("no scheduling span: {tree:#?}"));
    let fired = tree
        .iter()
        .find(|span| span.name == "message" && span.parent == scheduled.span_id)
        .unwrap_or_else(|| panic!("no firing span under the scheduling one: {tree:#?}"));
    assert_eq!(fired.attribute("tessera.entity_id"), Some("m1"));

    // A request without a traceparent starts a trace of its own.
    let before = spans.lock().expect("spans").len();
    let reply = ask_counter(&cluster, 0, &token, "c2", 1);
    assert_eq!(reply.status, 200, "{}", reply.body);
    let root = eventually("a root trace for an untraced request", &cluster, || {
        let spans = spans.lock().expect("spans");
        spans[before..]
            .iter()
            .find(|span| span.name == "ask" && span.parent.is_empty())
            .cloned()
    });
    let own = trace_of(&cluster, &spans, &root.trace_id, 2);
    assert_eq!(message_span(&own, "counter", "c2").parent, root.span_id);
}
