//! The instance pool under one tenant's flood (issue 33, finding 11): a tenant's entities
//! waiting at its gate to run must not hold the node's instance slots that another tenant
//! needs. Each test runs on a pool of its own, small enough that the flood fills it, while
//! both tenants have calls running, so the tenant caps hold for the whole test.

use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tessera_contract::{EntityAddress, Envelope};
use tessera_entity::{Entities, TypeTable};
use tessera_runtime::{InstanceLimits, Runtime, RuntimeConfig};
use tessera_tests::{from_msgpack, to_msgpack};

/// Long enough (and the wall-clock bound 10x that, as a node sets it) that no spinner ends
/// its message while a test runs: a slot freed by a spinner that ran out of time would hide
/// what is tested. Shutdown stops them at their next tick.
const SPIN_DEADLINE_MS: u64 = 60_000;

struct Node {
    _dir: tempfile::TempDir,
    runtime: Arc<Runtime>,
    entities: Entities,
}

/// An entity layer on a pool of `instances_max` slots: tenant `calm` has `busy` (a spinner)
/// and `counter`, with a cap of 2 running calls (one for its spinner, one for its counter);
/// tenant `noisy` has `spin`, with a cap of 1.
fn node(instances_max: u32) -> Node {
    let dir = tempfile::tempdir().expect("temporary directory");
    let runtime = Arc::new(
        Runtime::new(RuntimeConfig {
            instances_max,
            compiled_cache_dir: Some(tessera_tests::compiled_cache_dir()),
            ..RuntimeConfig::default()
        })
        .expect("the engine starts"),
    );
    let types = Arc::new(TypeTable::default());
    let bind = |tenant: &str, entity_type: &str, path: &str, cap: usize| {
        let limits = InstanceLimits {
            message_deadline_ms: SPIN_DEADLINE_MS,
            message_wall_ms_max: SPIN_DEADLINE_MS * 10,
            concurrent_guests_max: cap,
            ..InstanceLimits::default()
        };
        tessera_tests::bind_on_runtime(&types, &runtime, (tenant, entity_type), path, limits);
    };
    bind("calm", "busy", tessera_tests::SPIN_FOREVER, 2);
    bind("calm", "counter", tessera_tests::COUNTER, 2);
    bind("noisy", "spin", tessera_tests::SPIN_FOREVER, 1);
    let entities = tessera_tests::standalone_entities(dir.path(), &runtime, types);
    entities.start_messaging();
    Node {
        _dir: dir,
        runtime,
        entities,
    }
}

impl Node {
    fn tell(&self, tenant: &str, entity_type: &str, id: &str, message: serde_json::Value) {
        let to = EntityAddress::new(tenant, entity_type, id);
        self.entities
            .deliver(to, 0, Envelope::tell(to_msgpack(&message)))
            .expect("delivered");
    }

    async fn ask(
        &self,
        tenant: &str,
        entity_type: &str,
        id: &str,
        message: serde_json::Value,
    ) -> serde_json::Value {
        let to = EntityAddress::new(tenant, entity_type, id);
        let reply = self
            .entities
            .ask(to, 0, to_msgpack(&message), Duration::from_secs(20))
            .await
            .unwrap_or_else(|error| panic!("{tenant}/{entity_type}/{id}: {error}"));
        from_msgpack(&reply).expect("a JSON reply")
    }

    /// Instances discarded so far (a spinner's call ended): none may be, for a slot to have
    /// come from what is tested.
    fn discards(&self) -> u64 {
        self.entities
            .stats()
            .instance_discards
            .load(Ordering::Relaxed)
    }

    /// Guest calls that waited at their tenant's gate so far.
    fn throttled(&self) -> u64 {
        self.entities
            .stats()
            .throttled_calls
            .load(Ordering::Relaxed)
    }

    /// Waits until `calls` guest calls have waited at their tenant's gate (at most 10 s).
    async fn throttled_reach(&self, calls: u64) {
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while self.throttled() < calls {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert!(
            waited.is_ok(),
            "only {} of {calls} calls reached their gate",
            self.throttled()
        );
    }

    /// Starts calm's spinner, then noisy's: both tenants busy from here on, noisy at its cap.
    async fn both_tenants_busy(&self) {
        self.tell("calm", "busy", "b0", json!("Spin"));
        while self.runtime.live_instances() < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.tell("noisy", "spin", "s0", json!("Spin"));
        while self.runtime.live_instances() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Past the first epoch ticks, where a call that started alone is paused for a slot.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Noisy's backlog of entities with no instance waits at its gate without taking the pool's
/// slots: only the calls running hold one, and calm's counter, which needs a slot to
/// activate, gets one at once (without the fix the waiting spinners filled the pool and calm's
/// activation failed `unavailable` after waiting for a slot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_waiting_at_their_gate_take_no_instance_slots() {
    let node = node(4);
    node.both_tenants_busy().await;
    let throttled = node.throttled();
    for index in 1..=5 {
        node.tell("noisy", "spin", &format!("s{index}"), json!("Spin"));
    }
    node.throttled_reach(throttled + 5).await;
    assert_eq!(
        node.runtime.live_instances(),
        2,
        "only the two running calls hold instances"
    );
    let added = node.ask("calm", "counter", "c0", json!({"Add": 1})).await;
    assert_eq!(added, json!(1));
    assert_eq!(
        node.discards(),
        0,
        "a spinner's call ended: the test proves nothing"
    );
    node.entities.stop_all().await;
}

/// A noisy entity that holds an instance from an earlier message gives it back while it
/// waits at its gate, when a cell that needs a slot picks it: without the fix the request
/// queued behind its own backlog and calm's activation failed `unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_waiting_at_its_gate_gives_its_instance_to_a_cell_that_needs_it() {
    let node = node(3);
    // An earlier message: `s1` keeps its instance after it.
    node.ask("noisy", "spin", "s1", json!("Ping")).await;
    node.both_tenants_busy().await;
    assert_eq!(node.runtime.live_instances(), 3, "the pool is full");
    let throttled = node.throttled();
    node.tell("noisy", "spin", "s1", json!("Spin"));
    node.throttled_reach(throttled + 1).await;
    let added = node.ask("calm", "counter", "c0", json!({"Add": 1})).await;
    assert_eq!(added, json!(1));
    assert_eq!(
        node.discards(),
        0,
        "a spinner's call ended: the test proves nothing"
    );
    let swaps = node.entities.stats().instance_swaps.load(Ordering::Relaxed);
    assert!(swaps >= 1, "no instance was given back");
    node.entities.stop_all().await;
}
