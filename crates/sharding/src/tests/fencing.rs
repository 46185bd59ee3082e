//! Coordinator decisions are fenced, and a region serves only what the catalog committed: a
//! deposed coordinator that goes on deciding allocates nothing, an allocation the catalog has
//! not committed is not served, and a committed assignment to another node stops a shard here.

use super::*;
use crate::link::LinkMessage;
use tessera_contract::Allocation;
use tessera_metadata::{Command, ShardAssignment};

fn store_in(directory: &tempfile::TempDir) -> MetadataStore {
    let database = redb::Database::create(directory.path().join("catalog.redb")).unwrap();
    MetadataStore::open(Arc::new(database)).unwrap()
}

async fn until(what: &str, condition: impl Fn() -> bool) {
    let poll = async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    assert!(
        tokio::time::timeout(WAIT_LIMIT, poll).await.is_ok(),
        "timed out waiting for {what}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_deposed_coordinator_allocates_nothing() {
    let config = test_config();
    let switchboard = Arc::new(Switchboard::new());
    let membership = Membership::new();
    let settings = TypeSettings::new(config.num_shards);
    let (region, _fake) = start_region("node-0", &config, &switchboard, None, None, settings).await;
    membership.join("node-0", Vec::<String>::new());
    let directory = tempfile::tempdir().unwrap();
    let plane = test_plane(&directory);
    let coordinator = Coordinator::start_in_epoch(
        config.clone(),
        3,
        membership.subscribe(),
        Arc::clone(&switchboard),
        Arc::clone(&plane),
    )
    .unwrap();
    let ids = one_id_per_shard(config.num_shards);
    let first = counter().entity(ids[&0].clone());
    assert_eq!(region.ask(first, b"a".to_vec(), None).await.unwrap(), b"a");
    assert_eq!(plane.store().coordinator_epoch().unwrap(), 3);

    // The coordinator of a later view takes the seat; this one has not noticed.
    plane
        .submit(Command::SeatCoordinator { epoch: 4 })
        .await
        .unwrap();
    let second = counter().entity(ids[&1].clone());
    let refused = region.ask(second, b"b".to_vec(), None).await;
    assert!(refused.is_err(), "{refused:?}");
    let committed = plane.store().shard_table().unwrap();
    assert_eq!(
        committed.len(),
        1,
        "only the first shard was ever allocated"
    );
    assert!(!committed.contains_key(&ShardKey::new(counter(), 1)));
    // Told it was deposed, the coordinator stopped: its queries go unanswered.
    let stopped = async {
        while coordinator.allocation_table().await.is_ok() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    assert!(tokio::time::timeout(WAIT_LIMIT, stopped).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_region_serves_only_what_the_catalog_committed() {
    let config = test_config();
    let switchboard = Arc::new(Switchboard::new());
    let directory = tempfile::tempdir().unwrap();
    let store = store_in(&directory);
    let fake = FakeEntities::new(None, None);
    let local: Arc<dyn LocalEntities> = fake.clone();
    let parts = RegionParts {
        node: "node-0".into(),
        config: config.clone(),
        switchboard: Arc::clone(&switchboard),
        remember: None,
        shard_states: None,
        lease: None,
        catalog: Some(store.clone()),
    };
    let (region, ()) = Region::start(parts, |_router| (local, ())).unwrap();
    region
        .register_type(counter(), TypeSettings::new(config.num_shards))
        .await
        .unwrap();
    let assign = |shard, expected, to: &str| Command::AssignShards {
        epoch: 0,
        assignments: vec![ShardAssignment {
            key: ShardKey::new(counter(), shard),
            expected,
            to: to.into(),
        }],
    };
    let here = |generation| Allocation {
        node: "node-0".into(),
        generation,
    };
    let (committed_key, told_key) = (ShardKey::new(counter(), 1), ShardKey::new(counter(), 2));
    store.apply(assign(1, None, "node-0")).unwrap();

    // Told it owns shard 2 at generation 2, which the catalog has not committed, then shard 1,
    // which it has: links are handled in order, so once shard 1 is served, shard 2 was judged.
    let tell = |key: &ShardKey, allocation| LinkMessage::Allocated {
        key: key.clone(),
        allocation,
    };
    switchboard
        .send_to_region("node-0", tell(&told_key, here(2)))
        .unwrap();
    switchboard
        .send_to_region("node-0", tell(&committed_key, here(1)))
        .unwrap();
    until("shard 1 served", || region.owns(&committed_key)).await;
    assert!(
        !region.owns(&told_key),
        "an allocation the catalog has not committed is not served"
    );

    // The catalog commits it: the region serves it.
    let applied = store.apply(assign(2, None, "node-0")).unwrap();
    region.catalog_applied(&applied).await;
    until("shard 2 served once committed", || region.owns(&told_key)).await;

    // An entity runs in shard 1; the catalog gives shard 1 to node-1 with no word from any
    // coordinator: the region stops serving it and stops its entities.
    let ids = one_id_per_shard(config.num_shards);
    let address = counter().entity(ids[&1].clone());
    assert_eq!(
        region.ask(address, b"x".to_vec(), None).await.unwrap(),
        b"x"
    );
    assert_eq!(fake.live_in_shard(&counter(), 1), 1);
    let applied = store.apply(assign(1, Some(1), "node-1")).unwrap();
    region.catalog_applied(&applied).await;
    until("shard 1 given up", || !region.owns(&committed_key)).await;
    fake.wait_for("shard 1's entities stopped", |state| {
        state.live.values().all(|shard| *shard != 1)
    })
    .await;
    assert!(region.owns(&told_key));
}

/// The plane of a new metadata primary that has not applied everything committed yet: its
/// local catalog lags by `backlog`, which it applies (as a VSR primary does) before the first
/// command it orders.
struct LaggingPlane {
    store: MetadataStore,
    backlog: Mutex<Vec<Command>>,
}

impl MetadataPlane for LaggingPlane {
    fn submit(
        &self,
        command: Command,
    ) -> BoxFuture<'static, Result<Applied, tessera_metadata::MetadataError>> {
        let backlog: Vec<Command> = std::mem::take(&mut *self.backlog.lock().unwrap());
        for committed in backlog {
            self.store.apply(committed).unwrap();
        }
        let applied = self.store.apply(command);
        Box::pin(async move { applied })
    }

    fn store(&self) -> &MetadataStore {
        &self.store
    }

    fn status(&self) -> tessera_metadata::PlaneStatus {
        tessera_metadata::PlaneStatus::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_coordinator_reads_the_table_only_after_everything_committed_before_it() {
    let config = test_config();
    let switchboard = Arc::new(Switchboard::new());
    let membership = Membership::new();
    let mut regions = Vec::new();
    for node in ["node-0", "node-1"] {
        let settings = TypeSettings::new(config.num_shards);
        let (region, _fake) = start_region(node, &config, &switchboard, None, None, settings).await;
        membership.join(node, Vec::<String>::new());
        regions.push(region);
    }
    // The previous coordinator allocated shard 0 to node-1; this primary has not applied it.
    let directory = tempfile::tempdir().unwrap();
    let plane = Arc::new(LaggingPlane {
        store: store_in(&directory),
        backlog: Mutex::new(vec![Command::AssignShards {
            epoch: 0,
            assignments: vec![ShardAssignment {
                key: ShardKey::new(counter(), 0),
                expected: None,
                to: "node-1".into(),
            }],
        }]),
    });
    let _coordinator = Coordinator::start_in_epoch(
        config.clone(),
        1,
        membership.subscribe(),
        Arc::clone(&switchboard),
        plane.clone(),
    )
    .unwrap();
    // The first ask for shard 0 is answered with the committed owner, not a second allocation.
    let ids = one_id_per_shard(config.num_shards);
    let address = counter().entity(ids[&0].clone());
    let reply = regions[0].ask(address, b"first".to_vec(), None).await;
    assert_eq!(reply.unwrap(), b"first");
    assert!(regions[1].owns(&ShardKey::new(counter(), 0)));
    let table = plane.store().shard_table().unwrap();
    assert_eq!(table[&ShardKey::new(counter(), 0)].generation, 1);
}
