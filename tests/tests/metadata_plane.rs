//! Three voters over real loopback transports with mutual TLS: a command submitted on any of
//! them commits everywhere; a refusal comes back as the submitter's error; the cluster goes on
//! when the primary is gone; a restarted voter rebuilds its catalog from its journal; a
//! non-voting follower rebuilds the catalog from the voters and submits through them.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_cluster::{Direction, Transport, TransportConfig, create_dev_cluster, load_identity};
use tessera_consensus::group::GroupFrame;
use tessera_contract::BoxFuture;
use tessera_metadata::replicated::{PlaneConfig, ReplicatedPlane};
use tessera_metadata::{
    Applied, CatalogObserver, Command, MetadataError, MetadataPlane, MetadataStore, Quotas, Tenant,
};
use tessera_tests::plane::dedicated_transport;

const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
const DEADLINE: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Recorder {
    applied: Mutex<Vec<Applied>>,
}

impl CatalogObserver for Recorder {
    fn applied<'a>(&'a self, applied: &'a Applied) -> BoxFuture<'a, ()> {
        self.applied
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(applied.clone());
        Box::pin(async {})
    }
}

impl Recorder {
    /// Waits until the observer has heard of tenant `name`'s creation. A follower's catalog
    /// holds the tenant before its observer is told, so reading the store first does not mean
    /// the observer has heard yet.
    async fn wait_for_tenant(&self, name: &str) {
        let started = Instant::now();
        loop {
            let seen = self.applied.lock().expect("recorder").clone();
            if seen
                .iter()
                .any(|applied| matches!(applied, Applied::Tenant(tenant) if tenant.name == name))
            {
                return;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "the observer never heard of tenant {name}: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

struct Voter {
    plane: Option<ReplicatedPlane>,
    transport: Option<Arc<Transport<GroupFrame>>>,
    store: MetadataStore,
    recorder: Arc<Recorder>,
}

struct Harness {
    dir: tempfile::TempDir,
    addresses: Vec<SocketAddr>,
    voters: Vec<Voter>,
}

fn tenant(name: &str) -> Command {
    Command::CreateTenant {
        name: name.into(),
        token_sha256: format!("{name}-token"),
        quotas: Quotas::default(),
        created_ms: 1,
    }
}

impl Harness {
    async fn start() -> Harness {
        let dir = tempfile::tempdir().expect("temp dir");
        create_dev_cluster(&dir.path().join("certs"), &VOTERS).expect("certificates");
        // Bind each listener once to learn a free port, then start on it.
        let mut addresses = Vec::new();
        for _ in VOTERS {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
            addresses.push(probe.local_addr().expect("address"));
        }
        let mut harness = Harness {
            dir,
            addresses,
            voters: Vec::new(),
        };
        for index in 0..VOTERS.len() {
            let store = harness.open_store(index);
            let voter = harness.start_voter(index, store).await;
            harness.voters.push(voter);
        }
        harness
    }

    fn open_store(&self, index: usize) -> MetadataStore {
        let path = self.dir.path().join(format!("{}.redb", VOTERS[index]));
        let database = redb::Database::create(path).expect("database");
        MetadataStore::open(Arc::new(database)).expect("catalog")
    }

    async fn start_voter(&self, index: usize, store: MetadataStore) -> Voter {
        let identity =
            load_identity(&self.dir.path().join("certs"), VOTERS[index]).expect("identity");
        let mut config = TransportConfig::new("plane-test", self.addresses[index]);
        // A follower dials the voters before they know it.
        config.admit_unknown_peers = true;
        let (transport, inbound) = Transport::<GroupFrame>::start(config, identity)
            .await
            .expect("transport");
        for (peer, address) in VOTERS.iter().zip(&self.addresses) {
            if *peer != VOTERS[index] {
                transport.add_peer(peer, *address).expect("peer");
            }
        }
        let transport = Arc::new(transport);
        let (outbox, plane_inbound) = dedicated_transport(transport.clone(), inbound);
        let recorder = Arc::new(Recorder::default());
        let config = PlaneConfig {
            voters: VOTERS.iter().map(|voter| voter.to_string()).collect(),
            node: VOTERS[index].into(),
            journal: self.dir.path().join(format!("{}.journal", VOTERS[index])),
            tick: Duration::from_millis(10),
            checkpoint_interval_ops: None,
        };
        let plane = ReplicatedPlane::start(
            config,
            store.clone(),
            recorder.clone(),
            outbox,
            plane_inbound,
        )
        .expect("plane starts");
        Voter {
            plane: Some(plane),
            transport: Some(transport),
            store,
            recorder,
        }
    }

    fn plane(&self, index: usize) -> &ReplicatedPlane {
        self.voters[index].plane.as_ref().expect("a running voter")
    }

    /// Stops a voter as a crash would: its task and connections go, its files stay.
    fn stop(&mut self, index: usize) {
        let voter = &mut self.voters[index];
        voter.plane = None;
        if let Some(transport) = voter.transport.take() {
            transport.close();
        }
    }

    async fn wait_for_tenant(&self, index: usize, name: &str) -> Tenant {
        let started = Instant::now();
        loop {
            if let Some(tenant) = self.voters[index].store.tenant(name).expect("read") {
                return tenant;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{} never applied tenant {name}",
                VOTERS[index]
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_submitted_on_a_backup_commits_on_every_voter() {
    let harness = Harness::start().await;
    let applied = harness.plane(1).submit(tenant("acme")).await;
    assert!(
        matches!(applied, Ok(Applied::Tenant(ref tenant)) if tenant.name == "acme"),
        "{applied:?}"
    );
    // The submitter reads its own write at once.
    assert!(
        harness.voters[1]
            .store
            .tenant("acme")
            .expect("read")
            .is_some()
    );
    for index in 0..VOTERS.len() {
        harness.wait_for_tenant(index, "acme").await;
    }
    // Every node's observer hears of the command.
    for voter in &harness.voters {
        voter.recorder.wait_for_tenant("acme").await;
    }
    let refused = harness.plane(2).submit(tenant("acme")).await;
    assert_eq!(refused, Err(MetadataError::TenantExists("acme".into())));
    let status = harness.plane(0).status();
    assert_eq!(status.primary.as_deref(), Some("n1"));
    assert!(status.commit >= 2, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_voters_go_on_without_the_primary_and_a_restarted_voter_catches_up() {
    let mut harness = Harness::start().await;
    harness
        .plane(0)
        .submit(tenant("before"))
        .await
        .expect("committed with all three");
    harness.stop(0);
    let after = harness.plane(2).submit(tenant("after")).await;
    assert!(after.is_ok(), "a new primary takes the command: {after:?}");
    harness.wait_for_tenant(1, "after").await;
    let status = harness.plane(1).status();
    assert_ne!(status.primary.as_deref(), Some("n1"), "{status:?}");
    assert!(status.view >= 1, "{status:?}");
    // The old primary comes back on its own files and learns what it missed.
    let store = harness.voters[0].store.clone();
    let restarted = harness.start_voter(0, store).await;
    harness.voters[0] = restarted;
    harness.wait_for_tenant(0, "before").await;
    harness.wait_for_tenant(0, "after").await;
    let third = harness.plane(0).submit(tenant("third")).await;
    assert!(third.is_ok(), "{third:?}");
    for index in 0..VOTERS.len() {
        harness.wait_for_tenant(index, "third").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_rebuilds_the_catalog_from_the_voters_and_submits_through_them() {
    let harness = Harness::start().await;
    harness
        .plane(0)
        .submit(tenant("before"))
        .await
        .expect("committed by the voters");
    let certs = harness.dir.path().join("certs");
    create_dev_cluster(&certs, &["n9"]).expect("the follower's certificate");
    let identity = load_identity(&certs, "n9").expect("identity");
    let listen = SocketAddr::from(([127, 0, 0, 1], 0));
    let (transport, inbound) =
        Transport::<GroupFrame>::start(TransportConfig::new("plane-test", listen), identity)
            .await
            .expect("transport");
    for (voter, address) in VOTERS.iter().zip(&harness.addresses) {
        transport
            .add_peer_with(voter, *address, Direction::Dial)
            .expect("voter");
    }
    let (outbox, plane_inbound) = dedicated_transport(Arc::new(transport), inbound);
    let database = redb::Database::create(harness.dir.path().join("n9.redb")).expect("database");
    let store = MetadataStore::open(Arc::new(database)).expect("catalog");
    let recorder = Arc::new(Recorder::default());
    let config = PlaneConfig {
        voters: VOTERS.iter().map(|voter| voter.to_string()).collect(),
        node: "n9".into(),
        journal: harness.dir.path().join("n9.unused"),
        tick: Duration::from_millis(10),
        checkpoint_interval_ops: None,
    };
    let follower = ReplicatedPlane::follow(
        config,
        store.clone(),
        recorder.clone(),
        outbox,
        plane_inbound,
    )
    .expect("follower starts");

    // What the voters committed before it started reaches its catalog and its observer.
    let deadline = Instant::now() + DEADLINE;
    while store.tenant("before").expect("read").is_none() {
        assert!(Instant::now() < deadline, "the follower never caught up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    recorder.wait_for_tenant("before").await;
    // Its own command commits on the voters and is applied here before it is answered.
    let applied = follower.submit(tenant("from-follower")).await;
    assert!(
        matches!(applied, Ok(Applied::Tenant(ref tenant)) if tenant.name == "from-follower"),
        "{applied:?}"
    );
    assert!(store.tenant("from-follower").expect("read").is_some());
    for index in 0..VOTERS.len() {
        harness.wait_for_tenant(index, "from-follower").await;
    }
    let refused = follower.submit(tenant("before")).await;
    assert_eq!(refused, Err(MetadataError::TenantExists("before".into())));
    assert_eq!(follower.status().primary.as_deref(), Some("n1"));
}
