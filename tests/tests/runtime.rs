//! The entity runtime seen from outside: real plugin components, run through entity cells,
//! with durable state in redb.

use serde_json::json;
use std::time::{Duration, Instant};
use tessera_contract::ErrorKind;
use tessera_entity::EntityConfig;
use tessera_runtime::InstanceLimits;
use tessera_tests::{TestNode, address};

fn node() -> (tempfile::TempDir, TestNode) {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::new(dir.path());
    node.deploy(
        "counter",
        tessera_tests::COUNTER,
        1,
        InstanceLimits::default(),
    );
    (dir, node)
}

/// The counter keeps answering: proof that a failure elsewhere did not take the host down.
async fn counter_still_answers(node: &TestNode) {
    let before = node.ask("counter", "witness", json!("Get")).await.unwrap();
    let after = node
        .ask("counter", "witness", json!({"Add": 1}))
        .await
        .unwrap();
    assert_eq!(after.as_i64().unwrap(), before.as_i64().unwrap() + 1);
}

/// One test per plugin, named after it: `foreach_plugin!` below fails the build when a plugin
/// has none.
mod plugin {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn counter() {
        let (_dir, node) = node();
        assert_eq!(
            node.ask("counter", "c1", json!({"Add": 5})).await.unwrap(),
            json!(5)
        );
        assert_eq!(
            node.ask("counter", "c1", json!({"Add": -2})).await.unwrap(),
            json!(3)
        );
        assert_eq!(
            node.ask("counter", "c1", json!("Get")).await.unwrap(),
            json!(3)
        );
        assert_eq!(
            node.ask("counter", "c2", json!("Get")).await.unwrap(),
            json!(0)
        );
        assert_eq!(
            node.ask("counter", "c1", json!("Reset")).await.unwrap(),
            json!(0)
        );
        assert_eq!(
            node.ask("counter", "c1", json!("Get")).await.unwrap(),
            json!(0)
        );
        let error = node
            .ask("counter", "c1", json!({"Nope": 1}))
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::BadMessage, "{error}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn bank_account() {
        let (_dir, node) = node();
        // Deployed under a name of our choosing: transfers must find their peer through it.
        node.deploy(
            "accounts",
            tessera_tests::BANK_ACCOUNT,
            1,
            InstanceLimits::default(),
        );
        assert_eq!(
            node.ask("accounts", "alice", json!({"Deposit": 100}))
                .await
                .unwrap(),
            json!(100)
        );
        let rejected = node
            .ask("accounts", "alice", json!({"Withdraw": 500}))
            .await
            .unwrap_err();
        assert_eq!(rejected.kind, ErrorKind::Rejected, "{rejected}");
        assert_eq!(
            node.ask("accounts", "alice", json!("Balance"))
                .await
                .unwrap(),
            json!(100)
        );
        let transfer = json!({"Transfer": {"to": "bob", "amount": 30}});
        assert_eq!(
            node.ask("accounts", "alice", transfer).await.unwrap(),
            json!(70)
        );
        // The credit is a tell, committed with the withdrawal and delivered after it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while node.ask("accounts", "bob", json!("Balance")).await.unwrap() != json!(30) {
            assert!(Instant::now() < deadline, "bob never got the credit");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let too_much = json!({"Transfer": {"to": "bob", "amount": 1000}});
        let error = node.ask("accounts", "alice", too_much).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Rejected, "{error}");
        assert_eq!(
            node.ask("accounts", "alice", json!("Balance"))
                .await
                .unwrap(),
            json!(70)
        );
        assert_eq!(
            node.ask("accounts", "bob", json!("Balance")).await.unwrap(),
            json!(30)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn reminder() {
        let (_dir, node) = node();
        node.deploy(
            "reminder",
            tessera_tests::REMINDER,
            1,
            InstanceLimits::default(),
        );
        node.ask(
            "reminder",
            "r1",
            json!({"Remind": {"delay_ms": 20, "note": "tea"}}),
        )
        .await
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let fired = node.ask("reminder", "r1", json!("Fired")).await.unwrap();
            if fired.to_string().contains("tea") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the reminder never fired: {fired}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // What fired was recorded in durable state, not only in instance memory.
        let state = node
            .store()
            .entries(&address("reminder", "r1"), 10_000)
            .unwrap();
        assert!(!state.is_empty(), "the firing was not written to state");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn spin_forever() {
        let (_dir, node) = node();
        let limits = InstanceLimits {
            message_deadline_ms: 200,
            ..InstanceLimits::default()
        };
        node.deploy("spin", tessera_tests::SPIN_FOREVER, 1, limits);
        let started = Instant::now();
        let error = node.ask("spin", "s1", json!("Spin")).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Deadline, "{error}");
        // Stopped by its deadline, not by the 20 s ask timeout.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "took {:?}",
            started.elapsed()
        );
        counter_still_answers(&node).await;
        // The entity itself comes back fresh on its next message.
        assert_eq!(
            node.ask("spin", "s1", json!("Ping")).await.unwrap(),
            json!("Pong")
        );
    }

    /// A guest blocked in a WASI sleep uses no CPU, so only the wall-clock bound stops it; and
    /// the node stops promptly even while a guest sleeps.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn a_sleeping_guest_is_cut_off_by_the_wall_clock_bound() {
        let (_dir, node) = node();
        let limits = InstanceLimits {
            message_wall_ms_max: 300,
            ..InstanceLimits::default()
        };
        node.deploy("spin", tessera_tests::SPIN_FOREVER, 1, limits);
        // A short sleep is within the bound.
        assert_eq!(
            node.ask("spin", "s1", json!({"Sleep": 10})).await.unwrap(),
            json!("Awake")
        );
        // An hour's sleep is cut off (the ask itself would wait 20 s and say `timeout`).
        let error = node
            .ask("spin", "s1", json!({"Sleep": 3_600_000}))
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::Deadline, "{error}");
        assert!(error.message.contains("wall-clock"), "{error}");
        assert_eq!(
            node.ask("spin", "s1", json!("Ping")).await.unwrap(),
            json!("Pong")
        );
        // Shutdown while a guest sleeps: bounded by the wall clock, not by the sleep.
        let sleeper = address("spin", "s2");
        let sleep = tessera_tests::to_msgpack(&json!({"Sleep": 3_600_000}));
        node.entities
            .deliver(sleeper, 0, tessera_contract::Envelope::tell(sleep))
            .unwrap();
        let stopped = tokio::time::timeout(Duration::from_secs(30), node.entities.stop_all()).await;
        assert!(stopped.is_ok(), "the node waited on a sleeping guest");
    }

    /// Shutdown does not run an entity's backlog: it waits for the call already running and
    /// answers the queued messages `unavailable`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn shutdown_answers_a_backlog_instead_of_running_it() {
        let (_dir, node) = node();
        let limits = InstanceLimits {
            message_wall_ms_max: 2_000,
            ..InstanceLimits::default()
        };
        node.deploy("spin", tessera_tests::SPIN_FOREVER, 1, limits);
        let sleeper = address("spin", "backlog");
        let sleep = tessera_tests::to_msgpack(&json!({"Sleep": 250}));
        // 40 × 250 ms queued: 10 s of work if shutdown ran it.
        let mut replies = Vec::new();
        for _ in 0..40 {
            let (envelope, reply) = tessera_contract::Envelope::ask(sleep.clone());
            node.entities.deliver(sleeper.clone(), 0, envelope).unwrap();
            replies.push(reply);
        }
        let stopped = tokio::time::timeout(Duration::from_secs(3), node.entities.stop_all()).await;
        assert!(stopped.is_ok(), "shutdown ran the backlog");
        let mut unavailable = 0;
        for reply in replies {
            match reply.await.expect("every queued ask is answered") {
                Ok(_) => {}
                Err(error) => {
                    assert_eq!(error.kind, ErrorKind::Unavailable, "{error}");
                    assert!(error.message.contains("shutting down"), "{error}");
                    unavailable += 1;
                }
            }
        }
        assert!(unavailable >= 35, "only {unavailable} of 40 were not run");
    }

    /// A guest spinning through a long CPU deadline does not hold shutdown up: it is stopped
    /// at its next epoch tick.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn shutdown_stops_a_spinning_guest_at_its_next_tick() {
        let (_dir, node) = node();
        let limits = InstanceLimits {
            message_deadline_ms: 20_000,
            ..InstanceLimits::default()
        };
        node.deploy("spin", tessera_tests::SPIN_FOREVER, 1, limits);
        let spinner = address("spin", "hot");
        let (envelope, reply) =
            tessera_contract::Envelope::ask(tessera_tests::to_msgpack(&json!("Spin")));
        node.entities.deliver(spinner, 0, envelope).unwrap();
        // Let it start spinning (the activation comes right before the call; give the call
        // a few epoch ticks to be under way).
        while node
            .entities
            .stats()
            .activations
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0
        {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stopped = tokio::time::timeout(Duration::from_secs(5), node.entities.stop_all()).await;
        assert!(stopped.is_ok(), "shutdown waited on a 20 s spin");
        let error = reply.await.expect("answered").unwrap_err();
        assert_eq!(error.kind, ErrorKind::Unavailable, "{error}");
        assert!(error.message.contains("epoch tick"), "{error}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn memory_hog() {
        let (_dir, node) = node();
        let limits = InstanceLimits {
            memory_bytes_max: 16 << 20,
            ..InstanceLimits::default()
        };
        node.deploy("hog", tessera_tests::MEMORY_HOG, 1, limits);
        let error = node.ask("hog", "h1", json!("Grow")).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::MemoryLimit, "{error}");
        counter_still_answers(&node).await;
        assert_eq!(
            node.ask("hog", "h1", json!("Ping")).await.unwrap(),
            json!("Pong")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn panics() {
        let (_dir, node) = node();
        node.deploy(
            "panics",
            tessera_tests::PANICS,
            1,
            InstanceLimits::default(),
        );
        let error = node.ask("panics", "p1", json!("Panic")).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Trap, "{error}");
        // The put made before the panic was discarded with the message.
        assert_eq!(
            node.store()
                .entries(&address("panics", "p1"), 10_000)
                .unwrap(),
            vec![]
        );
        counter_still_answers(&node).await;
        assert_eq!(
            node.ask("panics", "p1", json!("Ping")).await.unwrap(),
            json!("Pong")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn noisy() {
        let (_dir, node) = node();
        // The host's work on 200,000 writes counts against the deadline and the wall-clock
        // bound; give both room so the test is about the flood, not the clock (with the
        // default 5 s wall bound it failed on a loaded machine).
        let limits = InstanceLimits {
            message_deadline_ms: 60_000,
            message_wall_ms_max: tessera_runtime::wall_bound_ms(60_000),
            ..InstanceLimits::default()
        };
        node.deploy("noisy", tessera_tests::NOISY, 1, limits);
        node.ask("noisy", "n1", json!("Shout")).await.unwrap();
        counter_still_answers(&node).await;
        let noisy = address("noisy", "n1");
        node.entities.stop_type(&noisy.type_key()).await;
        let dropped = node
            .entities
            .stats()
            .guest_log_lines_dropped
            .load(std::sync::atomic::Ordering::Relaxed);
        // 200,000 lines were written; only the per-message budget reached the log.
        assert!(dropped >= 199_000, "only {dropped} lines were dropped");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn echo() {
        let (_dir, node) = node();
        node.deploy("echo", tessera_tests::ECHO, 1, InstanceLimits::default());
        let reply = node.ask("echo", "e1", json!([1, 2, 3])).await.unwrap();
        // The echo replies with MessagePack `bin`, whose JSON form is base64 under `$bin`.
        assert_eq!(reply, json!({"$bin": "AQID"}));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn relay() {
        let (_dir, node) = node();
        node.deploy("relay", tessera_tests::RELAY, 1, InstanceLimits::default());
        let tell = json!({"TellAdd": {"entity_type": "counter", "id": "target", "amount": 3}});
        assert_eq!(
            node.ask("relay", "r1", tell.clone()).await.unwrap(),
            json!(1)
        );
        assert_eq!(node.ask("relay", "r1", tell).await.unwrap(), json!(2));
        // The guest's tells were sent after its commits and reach the counter in order.
        let deadline = Instant::now() + Duration::from_secs(10);
        while node.ask("counter", "target", json!("Get")).await.unwrap() != json!(6) {
            assert!(
                Instant::now() < deadline,
                "the counter never got both tells"
            );
            tokio::task::yield_now().await;
        }
        // A guest-requested passivation takes effect after its reply.
        node.ask("relay", "r1", json!("Sleep")).await.unwrap();
        let relay = address("relay", "r1");
        while node.entities.is_live(&relay) {
            assert!(Instant::now() < deadline, "the relay never passivated");
            tokio::task::yield_now().await;
        }
        assert_eq!(
            node.ask("relay", "r1", json!("Sent")).await.unwrap(),
            json!(2)
        );
        // A tell to an unknown type is given up as a dead letter and counted, never delivered
        // elsewhere.
        let lost = json!({"TellAdd": {"entity_type": "nope", "id": "x", "amount": 1}});
        node.ask("relay", "r1", lost).await.unwrap();
        let dead_letters = || {
            node.entities
                .stats()
                .dead_letters
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        while dead_letters() == 0 {
            assert!(
                Instant::now() < deadline,
                "the lost tell was never given up"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(dead_letters(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn huge_reply() {
        let (_dir, node) = node();
        let limits = InstanceLimits {
            reply_bytes_max: 1 << 20,
            ..InstanceLimits::default()
        };
        node.deploy("huge", tessera_tests::HUGE_REPLY, 1, limits);
        let error = node
            .ask("huge", "h1", json!({"Bytes": 8 << 20}))
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::ReplyTooLarge, "{error}");
        let small = node.ask("huge", "h1", json!({"Bytes": 16})).await.unwrap();
        let base64 = small["$bin"].as_str().expect("a bin reply");
        assert_eq!(
            base64.len(),
            24,
            "16 bytes are 24 base64 characters: {base64}"
        );
        counter_still_answers(&node).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn ballast() {
        let (_dir, node) = node();
        node.deploy(
            "ballast",
            tessera_tests::BALLAST,
            1,
            InstanceLimits::default(),
        );
        // A value as large as one message may write (4 MiB with its key and the key count).
        for key in 0..2 {
            let fill = json!({"Fill": {"key": key, "bytes": (4 << 20) - 1024}});
            node.ask("ballast", "b1", fill).await.unwrap();
        }
        let held = node.ask("ballast", "b1", json!("Check")).await.unwrap();
        assert_eq!(
            held,
            json!({"keys": 2, "bytes": 2 * ((4 << 20) - 1024), "wrong": []})
        );
        let error = node
            .ask(
                "ballast",
                "b1",
                json!({"Fill": {"key": 2, "bytes": 5 << 20}}),
            )
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::StateTooLarge, "{error}");
        counter_still_answers(&node).await;
    }

    /// The cart's whole life is in `migration.rs`; here, its reservation and who may end it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn cart() {
        let (_dir, node) = node();
        node.deploy("cart", tessera_tests::CART, 1, InstanceLimits::default());
        node.ask("cart", "p", json!({"Add": "fig"})).await.unwrap();
        let view = node
            .ask("cart", "p", json!({"Checkout": {"expire_ms": 60_000}}))
            .await
            .unwrap();
        assert_eq!(
            view,
            json!({"items": [{"name": "fig"}], "reserved": true, "expired": 0})
        );
        let error = node.ask("cart", "p", json!("Expire")).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Rejected, "{error}");
    }

    /// A first start has nothing to decode: the broken version only breaks on old items.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn cart_broken() {
        let (_dir, node) = node();
        node.deploy(
            "cart",
            tessera_tests::CART_BROKEN,
            2,
            InstanceLimits::default(),
        );
        assert_eq!(
            node.ask("cart", "p", json!("Get")).await.unwrap(),
            json!([])
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn cart_priced() {
        let (_dir, node) = node();
        node.deploy(
            "cart",
            tessera_tests::CART_PRICED,
            2,
            InstanceLimits::default(),
        );
        assert_eq!(
            node.ask("cart", "p", json!("Get")).await.unwrap(),
            json!({"items": [], "total_cents": 0})
        );
        assert_eq!(
            node.ask("cart", "p", json!("Activation")).await.unwrap(),
            json!("FirstStart")
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    pub(super) async fn legacy_v1() {
        let (_dir, node) = node();
        node.deploy(
            "legacy",
            tessera_tests::LEGACY_V1,
            1,
            InstanceLimits::default(),
        );
        assert_eq!(
            node.ask("legacy", "p", json!(null)).await.unwrap(),
            json!(1)
        );
        assert_eq!(
            node.ask("legacy", "p", json!(null)).await.unwrap(),
            json!(2)
        );
    }
}

macro_rules! assert_plugin_tested {
    ($name:ident) => {
        #[allow(unused_imports)]
        use self::plugin::$name as _;
    };
}
tessera_tests::foreach_plugin!(assert_plugin_tested);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let node = TestNode::new(dir.path());
        node.deploy(
            "counter",
            tessera_tests::COUNTER,
            1,
            InstanceLimits::default(),
        );
        node.ask("counter", "durable", json!({"Add": 41}))
            .await
            .unwrap();
        node.ask("counter", "durable", json!({"Add": 1}))
            .await
            .unwrap();
        node.entities.stop_all().await;
    }
    let node = TestNode::new(dir.path());
    node.deploy(
        "counter",
        tessera_tests::COUNTER,
        1,
        InstanceLimits::default(),
    );
    assert_eq!(
        node.ask("counter", "durable", json!("Get")).await.unwrap(),
        json!(42)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_message_leaves_no_write() {
    let (_dir, node) = node();
    node.deploy(
        "accounts",
        tessera_tests::BANK_ACCOUNT,
        1,
        InstanceLimits::default(),
    );
    node.ask("accounts", "a", json!({"Deposit": 10}))
        .await
        .unwrap();
    let before = node
        .store()
        .entries(&address("accounts", "a"), 10_000)
        .unwrap();
    node.ask("accounts", "a", json!({"Withdraw": 11}))
        .await
        .unwrap_err();
    assert_eq!(
        node.store()
            .entries(&address("accounts", "a"), 10_000)
            .unwrap(),
        before
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_restarts_the_entity_from_durable_state() {
    let (_dir, node) = node();
    node.deploy(
        "panics",
        tessera_tests::PANICS,
        1,
        InstanceLimits::default(),
    );
    node.ask("counter", "c", json!({"Add": 7})).await.unwrap();
    node.ask("panics", "p", json!("Panic")).await.unwrap_err();
    let discards = node
        .entities
        .stats()
        .instance_discards
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(discards, 1);
    assert_eq!(
        node.ask("counter", "c", json!("Get")).await.unwrap(),
        json!(7)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_type_is_refused() {
    let (_dir, node) = node();
    let error = node.ask("nope", "x", json!("Get")).await.unwrap_err();
    assert_eq!(error.kind, ErrorKind::EntityTypeNotRegistered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_mailbox_is_backpressure_not_growth() {
    let dir = tempfile::tempdir().unwrap();
    let node = TestNode::new(dir.path());
    let limits = InstanceLimits {
        message_deadline_ms: 300,
        ..InstanceLimits::default()
    };
    node.types.bind(
        tessera_contract::TypeKey::new(tessera_tests::TENANT, "spin"),
        tessera_entity::TypeBinding {
            plugin: tessera_tests::plugin(tessera_tests::SPIN_FOREVER),
            version: 1,
            limits,
            passivate_idle: None,
            mailbox_capacity: 2,
            tenant_live_entities_max: None,
            remember: false,
        },
    );
    let payload = tessera_tests::to_msgpack(&json!("Spin"));
    let mut refused = 0;
    for _ in 0..10 {
        let envelope = tessera_contract::Envelope::tell(payload.clone());
        if let Err(refused_envelope) = node.entities.deliver(address("spin", "busy"), 0, envelope) {
            assert_eq!(refused_envelope.0.kind, ErrorKind::MailboxFull);
            refused += 1;
        }
    }
    // At most the mailbox plus the one message being handled were taken.
    assert!(
        refused >= 7,
        "only {refused} of 10 refused with a mailbox of 2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_entity_limit_evicts_the_least_recently_used() {
    let dir = tempfile::tempdir().unwrap();
    let config = EntityConfig {
        active_entities_max: Some(3),
        ..EntityConfig::default()
    };
    let node = TestNode::with_config(dir.path(), config);
    node.deploy(
        "counter",
        tessera_tests::COUNTER,
        1,
        InstanceLimits::default(),
    );
    for id in ["a", "b", "c"] {
        node.ask("counter", id, json!({"Add": 1})).await.unwrap();
    }
    node.ask("counter", "a", json!("Get")).await.unwrap(); // b is now the least recent
    node.ask("counter", "d", json!({"Add": 1})).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.entities.is_live(&address("counter", "b")) {
        assert!(Instant::now() < deadline, "b was never evicted");
        tokio::task::yield_now().await;
    }
    assert!(node.entities.is_live(&address("counter", "a")));
    assert!(node.entities.is_live(&address("counter", "d")));
    // Eviction is passivation: b's state is intact.
    assert_eq!(
        node.ask("counter", "b", json!("Get")).await.unwrap(),
        json!(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_happens_at_a_message_boundary_and_keeps_state() {
    let (_dir, node) = node();
    node.ask("counter", "u", json!({"Add": 3})).await.unwrap();
    let activations = || {
        node.entities
            .stats()
            .activations
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = activations();
    node.deploy(
        "counter",
        tessera_tests::COUNTER,
        2,
        InstanceLimits::default(),
    );
    assert_eq!(
        node.ask("counter", "u", json!({"Add": 1})).await.unwrap(),
        json!(4)
    );
    assert_eq!(
        activations(),
        before + 1,
        "the live entity was re-activated on version 2"
    );
}

#[test]
fn a_second_start_loads_the_compiled_plugin_from_disk() {
    let cache = tempfile::tempdir().unwrap();
    let config = tessera_runtime::RuntimeConfig {
        instances_max: 4,
        compiled_cache_dir: Some(cache.path().to_path_buf()),
        ..Default::default()
    };
    let bytes = std::fs::read(tessera_tests::COUNTER).unwrap();
    let first = tessera_runtime::Runtime::new(config.clone()).unwrap();
    let plugin = first.load(&bytes).unwrap();
    assert_eq!(first.compilations(), 1);
    assert!(first.is_cached(plugin.content_hash()));
    drop(first);
    let second = tessera_runtime::Runtime::new(config).unwrap();
    second.load(&bytes).unwrap();
    assert_eq!(second.compilations(), 0, "the second start recompiled");
}

#[test]
fn uploads_that_are_not_entity_components_are_refused() {
    use tessera_runtime::LoadError;
    let runtime = tessera_tests::shared_runtime();
    assert!(matches!(
        runtime.load(b"not wasm"),
        Err(LoadError::NotAComponent(_))
    ));
    let core_module = b"\0asm\x01\0\0\0";
    assert!(matches!(
        runtime.load(core_module),
        Err(LoadError::NotAComponent(_))
    ));
    let empty_component = b"\0asm\x0d\0\x01\0";
    assert!(matches!(
        runtime.load(empty_component),
        Err(LoadError::WrongWorld(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoke_keeps_state_in_its_data_dir_and_stops_at_an_error() {
    use tessera_host::cli::{InvokeOptions, invoke};
    let dir = tempfile::tempdir().unwrap();
    let options = |messages: Vec<serde_json::Value>| InvokeOptions {
        component: tessera_tests::COUNTER.into(),
        entity_id: "inv".into(),
        messages,
        data_dir: dir.path().to_path_buf(),
        timeout: Duration::from_secs(10),
    };
    let mut replies = Vec::new();
    invoke(options(vec![json!({"Add": 5}), json!("Get")]), |reply| {
        replies.push(reply.clone())
    })
    .await
    .unwrap();
    assert_eq!(replies, vec![Ok(json!(5)), Ok(json!(5))]);
    let mut replies = Vec::new();
    invoke(
        options(vec![json!({"Add": 1}), json!({"Bad": 1}), json!("Get")]),
        |reply| replies.push(reply.clone()),
    )
    .await
    .unwrap();
    assert_eq!(replies.len(), 2, "invoke stops at the first failed message");
    assert_eq!(
        replies[0],
        Ok(json!(6)),
        "state persisted across invocations"
    );
    assert_eq!(replies[1].as_ref().unwrap_err().kind, ErrorKind::BadMessage);
}

/// After a schema change a stored value may no longer decode: the counter must not restart
/// from 0 and overwrite it. Its activation is refused (`failed`, naming the key) and the value
/// stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_that_no_longer_decodes_is_never_taken_for_absent() {
    use tessera_state::{EntityState, WriteSet};
    let (_dir, node) = node();
    let counter = address("counter", "c1");
    let mut writes = WriteSet::new(counter.clone());
    let text = tessera_tests::to_msgpack(&json!("forty-one"));
    writes.put("value", text.clone());
    node.state.commit(writes).await.unwrap();
    for _ in 0..2 {
        let error = node
            .ask("counter", "c1", json!({"Add": 1}))
            .await
            .unwrap_err();
        assert_eq!(error.kind, ErrorKind::Failed, "{error}");
        assert!(
            error
                .message
                .contains("state value \"value\" did not decode"),
            "{error}"
        );
    }
    assert_eq!(node.state.get(&counter, "value").unwrap(), Some(text));
    counter_still_answers(&node).await;
}

/// An eviction abandoned because messages arrived for the victim must not keep discounting it:
/// the node comes back to its live-entity limit on the next start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_eviction_does_not_leak_the_live_entity_limit() {
    let dir = tempfile::tempdir().unwrap();
    let config = EntityConfig {
        active_entities_max: Some(2),
        ..EntityConfig::default()
    };
    let node = TestNode::with_config(dir.path(), config);
    node.deploy(
        "spin",
        tessera_tests::SPIN_FOREVER,
        1,
        InstanceLimits::default(),
    );
    let tell = |id: &str, message: serde_json::Value| {
        let envelope = tessera_contract::Envelope::tell(tessera_tests::to_msgpack(&message));
        node.entities
            .deliver(address("spin", id), 0, envelope)
            .unwrap();
    };
    node.ask("spin", "v", json!("Ping")).await.unwrap();
    tell("v", json!({"Sleep": 500})); // v is busy for a while
    node.ask("spin", "w", json!("Ping")).await.unwrap(); // v is now the least recent
    // Starting x evicts v: its Passivate waits behind the sleep, and a Ping follows it, so v
    // abandons the passivation and stays live.
    node.ask("spin", "x", json!("Ping")).await.unwrap();
    tell("v", json!("Ping"));
    assert_eq!(
        node.ask("spin", "v", json!("Ping")).await.unwrap(),
        json!("Pong")
    );
    assert!(node.entities.is_live(&address("spin", "v")));
    // One more start brings the node back to two live entities.
    node.ask("spin", "y", json!("Ping")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.entities.live_count() > 2 {
        assert!(
            Instant::now() < deadline,
            "{} entities stay live over a limit of 2",
            node.entities.live_count()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A guest that traps on every message: each trap discards its instance, but the warning is
/// written once per type and error kind in a window (the others are counted), not once each.
/// On a current-thread runtime, so every task writes through the test's subscriber.
#[tokio::test]
async fn a_guest_trapping_on_every_message_writes_one_warning() {
    const TRAPS: usize = 50;
    let captured = tessera_logs::CapturedWarnings::start();
    let (_dir, node) = node();
    node.deploy(
        "panics",
        tessera_tests::PANICS,
        1,
        InstanceLimits::default(),
    );
    for index in 0..TRAPS {
        let trapped = node
            .ask("panics", &format!("p{index}"), json!("Panic"))
            .await;
        assert_eq!(trapped.unwrap_err().kind, ErrorKind::Trap);
    }
    let discards = node
        .entities
        .stats()
        .instance_discards
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(discards, TRAPS as u64);
    let written = captured.lines_with("instance discarded");
    assert_eq!(written.len(), 1, "{written:#?}");
}
