//! The hello exchange that opens every connection, after TLS. The dialer sends a [`Hello`]
//! (magic, protocol version, cluster id, node id, incarnation, shard layout); the acceptor checks
//! it, and answers
//! `Welcome` with its own hello, or `Refused` with the reason and closes. The dialer checks
//! the acceptor's hello the same way. Handshake frames are capped at [`HELLO_FRAME_BYTES_MAX`];
//! the caller bounds the whole exchange with the handshake timeout.

use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

use super::frame;
use super::stats::RefusalReason;
use tessera_contract::NodeId;

/// The first bytes of every hello, "TSRA": what makes a connection a Tessera one.
pub const HELLO_MAGIC: u32 = u32::from_be_bytes(*b"TSRA");

/// The protocol this build speaks. A peer with another version is refused. Version 2: every
/// VSR group's frame names its group. Version 3: a hello names its sender's incarnation.
/// Version 4: a VSR request's operation is MessagePack `bin`, not an array of integers.
/// Version 5: a partition group is named by its partition and epoch, and a report of the
/// partitions a node leads carries each one's epoch (partition moves). Version 6: a hello names
/// its sender's [`ShardLayout`]. Version 7: a catalog command may carry a type's or a tenant's
/// replication factor, which a replica of an earlier build could not read (its catalog would
/// part from the others').
pub const PROTOCOL_VERSION: u16 = 7;

/// The largest hello or hello reply. Hellos are tiny; the cap keeps a peer from making the
/// handshake buffer a full `max_frame_bytes`.
pub const HELLO_FRAME_BYTES_MAX: usize = 1024;

/// The first frame each way.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// [`HELLO_MAGIC`].
    pub magic: u32,
    /// [`PROTOCOL_VERSION`].
    pub protocol_version: u16,
    /// The sender's cluster.
    pub cluster_id: String,
    /// The sender's node id; must be the one its certificate names.
    pub node_id: NodeId,
    /// Which run of that node this is: drawn at random when its transport starts, so a
    /// restarted process is told apart from the one a cluster removed (whose incarnation its
    /// peers refuse, see `Transport::quarantine_peer`). Never 0.
    pub incarnation: u64,
    /// How the sender places entity state; a peer must place it the same way.
    pub layout: ShardLayout,
}

/// How a node maps entities to shards and shards to partitions (its `num_shards` and its
/// partition count). Two nodes that differ would disagree on which shard, and so which node
/// and which partition's replicas, hold an entity's state: each would serve entities the
/// other holds as new. A peer with another layout is refused ([`RefusalReason::WrongLayout`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardLayout {
    /// Shards per entity type.
    pub shards: u32,
    /// Partitions of the partition plane; 0 with the plane off.
    pub partitions: u32,
}

/// The fields every protocol version keeps, read before the rest: a hello from another
/// version is refused for its version, not as garbage.
#[derive(Deserialize)]
struct HelloHeader {
    magic: u32,
    protocol_version: u16,
}

/// The acceptor's answer to a hello.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum HelloReply {
    /// Accepted; the acceptor's own hello.
    Welcome { hello: Hello },
    /// Refused; the connection closes.
    Refused { reason: RefusalReason },
}

/// Why a handshake did not complete.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// This node refused the peer.
    #[error("refused the peer: {0:?}")]
    Refused(RefusalReason),
    /// The peer refused this node.
    #[error("the peer refused us: {0:?}")]
    RefusedByPeer(RefusalReason),
    /// The connection closed or failed mid-handshake.
    #[error("connection failed during the handshake: {0}")]
    Io(#[from] std::io::Error),
    /// The exchange took longer than the handshake timeout.
    #[error("the handshake timed out")]
    TimedOut,
}

impl Hello {
    /// This build's hello for `node_id` in `cluster_id`, as a new incarnation of the node,
    /// with the default (empty) layout.
    pub fn new(cluster_id: &str, node_id: &str) -> Hello {
        Hello {
            magic: HELLO_MAGIC,
            protocol_version: PROTOCOL_VERSION,
            cluster_id: cluster_id.to_owned(),
            node_id: node_id.to_owned(),
            incarnation: rand::random::<u64>().max(1),
            layout: ShardLayout::default(),
        }
    }

    /// The same hello naming `layout`.
    pub fn with_layout(mut self, layout: ShardLayout) -> Hello {
        self.layout = layout;
        self
    }
}

/// Reads a hello frame and checks it against this node's own (`own`): magic, then version,
/// then the rest of the hello, then the cluster id and the layout.
fn read_hello(body: &[u8], own: &Hello) -> Result<Hello, RefusalReason> {
    let header: HelloHeader = frame::decode(body).map_err(|_| RefusalReason::BadHello)?;
    if header.magic != HELLO_MAGIC {
        return Err(RefusalReason::BadMagic);
    }
    if header.protocol_version != PROTOCOL_VERSION {
        return Err(RefusalReason::WrongVersion);
    }
    let hello: Hello = frame::decode(body).map_err(|_| RefusalReason::BadHello)?;
    check_hello(&hello, own)?;
    Ok(hello)
}

/// Checks a decoded hello against this node's own: its cluster and its layout.
fn check_hello(hello: &Hello, own: &Hello) -> Result<(), RefusalReason> {
    if hello.magic != HELLO_MAGIC {
        return Err(RefusalReason::BadMagic);
    }
    if hello.protocol_version != PROTOCOL_VERSION {
        return Err(RefusalReason::WrongVersion);
    }
    if hello.cluster_id != own.cluster_id {
        return Err(RefusalReason::WrongCluster);
    }
    if hello.layout != own.layout {
        return Err(RefusalReason::WrongLayout);
    }
    Ok(())
}

/// The acceptor's side: reads the dialer's hello, checks it and then `check_peer` (the
/// certificate, the peer table and the refused incarnations), and answers. Returns the
/// dialer's hello.
pub(crate) async fn accept<S>(
    framed: &mut Framed<S, LengthDelimitedCodec>,
    own: &Hello,
    check_peer: impl FnOnce(&Hello) -> Result<(), RefusalReason>,
) -> Result<Hello, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    framed
        .codec_mut()
        .set_max_frame_length(HELLO_FRAME_BYTES_MAX);
    let checked = match framed.next().await {
        None => return Err(closed()),
        Some(Err(error)) if frame::is_oversized(&error) => Err(RefusalReason::BadHello),
        Some(Err(error)) => return Err(error.into()),
        Some(Ok(body)) => {
            read_hello(&body, own).and_then(|hello| check_peer(&hello).map(|()| hello))
        }
    };
    match checked {
        Ok(hello) => {
            send(framed, &HelloReply::Welcome { hello: own.clone() }).await?;
            Ok(hello)
        }
        Err(reason) => {
            // Best effort: the peer may already be gone, and we close either way.
            let _ = send(framed, &HelloReply::Refused { reason }).await;
            Err(HandshakeError::Refused(reason))
        }
    }
}

/// The dialer's side: sends `own` and checks the acceptor's answer, which must come from
/// `expected_peer`. Returns the acceptor's hello.
pub(crate) async fn dial<S>(
    framed: &mut Framed<S, LengthDelimitedCodec>,
    own: &Hello,
    expected_peer: &str,
) -> Result<Hello, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    framed
        .codec_mut()
        .set_max_frame_length(HELLO_FRAME_BYTES_MAX);
    send(framed, own).await?;
    let body = match framed.next().await {
        None => return Err(closed()),
        Some(Err(error)) if frame::is_oversized(&error) => {
            return Err(HandshakeError::Refused(RefusalReason::BadHello));
        }
        Some(Err(error)) => return Err(error.into()),
        Some(Ok(body)) => body,
    };
    let reply: HelloReply =
        frame::decode(&body).map_err(|_| HandshakeError::Refused(RefusalReason::BadHello))?;
    let hello = match reply {
        HelloReply::Refused { reason } => return Err(HandshakeError::RefusedByPeer(reason)),
        HelloReply::Welcome { hello } => hello,
    };
    check_hello(&hello, own).map_err(HandshakeError::Refused)?;
    if hello.node_id != expected_peer {
        return Err(HandshakeError::Refused(RefusalReason::NodeIdMismatch));
    }
    Ok(hello)
}

async fn send<S, T>(
    framed: &mut Framed<S, LengthDelimitedCodec>,
    value: &T,
) -> Result<(), HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    T: Serialize,
{
    let body = frame::encode(value, HELLO_FRAME_BYTES_MAX).map_err(std::io::Error::other)?;
    framed.send(body).await?;
    Ok(())
}

fn closed() -> HandshakeError {
    HandshakeError::Io(std::io::ErrorKind::UnexpectedEof.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body<T: Serialize>(value: &T) -> Vec<u8> {
        rmp_serde::to_vec_named(value).unwrap()
    }

    const LAYOUT: ShardLayout = ShardLayout {
        shards: 128,
        partitions: 64,
    };

    /// This node's own hello in cluster `cluster_id`.
    fn own(cluster_id: &str) -> Hello {
        Hello::new(cluster_id, "node-0").with_layout(LAYOUT)
    }

    #[test]
    fn a_good_hello_passes() {
        let hello = Hello::new("c1", "node-1").with_layout(LAYOUT);
        assert_eq!(read_hello(&body(&hello), &own("c1")), Ok(hello));
    }

    #[test]
    fn each_bad_field_has_its_reason() {
        let mut hello = Hello::new("c1", "node-1").with_layout(LAYOUT);
        assert_eq!(
            read_hello(&body(&hello), &own("c2")),
            Err(RefusalReason::WrongCluster)
        );
        for layout in [
            ShardLayout {
                partitions: 0,
                ..LAYOUT
            },
            ShardLayout {
                shards: 256,
                ..LAYOUT
            },
        ] {
            assert_eq!(
                read_hello(&body(&hello.clone().with_layout(layout)), &own("c1")),
                Err(RefusalReason::WrongLayout)
            );
        }
        hello.protocol_version = PROTOCOL_VERSION + 1;
        assert_eq!(
            read_hello(&body(&hello), &own("c1")),
            Err(RefusalReason::WrongVersion)
        );
        hello.magic = 0;
        assert_eq!(
            read_hello(&body(&hello), &own("c1")),
            Err(RefusalReason::BadMagic)
        );
        assert_eq!(
            read_hello(b"\xc1garbage", &own("c1")),
            Err(RefusalReason::BadHello)
        );
    }

    #[test]
    fn a_future_version_with_other_fields_is_refused_for_its_version() {
        #[derive(Serialize)]
        struct FutureHello {
            magic: u32,
            protocol_version: u16,
            features: Vec<String>,
        }
        let future = FutureHello {
            magic: HELLO_MAGIC,
            protocol_version: 9,
            features: vec!["x".into()],
        };
        assert_eq!(
            read_hello(&body(&future), &own("c1")),
            Err(RefusalReason::WrongVersion)
        );
    }
}
