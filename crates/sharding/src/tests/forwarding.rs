//! Forwarding batches are bounded in bytes: a region forwards to a stand-in peer behind a link
//! that, like the mesh, refuses a frame over its size limit whole. One tenant's large messages
//! and another's small tells and asks, sent in the same window, land in batches that each fit;
//! a message that could never fit in one is refused alone with `payload_too_large`.

use super::*;
use crate::link::{
    FORWARD_BATCH_BYTES_MAX, FORWARD_PAYLOAD_BYTES_MAX, LinkError, LinkMessage, Refused, WireBody,
    WireReply,
};
use crate::{CoordinatorCommand, RemoteLinks};
use tessera_contract::{ErrorKind, MessageError, NodeId};
use tokio::sync::mpsc;

/// The stand-in peer's node id.
const PEER: &str = "node-1";

/// The frame limit of the fake link: above a batch's byte bound, as the mesh's 80 MiB is, and
/// below what the window's large messages take together.
const FRAME_BYTES_MAX: usize = FORWARD_BATCH_BYTES_MAX + FORWARD_BATCH_BYTES_MAX / 2;

/// A link to the stand-in peer that refuses a frame over [`FRAME_BYTES_MAX`] whole, as the mesh
/// refuses a frame over its transport's limit (and says the peer is unreachable).
struct FrameLimitedLink {
    peer: mpsc::UnboundedSender<(LinkMessage, usize)>,
}

impl RemoteLinks for FrameLimitedLink {
    fn send_to_region(&self, node: &str, message: LinkMessage) -> Result<(), Box<Refused>> {
        let frame_bytes = rmp_serde::to_vec_named(&message).unwrap().len();
        if node != PEER || frame_bytes > FRAME_BYTES_MAX {
            let why = format!("{node} (a frame of {frame_bytes} bytes)");
            return Err(Box::new((LinkError::Unreachable(why), message)));
        }
        self.peer.send((message, frame_bytes)).unwrap();
        Ok(())
    }

    fn send_to_coordinator(&self, _: CoordinatorCommand) -> Result<(), LinkError> {
        Err(LinkError::Unreachable("the coordinator runs here".into()))
    }

    fn regions(&self) -> Vec<NodeId> {
        vec![PEER.to_string()]
    }
}

/// What the stand-in peer received: the size of each batch's frame and every payload.
#[derive(Default)]
struct Received {
    frame_bytes: Vec<usize>,
    payloads: Vec<Vec<u8>>,
}

/// The stand-in peer: takes every batch, records it, and answers each ask with its payload.
async fn stand_in_peer(
    mut inbox: mpsc::UnboundedReceiver<(LinkMessage, usize)>,
    switchboard: Arc<Switchboard>,
    received: Arc<Mutex<Received>>,
) {
    while let Some((message, frame_bytes)) = inbox.recv().await {
        let LinkMessage::Deliver { envelopes, .. } = message else {
            continue;
        };
        let mut received = received.lock().unwrap();
        received.frame_bytes.push(frame_bytes);
        for envelope in envelopes {
            let WireBody::Message {
                payload, reply_to, ..
            } = envelope.body
            else {
                continue;
            };
            if let Some(reply_to) = reply_to {
                let reply = LinkMessage::AskReply {
                    request_id: reply_to.request_id,
                    reply: WireReply::Ok(payload.clone()),
                };
                switchboard.send_to_region(&reply_to.node, reply).unwrap();
            }
            received.payloads.push(payload);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn large_messages_do_not_fail_other_tenants_forwards_and_one_that_never_fits_is_refused() {
    // Shards go only to the stand-in peer, so node-0 forwards everything.
    let config = ShardingConfig {
        role_constraint: Some("owner".into()),
        ..test_config()
    };
    let switchboard = Arc::new(Switchboard::new());
    let (peer, inbox) = mpsc::unbounded_channel();
    assert!(switchboard.set_remote(Arc::new(FrameLimitedLink { peer })));
    let received = Arc::new(Mutex::new(Received::default()));
    tokio::spawn(stand_in_peer(
        inbox,
        Arc::clone(&switchboard),
        Arc::clone(&received),
    ));
    let (bulk, small) = (
        TypeKey::new("bulk", "echo"),
        TypeKey::new("small", "counter"),
    );
    let settings = TypeSettings::new(config.num_shards);
    let (region, _fake) = start_region(
        "node-0",
        &config,
        &switchboard,
        None,
        None,
        settings.clone(),
    )
    .await;
    region
        .register_type(bulk.clone(), settings.clone())
        .await
        .unwrap();
    region.register_type(small.clone(), settings).await.unwrap();
    let membership = Membership::new();
    membership.join("node-0", Vec::<String>::new());
    membership.join(PEER, ["owner"]);
    let catalog = tempfile::tempdir().unwrap();
    let _coordinator = Coordinator::start(
        config.clone(),
        membership.subscribe(),
        Arc::clone(&switchboard),
        test_plane(&catalog),
    )
    .unwrap();

    // Every entity's shard is known to be the peer's before the window.
    let bulk_ids: Vec<String> = (0..8).map(|index| format!("b-{index}")).collect();
    let small_ids: Vec<String> = (0..16).map(|index| format!("s-{index}")).collect();
    let addresses = bulk_ids
        .iter()
        .map(|id| bulk.entity(id.clone()))
        .chain(small_ids.iter().map(|id| small.entity(id.clone())));
    for address in addresses {
        let warm = region.ask(address.clone(), b"warm".to_vec(), None).await;
        assert_eq!(warm, Ok(b"warm".to_vec()), "{address}");
    }
    received.lock().unwrap().payloads.clear();

    // One window: the bulk tenant's large tells (twice a batch together), its message that can
    // never fit, and the small tenant's tells and asks, all queued before the region task runs.
    let large = vec![1u8; FORWARD_BATCH_BYTES_MAX / 4];
    let never_fits = vec![2u8; FORWARD_PAYLOAD_BYTES_MAX + 1];
    let large_tells = bulk_ids
        .iter()
        .map(|id| region.tell(bulk.entity(id.clone()), large.clone()));
    let small_tells = small_ids.iter().map(|id| {
        let payload = format!("tell {id}").into_bytes();
        region.tell(small.entity(id.clone()), payload)
    });
    let small_asks = small_ids.iter().map(|id| {
        let payload = format!("ask {id}").into_bytes();
        region.ask(small.entity(id.clone()), payload, None)
    });
    let (never_fits, large_tells, small_tells, small_asks) = tokio::join!(
        region.tell(bulk.entity("b-0"), never_fits),
        futures::future::join_all(large_tells),
        futures::future::join_all(small_tells),
        futures::future::join_all(small_asks),
    );

    for (id, asked) in small_ids.iter().zip(small_asks) {
        assert_eq!(
            asked,
            Ok(format!("ask {id}").into_bytes()),
            "the ask to {id}"
        );
    }
    for (id, told) in small_ids.iter().zip(small_tells) {
        assert_eq!(told, Ok(()), "the tell to {id}");
    }
    for told in large_tells {
        assert_eq!(told, Ok::<(), MessageError>(()));
    }
    let refused = never_fits.expect_err("a message that can never fit is refused");
    assert_eq!(refused.kind, ErrorKind::PayloadTooLarge, "{refused}");
    let expected = bulk_ids.len() + 2 * small_ids.len();
    let received = received.lock().unwrap();
    assert_eq!(
        received.payloads.len(),
        expected,
        "every tell and ask of the window reached the peer, and nothing else"
    );
    assert!(
        received.frame_bytes.len() >= 3,
        "the window took several batches: {:?}",
        received.frame_bytes
    );
    for frame_bytes in &received.frame_bytes {
        assert!(
            *frame_bytes <= FORWARD_BATCH_BYTES_MAX + 1024,
            "a batch of {frame_bytes} bytes"
        );
    }
    assert_eq!(region.counters().tells_dropped, 0);
}
