//! A peer holding a certificate from the cluster CA dials a cluster node (`n1`, the only voter:
//! the metadata primary, where the coordinator runs) and forges each kind of message nodes send
//! each other, first as no member, then as a member that joined like any node. The node
//! believes none of it: it counts each refusal by kind
//! (`tessera_peer_dropped_total{reason="unauthorized_<kind>"}`) and its state is unchanged —
//! no shard exported or discarded, no route pinned on the rogue, no foreign state installed, no
//! ownership committed to the catalog, no progress it trails. Once removed, the rogue's process
//! is refused at the handshake; a restart of it (a new incarnation) may join again.
//!
//! Every check waits for the refusals to be counted, or for a barrier the node answers only
//! after it judged everything the rogue sent before (a forwarded batch's result), never for a
//! fixed time.

use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_consensus::group::{GroupFrame, GroupMessage};
use tessera_consensus::message::{Message, Reply};
use tessera_contract::{Allocation, EntityAddress, ShardKey, TypeKey};
use tessera_host::node::{ClusterConfig, MemberAction, Node, PeerMessage};
use tessera_metadata::{Command, METADATA_GROUP, ShardAssignment, TypeOptions};
use tessera_sharding::link::{WireBody, WireEnvelope, WireReply};
use tessera_sharding::{CoordinatorCommand, FnvExtractor, LinkMessage, ShardExtractor};
use tessera_state::ShardPart;
use tessera_tests::rogue::Rogue;
use tessera_tests::{from_msgpack, to_msgpack};

const ADMIN: &str = "rogue-peer-test-admin-token";
const CLUSTER: &str = "rogue-test";
const TENANT: &str = "acme";
const VICTIM: &str = "n1";
const ROGUE: &str = "rogue";

/// The node under attack, with `counter` deployed and counter `c` added to once.
struct Victim {
    _dir: tempfile::TempDir,
    certs: PathBuf,
    node: Arc<Node>,
}

impl Victim {
    async fn start() -> Victim {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let certs = dir.path().join("certs");
        tessera_cluster::create_dev_cluster(&certs, &[VICTIM, ROGUE]).expect("certificates");
        let mut config = tessera_tests::node_config(&dir.path().join(VICTIM), ADMIN, 50);
        config.node_id = VICTIM.into();
        config.cluster = Some(ClusterConfig::new(
            CLUSTER,
            "127.0.0.1:0".parse().expect("an address"),
            &certs,
            vec![VICTIM.into()],
        ));
        // The plane off: the messages forged here are those of owners that hold their shards'
        // state (handoffs, shard state parts), which the partition plane does not send.
        config.sharding.partitions.count = Some(0);
        let node = Node::open(config).await.expect("the node opens");
        node.create_tenant(TENANT, None).await.expect("a tenant");
        let plugin = std::fs::read(tessera_tests::COUNTER).expect("the counter plugin");
        node.deploy(TENANT, "counter", plugin, TypeOptions::default())
            .await
            .expect("the counter deployed");
        let victim = Victim {
            _dir: dir,
            certs,
            node,
        };
        assert_eq!(victim.add("c").await, Ok(1));
        victim
    }

    async fn rogue(&self) -> Rogue {
        let address = self.node.cluster_addr().expect("a cluster node");
        Rogue::dial(&self.certs, ROGUE, CLUSTER, VICTIM, address).await
    }

    /// Adds one to counter `id` through the node: its new value, or why not.
    async fn add(&self, id: &str) -> Result<i64, String> {
        let address = EntityAddress::new(TENANT, "counter", id);
        let payload = to_msgpack(&json!({"Add": 1}));
        let reply = self
            .node
            .ask(&address, payload, Duration::from_secs(5))
            .await
            .map_err(|error| error.to_string())?;
        let value = from_msgpack(&reply)?;
        value
            .as_i64()
            .ok_or_else(|| format!("not a number: {value}"))
    }

    /// Counter `id`'s shard.
    fn key(&self, id: &str) -> ShardKey {
        let extractor = FnvExtractor::new(self.node.config().sharding.num_shards);
        ShardKey::new(TypeKey::new(TENANT, "counter"), extractor.shard_of(id))
    }

    /// The committed allocation of `key`, if any.
    async fn allocation(&self, key: &ShardKey) -> Option<Allocation> {
        let table = self.node.shards().await.expect("the shard table");
        table
            .into_iter()
            .find(|(type_key, shard, _, _)| {
                *type_key == key.type_key.to_string() && *shard == key.shard
            })
            .map(|(_, _, node, generation)| Allocation { node, generation })
    }

    /// Whether the committed allocation table gives the rogue anything.
    async fn rogue_owns_a_shard(&self) -> bool {
        let table = self.node.shards().await.expect("the shard table");
        table.iter().any(|(_, _, node, _)| node == ROGUE)
    }

    /// How many catalog commands the node trails the most advanced member it knows of.
    async fn lag(&self) -> Option<u64> {
        let status = self.node.cluster_status().await.expect("the cluster view");
        let this = status
            .members
            .iter()
            .find(|member| member.record.node == VICTIM);
        this.and_then(|member| member.lag)
    }

    /// `tessera_peer_dropped_total{reason}` and `tessera_peer_refused_total{reason}` now.
    fn counter(&self, family: &str, reason: &str) -> f64 {
        let text = self.node.render_metrics().expect("metrics");
        let lines = text.lines().map(|line| Ok(line.to_string()));
        let scrape = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
        scrape
            .samples
            .iter()
            .find(|sample| sample.metric == family && sample.labels.get("reason") == Some(reason))
            .map(|sample| match sample.value {
                prometheus_parse::Value::Counter(value) => value,
                _ => panic!("{family} is a counter"),
            })
            .unwrap_or_else(|| panic!("{family}{{reason={reason}}} is listed"))
    }

    fn refused(&self, kind: &str) -> f64 {
        self.counter(
            "tessera_peer_dropped_total",
            &format!("unauthorized_{kind}"),
        )
    }

    /// Ids of counters whose shards differ from each other and from `taken`'s.
    fn ids_in_other_shards(&self, count: usize, taken: &[&str]) -> Vec<String> {
        let mut shards: Vec<ShardKey> = taken.iter().map(|id| self.key(id)).collect();
        let mut ids = Vec::new();
        for candidate in (0..).map(|index| format!("x{index}")) {
            let key = self.key(&candidate);
            if !shards.contains(&key) {
                shards.push(key);
                ids.push(candidate);
            }
            if ids.len() == count {
                return ids;
            }
        }
        unreachable!("the ids go on")
    }

    /// A barrier through counter `c`'s shard, which the node owns.
    async fn barrier(&self, rogue: &mut Rogue) {
        let key = self.key("c");
        let allocation = self.allocation(&key).await.expect("c's shard is allocated");
        rogue
            .barrier(
                &EntityAddress::new(TENANT, "counter", "c"),
                &key,
                &allocation,
            )
            .await;
    }
}

fn region(message: LinkMessage) -> PeerMessage {
    PeerMessage::Region(message)
}

fn group(message: GroupMessage) -> PeerMessage {
    PeerMessage::Group(GroupFrame {
        group: METADATA_GROUP,
        message,
    })
}

fn passivate(address: EntityAddress, key: ShardKey, allocation: Allocation) -> WireEnvelope {
    WireEnvelope {
        address,
        key,
        allocation,
        hops: 0,
        body: WireBody::Passivate,
    }
}

fn is_shard_state(message: &PeerMessage) -> bool {
    matches!(
        message,
        PeerMessage::Region(
            LinkMessage::ShardState { .. } | LinkMessage::ShardStateInstalled { .. }
        )
    )
}

fn is_forwarded(message: &PeerMessage) -> bool {
    matches!(message, PeerMessage::Region(LinkMessage::Deliver { .. }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_is_no_member_is_refused_every_kind_and_changes_nothing() {
    let victim = Victim::start().await;
    let mut rogue = victim.rogue().await;
    let c = victim.key("c");
    let c_allocation = victim.allocation(&c).await.expect("c's shard");
    let [d] = <[String; 1]>::try_from(victim.ids_in_other_shards(1, &["c"])).expect("one id");

    rogue.send(PeerMessage::Progress { commit: 1_000_000 });
    // As the seated coordinator (a single voter stays in view 0) would word it: only the
    // sender's authority can refuse it.
    rogue.submit(&Command::AssignShards {
        epoch: 0,
        assignments: vec![ShardAssignment {
            key: c.clone(),
            expected: Some(c_allocation.generation),
            to: ROGUE.into(),
        }],
    });
    rogue.send(group(GroupMessage::Reply(Reply {
        client: 1,
        request_number: 1,
        view: 0,
        result: Ok(Vec::new()),
    })));
    rogue.send(group(GroupMessage::Replica(Message::Commit {
        view: 0,
        commit: 1_000,
    })));
    rogue.send(group(GroupMessage::Entries {
        view: 0,
        commit: 1_000,
        entries: Vec::new(),
    }));
    let c_address = EntityAddress::new(TENANT, "counter", "c");
    rogue.send(region(LinkMessage::Deliver {
        from: ROGUE.into(),
        batch: 1,
        envelopes: vec![passivate(c_address, c.clone(), c_allocation.clone())],
    }));
    rogue.send(region(LinkMessage::Delivered {
        batch: 1,
        accepted: 1,
        refused: Vec::new(),
    }));
    rogue.send(region(LinkMessage::AskReply {
        request_id: 1,
        reply: WireReply::Ok(Vec::new()),
    }));
    rogue.send(PeerMessage::Coordinator(CoordinatorCommand::Allocate {
        key: victim.key(&d),
        requester: ROGUE.into(),
    }));
    rogue.send(PeerMessage::Coordinator(CoordinatorCommand::MoveShard {
        key: c.clone(),
        to: ROGUE.into(),
    }));
    rogue.send(PeerMessage::Coordinator(
        CoordinatorCommand::HandoffComplete {
            key: c.clone(),
            generation: c_allocation.generation,
        },
    ));
    // What a stranger may only say once it is a member is held (its join might be ahead of
    // the node's catalog) and refused when its time is up; the rest is refused at once.
    let kinds = [
        "progress",
        "submit",
        "reply",
        "replica",
        "entries",
        "deliver",
        "delivered",
        "ask_reply",
        "allocate",
        "move_shard",
        "handoff_complete",
    ];
    // Until every refusal is counted, nothing the rogue sent may have taken effect.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            !victim.rogue_owns_a_shard().await,
            "no shard assigned to the rogue through the catalog"
        );
        assert_eq!(
            victim.lag().await,
            Some(0),
            "a forged progress report makes the node trail no one"
        );
        assert!(
            !rogue.has_received(|message| matches!(
                message,
                PeerMessage::Region(LinkMessage::Allocated { .. })
            )),
            "the coordinator answers no stranger"
        );
        let missing: Vec<&str> = kinds
            .iter()
            .copied()
            .filter(|kind| victim.refused(kind) < 1.0)
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "refusals not counted: {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The rogue's own join commits after whatever it submitted before would have.
    rogue.join().await;
    assert!(
        !victim.rogue_owns_a_shard().await,
        "no shard assigned to the rogue through the catalog"
    );
    assert_eq!(victim.add("c").await, Ok(2));
    for kind in kinds {
        assert_eq!(
            victim.refused(kind),
            1.0,
            "unauthorized_{kind}: each refused once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cannot_forge_the_coordinators_word_or_a_shards_state() {
    let victim = Victim::start().await;
    let mut rogue = victim.rogue().await;
    rogue.join().await;
    let c = victim.key("c");
    let c_allocation = victim.allocation(&c).await.expect("c's shard");
    let [d, f] = <[String; 2]>::try_from(victim.ids_in_other_shards(2, &["c"])).expect("two ids");

    // The coordinator's word: c's shard handed off to the rogue (the node would stop c, send
    // its state to the rogue and, acknowledged, discard its copy), and d's shard allocated to
    // the rogue at the highest generation there is (a route no real allocation could undo).
    rogue.send(region(LinkMessage::HandOff {
        key: c.clone(),
        to: Allocation {
            node: ROGUE.into(),
            generation: c_allocation.generation,
        },
    }));
    rogue.send(region(LinkMessage::ShardStateInstalled {
        key: c.clone(),
        generation: c_allocation.generation,
        index: 0,
        error: None,
    }));
    rogue.send(region(LinkMessage::Allocated {
        key: victim.key(&d),
        allocation: Allocation {
            node: ROGUE.into(),
            generation: u64::MAX,
        },
    }));
    // A shard's state no move brings here.
    rogue.send(region(LinkMessage::ShardState {
        key: victim.key(&f),
        generation: c_allocation.generation,
        from: ROGUE.into(),
        part: ShardPart {
            index: 0,
            last: true,
            entities: Vec::new(),
            remembered: Vec::new(),
        },
    }));
    // Ownership through the catalog: only the coordinator's voter assigns shards.
    // As the seated coordinator (a single voter stays in view 0) would word it: only the
    // sender's authority can refuse it.
    rogue.submit(&Command::AssignShards {
        epoch: 0,
        assignments: vec![ShardAssignment {
            key: c.clone(),
            expected: Some(c_allocation.generation),
            to: ROGUE.into(),
        }],
    });
    victim.barrier(&mut rogue).await;

    assert_eq!(
        victim.add("c").await,
        Ok(2),
        "c kept its state and is served here"
    );
    assert!(
        !rogue.has_received(is_shard_state),
        "no shard's state exported to the rogue, nor any installed from it"
    );
    assert_eq!(
        victim.add(&d).await,
        Ok(1),
        "d's shard is allocated here, not pinned on the rogue"
    );
    assert!(
        !rogue.has_received(is_forwarded),
        "nothing forwarded to the rogue"
    );
    rogue
        .commit(&Command::Barrier)
        .await
        .expect("a member's barrier commits");
    assert!(
        !victim.rogue_owns_a_shard().await,
        "no shard assigned to the rogue through the catalog"
    );
    for kind in [
        "hand_off",
        "shard_state_installed",
        "allocated",
        "shard_state",
        "submit",
    ] {
        assert_eq!(victim.refused(kind), 1.0, "unauthorized_{kind}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_routed_by_a_forged_allocation_pins_no_route() {
    let victim = Victim::start().await;
    let mut rogue = victim.rogue().await;
    rogue.join().await;
    let [e] = <[String; 1]>::try_from(victim.ids_in_other_shards(1, &["c"])).expect("one id");
    let forged = Allocation {
        node: ROGUE.into(),
        generation: u64::MAX,
    };
    let started = Instant::now();
    rogue.send(region(LinkMessage::Deliver {
        from: ROGUE.into(),
        batch: 1_000,
        envelopes: vec![passivate(
            EntityAddress::new(TENANT, "counter", e.as_str()),
            victim.key(&e),
            forged,
        )],
    }));
    // Held (it may only be ahead of the node's catalog) and refused when its time is up; the
    // barrier waits behind it.
    victim.barrier(&mut rogue).await;
    assert_eq!(victim.add(&e).await, Ok(1), "e's shard is allocated here");
    assert!(
        !rogue.has_received(is_forwarded),
        "nothing forwarded to the rogue"
    );
    assert_eq!(victim.refused("deliver"), 1.0);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "it was held (it may only be ahead of the catalog), and the barrier behind it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_member_is_refused_when_it_dials_again_and_its_restart_joins() {
    let victim = Victim::start().await;
    let mut rogue = victim.rogue().await;
    rogue.join().await;
    victim
        .node
        .act_on_member(ROGUE, MemberAction::Down)
        .await
        .expect("downed");
    victim
        .node
        .act_on_member(ROGUE, MemberAction::Remove)
        .await
        .expect("removed");
    // Its connection closes once the removal's linger is over; the process dials again at
    // once and is refused, by reason.
    let deadline = Instant::now() + Duration::from_secs(30);
    while victim.counter("tessera_peer_refused_total", "removed") < 1.0
        || rogue.transport.stats().refused_by_peer < 1
    {
        assert!(
            Instant::now() < deadline,
            "the removed process is refused when it dials again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(rogue);
    // A restart of it is a new incarnation: it may join again as a new member.
    let mut restarted = victim.rogue().await;
    restarted.join().await;
    let status = victim
        .node
        .cluster_status()
        .await
        .expect("the cluster view");
    assert!(
        status
            .members
            .iter()
            .any(|member| member.record.node == ROGUE)
    );
}
