//! Remember-entities through the region: fail-closed and fail-open store failures, forgetting
//! on passivation, respawn after a restart, and paced recovery.

use super::*;
use tessera_contract::ErrorKind;
use tessera_state::remember::memory::{FaultyStore, MemoryStore};
use tessera_state::remember::{FailurePolicy, RememberEvent};
use tessera_state::{GroupCommitConfig, LocalState, RememberStore, StateStore};

async fn remembered_region(
    store: Arc<dyn RememberStore>,
    policy: FailurePolicy,
) -> (TestCluster, RegionHandle, Arc<FakeEntities>) {
    let mut config = test_config();
    config.remember.failure_policy = policy;
    let mut cluster = cluster(0, config.clone(), None).await;
    let settings = TypeSettings::new(16).remembered();
    let writer = RememberWriter::start(store, &config.remember);
    let (region, fake) = start_region(
        "node-0",
        &config,
        &cluster.switchboard,
        Some(writer),
        None,
        settings,
    )
    .await;
    cluster.membership.join("node-0", Vec::<String>::new());
    cluster.regions.push(region.clone());
    cluster.fakes.push(fake.clone());
    (cluster, region, fake)
}

#[tokio::test]
async fn a_fail_closed_shard_fails_fast_after_a_store_error() {
    let store = Arc::new(FaultyStore::new(MemoryStore::default(), 0));
    let (_cluster, region, _fake) = remembered_region(store, FailurePolicy::FailClosed).await;
    let mut events = region.remember_events().expect("remember enabled");
    let address = counter().entity("c-1");
    assert_eq!(
        region.ask(address.clone(), b"1".to_vec(), None).await,
        Ok(b"1".to_vec())
    );
    assert!(
        region.flush_remembered().await.is_err(),
        "the failed write is reported by flush"
    );
    let event = events.recv().await.unwrap();
    let RememberEvent::StoreFailed { policy, .. } = event else {
        panic!("a store failure was expected, not {event:?}");
    };
    assert_eq!(policy, FailurePolicy::FailClosed);
    let refused = region
        .ask(address.clone(), b"2".to_vec(), None)
        .await
        .unwrap_err();
    assert_eq!(refused.kind, ErrorKind::Unavailable);
    assert!(refused.message.contains("fail-closed"), "{refused}");
    let told = region.tell(address, b"3".to_vec()).await.unwrap_err();
    assert_eq!(told.kind, ErrorKind::Unavailable);
}

#[tokio::test]
async fn a_fail_open_shard_keeps_routing_after_a_store_error() {
    let store = Arc::new(FaultyStore::new(MemoryStore::default(), 0));
    let (_cluster, region, _fake) = remembered_region(store, FailurePolicy::FailOpen).await;
    let mut events = region.remember_events().expect("remember enabled");
    let address = counter().entity("c-1");
    assert_eq!(
        region.ask(address.clone(), b"1".to_vec(), None).await,
        Ok(b"1".to_vec())
    );
    assert!(region.flush_remembered().await.is_err());
    let event = events.recv().await.unwrap();
    let RememberEvent::StoreFailed { policy, .. } = event else {
        panic!("a store failure was expected, not {event:?}");
    };
    assert_eq!(policy, FailurePolicy::FailOpen);
    assert_eq!(
        region.ask(address, b"2".to_vec(), None).await,
        Ok(b"2".to_vec())
    );
}

#[tokio::test]
async fn a_passivated_entity_is_forgotten() {
    let store = MemoryStore::default();
    let (_cluster, region, fake) =
        remembered_region(Arc::new(store.clone()), FailurePolicy::FailOpen).await;
    let (first, second) = (counter().entity("e-1"), counter().entity("e-2"));
    region.tell(first.clone(), vec![1]).await.unwrap();
    region.tell(second.clone(), vec![1]).await.unwrap();
    fake.wait_for("both live", |s| s.live.len() == 2).await;
    region.flush_remembered().await.unwrap();
    let remembered = |address: &EntityAddress| {
        let key = key_of(&address.id, 16);
        store
            .list_ids(&key.type_key, key.shard)
            .unwrap()
            .contains(&address.id)
    };
    assert!(remembered(&first) && remembered(&second));
    region.passivate(first.clone()).await.unwrap();
    fake.wait_for("first passivated", |s| !s.live.contains_key(&first))
        .await;
    region.flush_remembered().await.unwrap();
    assert!(!remembered(&first), "passivation forgets the id");
    assert!(remembered(&second));
}

#[tokio::test]
async fn remembered_entities_come_back_after_a_region_restart() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("node.redb");
    let open = || -> Arc<dyn RememberStore> {
        let store = StateStore::open(&path).unwrap();
        Arc::new(LocalState::new(store, GroupCommitConfig::default()))
    };
    let (mut cluster, region, fake) = remembered_region(open(), FailurePolicy::FailOpen).await;
    let ids: Vec<String> = (0..6).map(|index| format!("user-{index}")).collect();
    for id in &ids {
        region
            .tell(counter().entity(id.clone()), vec![1])
            .await
            .unwrap();
    }
    fake.wait_for("all live", |s| s.live.len() == 6).await;
    region.passivate(counter().entity("user-3")).await.unwrap();
    fake.wait_for("user-3 passivated", |s| s.live.len() == 5)
        .await;
    region.flush_remembered().await.unwrap();
    region.shutdown().await;
    drop(region);
    drop(fake);
    cluster.regions.clear();
    cluster.fakes.clear();
    // The old writer task lets go of the database when it sees its queue closed.
    let reopened = tokio::time::timeout(WAIT_LIMIT, async {
        loop {
            match StateStore::open(&path) {
                Ok(store) => return store,
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    })
    .await
    .expect("the database is released after the region stops");
    let store: Arc<dyn RememberStore> =
        Arc::new(LocalState::new(reopened, GroupCommitConfig::default()));
    let settings = TypeSettings::new(16).remembered();
    let writer = RememberWriter::start(store, &cluster.config.remember);
    let (_restarted, fake) = start_region(
        "node-0",
        &cluster.config,
        &cluster.switchboard,
        Some(writer),
        None,
        settings,
    )
    .await;
    fake.wait_for("remembered entities restarted", |s| {
        s.started_without_message.len() == 5
    })
    .await;
    let mut started: Vec<String> = fake.with(|s| {
        s.started_without_message
            .iter()
            .map(|a| a.id.clone())
            .collect()
    });
    started.sort();
    assert_eq!(
        started,
        vec!["user-0", "user-1", "user-2", "user-4", "user-5"]
    );
}

#[tokio::test(start_paused = true)]
async fn recovery_is_paced_by_the_configured_rate() {
    let store = MemoryStore::default();
    let ids: Vec<RememberOp> = (0..400)
        .map(|index| {
            let id = format!("r-{index}");
            let key = key_of(&id, 16);
            RememberOp::Started(RememberedId {
                type_key: key.type_key,
                shard: key.shard,
                id,
            })
        })
        .collect();
    store.apply(ids).await.unwrap();
    let mut config = test_config();
    config.recovery_rate_per_second = 200;
    let cluster = cluster(0, config.clone(), None).await;
    let started = tokio::time::Instant::now();
    let settings = TypeSettings::new(16).remembered();
    let writer = RememberWriter::start(Arc::new(store), &config.remember);
    let (_region, fake) = start_region(
        "node-0",
        &config,
        &cluster.switchboard,
        Some(writer),
        None,
        settings,
    )
    .await;
    cluster.membership.join("node-0", Vec::<String>::new());
    fake.wait_for("all recovered", |s| s.started_without_message.len() == 400)
        .await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1900),
        "400 at 200/s took only {elapsed:?}"
    );
}
