//! A rogue peer for the tests of who may send what between nodes: a bare cluster transport
//! holding a certificate from the cluster CA, which dials a node and sends it whatever frames
//! a test forges, exactly as a node would send them, and keeps every frame the node sends
//! back. It can join the catalog like a real node (its own `JoinMember`), so a test can forge
//! as a member too.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tessera_cluster::handshake::ShardLayout;
use tessera_cluster::{Direction, Inbound, Transport, TransportConfig, load_identity};
use tessera_consensus::group::{GroupFrame, GroupMessage};
use tessera_consensus::message::Request;
use tessera_contract::{Allocation, EntityAddress, ShardKey};
use tessera_host::node::PeerMessage;
use tessera_metadata::{CatalogMachine, Command, METADATA_GROUP};
use tessera_sharding::LinkMessage;
use tessera_sharding::link::{WireBody, WireEnvelope};

/// How long the rogue waits for anything before the test fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// How often an unanswered catalog command is sent again (the primary may not have had it).
const RESEND_EVERY: Duration = Duration::from_secs(1);

/// The rogue: its transport, and what the node sent it.
pub struct Rogue {
    /// Its node id.
    pub id: String,
    /// The node it dialed.
    pub target: String,
    /// Its transport (its stats tell whether the node refused it).
    pub transport: Transport<PeerMessage>,
    inbound: Inbound<PeerMessage>,
    /// Every frame the node sent it so far, oldest first.
    pub received: Vec<PeerMessage>,
    batch: u64,
}

impl Rogue {
    /// Dials `target` at `address` as `id`, with `id`'s certificate in `certs`, as a member
    /// of cluster `cluster_id` would (redialing within milliseconds when cut off).
    pub async fn dial(
        certs: &Path,
        id: &str,
        cluster_id: &str,
        target: &str,
        address: SocketAddr,
    ) -> Rogue {
        let mut config = TransportConfig::new(cluster_id, SocketAddr::from(([127, 0, 0, 1], 0)));
        config.reconnect_backoff_min = Duration::from_millis(10);
        config.reconnect_backoff_max = Duration::from_millis(100);
        // The test clusters' layout (default shards, the plane off): a rogue with a valid
        // certificate passes every check of the handshake.
        config.layout = ShardLayout {
            shards: tessera_sharding::ShardingConfig::default().num_shards,
            partitions: 0,
        };
        let identity = load_identity(certs, id).expect("the rogue's certificate");
        let (transport, inbound) = Transport::start(config, identity)
            .await
            .expect("the rogue's transport starts");
        transport
            .add_peer_with(target, address, Direction::Dial)
            .expect("the target as a peer");
        Rogue {
            id: id.to_string(),
            target: target.to_string(),
            transport,
            inbound,
            received: Vec::new(),
            batch: 0,
        }
    }

    /// Sends `message` to the node.
    pub fn send(&self, message: PeerMessage) {
        self.transport
            .send(&self.target, &message)
            .expect("the frame is queued");
    }

    /// Sends `command` to the node as a catalog request of a new client session, without
    /// waiting; returns the session.
    pub fn submit(&self, command: &Command) -> u64 {
        let client = rand::random::<u64>();
        self.send(submit_frame(&self.id, client, command));
        client
    }

    /// Submits `command` and waits for the primary's answer (sending it again every second),
    /// as a node's client session does.
    pub async fn commit(&mut self, command: &Command) -> Result<Vec<u8>, String> {
        let client = rand::random::<u64>();
        let deadline = Instant::now() + PATIENCE;
        loop {
            self.send(submit_frame(&self.id, client, command));
            let resend = Instant::now() + RESEND_EVERY;
            while Instant::now() < resend {
                if let Some(reply) = self.replies_to(client) {
                    return reply;
                }
                self.receive_until(resend).await;
            }
            assert!(Instant::now() < deadline, "no answer to {command:?}");
        }
    }

    /// Joins the catalog as a (joining) member, with its own address.
    pub async fn join(&mut self) {
        let join = Command::JoinMember {
            node: self.id.clone(),
            cluster_address: self.transport.local_addr().to_string(),
            api_address: "127.0.0.1:1".into(),
            roles: Default::default(),
            joined_ms: 0,
        };
        let answer = self.commit(&join).await.expect("the join commits");
        let result = CatalogMachine::decode_result(&answer);
        assert!(result.is_ok(), "the join is applied: {result:?}");
    }

    /// Waits until the node has dispatched everything this rogue sent before, as a member:
    /// forwards a passivation of `address` (in shard `key`, which the node owns at
    /// `allocation`) and waits for the batch's result, which the node's region sends only after
    /// every earlier message of this rogue was judged.
    pub async fn barrier(
        &mut self,
        address: &EntityAddress,
        key: &ShardKey,
        allocation: &Allocation,
    ) {
        self.batch += 1;
        let batch = self.batch;
        self.send(PeerMessage::Region(LinkMessage::Deliver {
            from: self.id.clone(),
            batch,
            envelopes: vec![WireEnvelope {
                address: address.clone(),
                key: key.clone(),
                allocation: allocation.clone(),
                hops: 0,
                body: WireBody::Passivate,
            }],
        }));
        self.wait_for("the barrier batch's result", |message| {
            matches!(
                message,
                PeerMessage::Region(LinkMessage::Delivered { batch: answered, .. }) if *answered == batch
            )
        })
        .await;
    }

    /// Receives until a frame matches `wanted`; fails the test after `PATIENCE`.
    pub async fn wait_for(&mut self, what: &str, wanted: impl Fn(&PeerMessage) -> bool) {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = self.received.len();
        loop {
            if self.received[seen..].iter().any(&wanted) {
                return;
            }
            seen = self.received.len();
            assert!(Instant::now() < deadline, "gave up waiting for {what}");
            self.receive_until(deadline).await;
        }
    }

    /// Takes whatever the node sent meanwhile, without waiting.
    pub fn take_arrived(&mut self) {
        while let Some(incoming) = self.inbound.try_recv() {
            self.received.push(incoming.message);
        }
    }

    /// Whether the node sent anything matching `unwanted` so far.
    pub fn has_received(&mut self, unwanted: impl Fn(&PeerMessage) -> bool) -> bool {
        self.take_arrived();
        self.received.iter().any(unwanted)
    }

    async fn receive_until(&mut self, deadline: Instant) {
        let wait = deadline.saturating_duration_since(Instant::now());
        if let Ok(Some(incoming)) = tokio::time::timeout(wait, self.inbound.recv()).await {
            self.received.push(incoming.message);
        }
    }

    /// The primary's answer to `client`'s request, if it came.
    fn replies_to(&self, client: u64) -> Option<Result<Vec<u8>, String>> {
        self.received.iter().find_map(|message| match message {
            PeerMessage::Group(GroupFrame {
                message: GroupMessage::Reply(reply),
                ..
            }) if reply.client == client => {
                Some(reply.result.clone().map_err(|error| error.to_string()))
            }
            _ => None,
        })
    }
}

/// A catalog request of `client`'s session (its first), submitted on `origin`.
fn submit_frame(origin: &str, client: u64, command: &Command) -> PeerMessage {
    PeerMessage::Group(GroupFrame {
        group: METADATA_GROUP,
        message: GroupMessage::Submit {
            origin: origin.to_string(),
            request: Request {
                client,
                request_number: 1,
                operation: CatalogMachine::encode_command(command),
            },
        },
    })
}
