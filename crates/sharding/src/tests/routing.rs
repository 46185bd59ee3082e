//! Routing: asks and tells through any region, refusals, deadlines, bounded buffers, order per
//! sender, custom extractors, and the local fast path that needs no region task.

use super::*;
use crate::CoordinatorCommand;
use tessera_contract::ErrorKind;

#[tokio::test(start_paused = true)]
async fn asks_reach_the_owner_through_any_region_and_replies_come_back() {
    let cluster = cluster(3, test_config(), None).await;
    for index in 0..30 {
        let address = counter().entity(format!("user-{index}"));
        let via = &cluster.regions[index % 3];
        let payload = format!("hello {index}").into_bytes();
        let reply = via.ask(address, payload.clone(), None).await;
        assert_eq!(reply, Ok(payload));
    }
    let table = cluster.coordinator.allocation_table().await.unwrap();
    for index in 0..30 {
        let address = counter().entity(format!("user-{index}"));
        let owner = &table[&key_of(&address.id, 16)].node;
        for (node, fake) in cluster.fakes.iter().enumerate() {
            let expected = usize::from(owner == &format!("node-{node}"));
            assert_eq!(
                fake.deliveries_to(&address).len(),
                expected,
                "{address} on node-{node}"
            );
        }
    }
    let owners: std::collections::BTreeSet<_> = table.values().map(|a| a.node.clone()).collect();
    assert_eq!(owners.len(), 3, "least-shards placement uses every node");
}

#[tokio::test(start_paused = true)]
async fn unregistered_type_is_refused() {
    let cluster = cluster(1, test_config(), None).await;
    let unknown = TypeKey::new("acme", "ghost").entity("g-1");
    let told = cluster.regions[0].tell(unknown.clone(), vec![1]).await;
    assert_eq!(told.unwrap_err().kind, ErrorKind::EntityTypeNotRegistered);
    let asked = cluster.regions[0].ask(unknown, vec![1], None).await;
    assert_eq!(asked.unwrap_err().kind, ErrorKind::EntityTypeNotRegistered);
    cluster.regions[0].unregister_type(&counter());
    let gone = cluster.regions[0]
        .ask(counter().entity("c"), vec![1], None)
        .await;
    assert_eq!(gone.unwrap_err().kind, ErrorKind::EntityTypeNotRegistered);
}

#[tokio::test(start_paused = true)]
async fn a_forwarded_envelope_for_a_type_the_owner_lacks_is_answered_retryable_not_lost() {
    let cluster = cluster(2, test_config(), None).await;
    // Find an entity owned by node-1, then unregister the type there only.
    let ids = one_id_per_shard(16);
    for id in ids.values() {
        cluster.regions[0]
            .tell(counter().entity(id.clone()), vec![0])
            .await
            .unwrap();
    }
    cluster.fakes[1]
        .wait_for("some deliveries on node-1", |s| !s.deliveries.is_empty())
        .await;
    let table = cluster.coordinator.allocation_table().await.unwrap();
    let remote_id = ids
        .values()
        .find(|id| table[&key_of(id, 16)].node == "node-1")
        .expect("least-shards placement gives node-1 some shards");
    cluster.regions[1].unregister_type(&counter());
    let reply = cluster.regions[0]
        .ask(counter().entity(remote_id.clone()), vec![1], None)
        .await;
    // The sender knows the type, so the owner's catalog is behind: retry, not "no such type".
    let error = reply.unwrap_err();
    assert_eq!(error.kind, ErrorKind::Unavailable, "{error}");
    assert!(
        error.message.contains("not bound on node node-1"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn ask_times_out_at_its_deadline() {
    let cluster = cluster(2, test_config(), None).await;
    let timeout = Duration::from_millis(100);
    for region in &cluster.regions {
        let started = tokio::time::Instant::now();
        let reply = region
            .ask(counter().entity("quiet"), b"silent".to_vec(), Some(timeout))
            .await;
        assert_eq!(reply.unwrap_err().kind, ErrorKind::Timeout);
        let waited = started.elapsed();
        assert!(
            waited >= timeout && waited < timeout * 2,
            "waited {waited:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn allocation_buffer_overflow_is_reported_to_the_caller() {
    let config = ShardingConfig {
        allocation_buffer: 2,
        ..test_config()
    };
    let switchboard = Arc::new(Switchboard::new());
    // A coordinator that never answers keeps the allocation in flight.
    let (silent_coordinator, _requests) = tokio::sync::mpsc::channel::<CoordinatorCommand>(16);
    switchboard.connect_coordinator(silent_coordinator);
    let settings = TypeSettings::new(16);
    let (region, fake) = start_region("node-0", &config, &switchboard, None, None, settings).await;
    let address = counter().entity("busy");
    region.tell(address.clone(), vec![1]).await.unwrap();
    region.tell(address.clone(), vec![2]).await.unwrap();
    let overflow = region.tell(address.clone(), vec![3]).await.unwrap_err();
    assert_eq!(overflow.kind, ErrorKind::BufferOverflow);
    let asked = region
        .ask(address.clone(), vec![4], None)
        .await
        .unwrap_err();
    assert_eq!(asked.kind, ErrorKind::BufferOverflow);
    // The buffered two are failed, not lost silently, when the allocation never comes.
    let patient = Some(Duration::from_secs(2));
    let late = region
        .ask(counter().entity("other"), vec![5], patient)
        .await
        .unwrap_err();
    assert_eq!(late.kind, ErrorKind::Unavailable, "{late}");
    assert!(fake.with(|s| s.deliveries.is_empty()));
    let counters = region.counters();
    assert_eq!(counters.refused.get("buffer_overflow"), Some(&2));
    assert_eq!(
        counters.tells_dropped, 2,
        "the two buffered tells failed with no one to tell"
    );
}

#[tokio::test(start_paused = true)]
async fn tells_dropped_together_for_one_shard_write_one_warning() {
    const TELLS: usize = 1_000;
    let captured = tessera_logs::CapturedWarnings::start();
    let config = ShardingConfig {
        allocation_buffer: TELLS,
        ..test_config()
    };
    let switchboard = Arc::new(Switchboard::new());
    // A coordinator that never answers: the allocation times out and the buffered tells fail.
    let (silent_coordinator, _requests) = tokio::sync::mpsc::channel::<CoordinatorCommand>(16);
    switchboard.connect_coordinator(silent_coordinator);
    let settings = TypeSettings::new(16);
    let (region, _fake) = start_region("node-0", &config, &switchboard, None, None, settings).await;
    let address = counter().entity("unplaced");
    for tell in 0..TELLS {
        let payload = tell.to_le_bytes().to_vec();
        region.tell(address.clone(), payload).await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    while region.counters().tells_dropped < TELLS as u64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tells are never failed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let dropped = captured.lines_with("tell dropped");
    assert_eq!(dropped.len(), 1, "{dropped:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_per_sender_is_kept_under_concurrency() {
    let cluster = cluster(3, test_config(), None).await;
    const SENDERS: usize = 24;
    const MESSAGES: usize = 60;
    const ENTITIES: usize = 6;
    let mut tasks = Vec::new();
    for sender in 0..SENDERS {
        let region = cluster.regions[sender % 3].clone();
        tasks.push(tokio::spawn(async move {
            for sequence in 0..MESSAGES {
                let entity =
                    counter().entity(format!("ordered-{}", (sender + sequence) % ENTITIES));
                let payload = serde_json::to_vec(&(sender, sequence)).unwrap();
                region.tell(entity, payload).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    delivered_in_order_per_sender(&cluster, SENDERS * MESSAGES).await;
}

/// Routes resolved once (`RegionHandle::route_to`) keep each sender's order and lose nothing
/// while shards are first allocated (their tells buffered) and when the shard lives on another
/// region (forwarded).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn routes_keep_each_senders_order_through_allocation_and_forwarding() {
    let cluster = cluster(3, test_config(), None).await;
    const SENDERS: usize = 12;
    const MESSAGES: usize = 40;
    const ENTITIES: usize = 8;
    let mut tasks = Vec::new();
    for sender in 0..SENDERS {
        let region = cluster.regions[sender % 3].clone();
        tasks.push(tokio::spawn(async move {
            let mut routes: Vec<_> = (0..ENTITIES)
                .map(|entity| {
                    let address = counter().entity(format!("routed-{entity}"));
                    region.route_to(address).unwrap()
                })
                .collect();
            for sequence in 0..MESSAGES {
                let route = &mut routes[(sender + sequence) % ENTITIES];
                let payload = serde_json::to_vec(&(sender, sequence)).unwrap();
                route.tell(payload).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    delivered_in_order_per_sender(&cluster, SENDERS * MESSAGES).await;
}

#[tokio::test(start_paused = true)]
async fn a_type_can_bring_its_own_shard_extractor() {
    let cluster = cluster(2, test_config(), None).await;
    let orders = TypeKey::new("acme", "orders");
    let settings = TypeSettings::new(16).with_extractor(Arc::new(AlwaysShardFive));
    for region in &cluster.regions {
        region
            .register_type(orders.clone(), settings.clone())
            .await
            .unwrap();
    }
    for id in ["o-1", "o-2", "o-3"] {
        let reply = cluster.regions[1]
            .ask(orders.entity(id), b"x".to_vec(), None)
            .await;
        assert_eq!(reply, Ok(b"x".to_vec()));
    }
    let table = cluster.coordinator.allocation_table().await.unwrap();
    let shards: Vec<ShardId> = table
        .keys()
        .filter(|key| key.type_key == orders)
        .map(|key| key.shard)
        .collect();
    assert_eq!(shards, vec![5]);
}

#[derive(Debug)]
struct AlwaysShardFive;

impl ShardExtractor for AlwaysShardFive {
    fn shard_of(&self, _id: &str) -> ShardId {
        5
    }

    fn num_shards(&self) -> u32 {
        16
    }
}

#[tokio::test(start_paused = true)]
async fn messages_for_owned_shards_need_no_region_task() {
    let cluster = cluster(1, test_config(), None).await;
    let region = &cluster.regions[0];
    let address = counter().entity("fast");
    assert_eq!(
        region.ask(address.clone(), b"1".to_vec(), None).await,
        Ok(b"1".to_vec())
    );
    assert!(region.owns(&key_of("fast", 16)));
    // With the region task gone, an owned shard is still reached: senders deliver straight to
    // the entity's mailbox.
    region.shutdown().await;
    assert_eq!(
        region.ask(address.clone(), b"2".to_vec(), None).await,
        Ok(b"2".to_vec())
    );
    region.tell(address.clone(), b"3".to_vec()).await.unwrap();
    assert_eq!(cluster.fakes[0].deliveries_to(&address).len(), 3);
    // A shard never allocated needs the task, and says so.
    let other = one_id_per_shard(16)
        .into_values()
        .find(|id| key_of(id, 16) != key_of("fast", 16))
        .unwrap();
    let refused = region
        .ask(counter().entity(other), b"4".to_vec(), None)
        .await;
    assert_eq!(refused.unwrap_err().kind, ErrorKind::Unavailable);
}

/// A sender's `tell` future keeps the part of routing that waits — the hand-off to the region
/// task, with its timer and channel send — behind a box, so a message that does not wait
/// builds and moves a small future. Carried in place, it made this future 1,744 bytes (debug
/// build) and `Node::tell`'s 1,928 (release).
#[tokio::test(start_paused = true)]
async fn a_tell_future_stays_small() {
    const TELL_FUTURE_BYTES_MAX: usize = 256;
    let cluster = cluster(1, test_config(), None).await;
    let tell = cluster.regions[0].tell(counter().entity("small"), b"1".to_vec());
    let bytes = std::mem::size_of_val(&tell);
    assert!(
        bytes <= TELL_FUTURE_BYTES_MAX,
        "a tell's future is {bytes} bytes"
    );
    tell.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_local_refusal_reaches_the_sender() {
    struct Full;
    impl LocalEntities for Full {
        fn deliver(
            &self,
            to: EntityAddress,
            _: ShardId,
            envelope: Envelope,
        ) -> Result<(), Refused> {
            let error = tessera_contract::MessageError::new(
                ErrorKind::MailboxFull,
                format!("{to} is full"),
            );
            Err(Box::new((error, envelope)))
        }
        fn start(&self, _: EntityAddress, _: ShardId) {}
        fn passivate(&self, _: &EntityAddress) {}
        fn stop_shard(&self, _: &TypeKey, _: ShardId) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
        fn live_in_shard(&self, _: &TypeKey, _: ShardId) -> usize {
            0
        }
    }
    let catalog = tempfile::tempdir().unwrap();
    let switchboard = Arc::new(Switchboard::new());
    let config = test_config();
    let parts = RegionParts {
        node: "node-0".into(),
        config: config.clone(),
        switchboard: switchboard.clone(),
        remember: None,
        shard_states: None,
        lease: None,
        catalog: None,
    };
    let (region, ()) =
        Region::start(parts, |_| (Arc::new(Full) as Arc<dyn LocalEntities>, ())).unwrap();
    region
        .register_type(counter(), TypeSettings::new(16))
        .await
        .unwrap();
    let membership = Membership::new();
    membership.join("node-0", Vec::<String>::new());
    let _coordinator = Coordinator::start(
        config,
        membership.subscribe(),
        switchboard,
        test_plane(&catalog),
    )
    .unwrap();
    let address = counter().entity("c");
    // The first message waits for the allocation, then meets the full mailbox: its ask fails.
    let asked = region
        .ask(address.clone(), vec![1], None)
        .await
        .unwrap_err();
    assert_eq!(asked.kind, ErrorKind::MailboxFull);
    // Now the shard is known to be local: a tell's refusal is the sender's error at once.
    let told = region.tell(address, vec![2]).await.unwrap_err();
    assert_eq!(told.kind, ErrorKind::MailboxFull);
    assert_eq!(region.counters().refused.get("mailbox_full"), Some(&2));
}

/// Waits until `total` tells of `(sender, sequence)` payloads arrived across the cluster, and
/// checks each sender's tells reached each entity in sequence.
async fn delivered_in_order_per_sender(cluster: &TestCluster, total: usize) {
    let all_delivered = async {
        // Polls a condition (not a race-hiding sleep): every accepted tell must arrive.
        loop {
            let delivered: usize = cluster
                .fakes
                .iter()
                .map(|f| f.with(|s| s.deliveries.len()))
                .sum();
            if delivered == total {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(WAIT_LIMIT, all_delivered)
        .await
        .expect("every tell delivered");
    for fake in &cluster.fakes {
        let mut last: HashMap<(String, usize), usize> = HashMap::new();
        for (address, payload) in fake.with(|s| s.deliveries.clone()) {
            let (sender, sequence): (usize, usize) = serde_json::from_slice(&payload).unwrap();
            if let Some(previous) = last.insert((address.id.clone(), sender), sequence) {
                assert!(
                    previous < sequence,
                    "{address}: sender {sender} {previous} then {sequence}"
                );
            }
        }
    }
}
