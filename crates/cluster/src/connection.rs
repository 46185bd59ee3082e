//! One established connection, read and written at once. The writer takes whatever is
//! queued for the peer (up to `write_batch_frames_max` frames), writes it all and flushes
//! once. The reader decodes each frame into an envelope: messages and requests go to the
//! application's inbound queue, replies to the request that waits for them. A frame that
//! is oversized or does not decode closes the connection and is counted; nothing a peer
//! sends can panic the node.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::frame::{self, Connection, Envelope, FRAME_LENGTH_PREFIX_BYTES};
use super::request::{Incoming, Responder};
use super::send_queue::FrameReceiver;
use super::shared::{PeerLink, Shared, lock};
use super::stats::{add, bump};

type FrameSink = SplitSink<Connection, Bytes>;
type FrameStream = SplitStream<Connection>;

/// Why a connection ended.
#[derive(Debug)]
enum Ended {
    /// The peer closed it, or it failed.
    Lost,
    /// The peer sent a frame that was oversized or did not decode.
    BadInput,
    /// The peer was removed or the transport closed.
    Stopped,
}

/// What the peer's task does once a connection ends.
pub(crate) enum AfterServing {
    /// The peer dialed again: serve this newer connection in its place.
    Replaced(Box<Connection>),
    /// Get a new connection.
    Reconnect,
    /// The peer was removed or the transport closed.
    Stop,
}

/// Serves `connection` until it ends or a newer one replaces it.
pub(crate) async fn serve<M>(
    shared: &Arc<Shared<M>>,
    link: &Arc<PeerLink>,
    connection: Connection,
    queued: &mut FrameReceiver,
    accepted: &mut mpsc::Receiver<Connection>,
) -> AfterServing
where
    M: Serialize + DeserializeOwned + Send + 'static,
{
    let (sink, stream) = connection.split();
    let ended = tokio::select! {
        ended = write_loop(shared, sink, queued) => ended,
        ended = read_loop(shared, link, stream) => ended,
        newer = accepted.recv() => match newer {
            Some(newer) => {
                bump(&shared.stats.connections_ended);
                return AfterServing::Replaced(Box::new(newer));
            }
            None => Ended::Stopped,
        },
    };
    if !matches!(ended, Ended::Stopped) {
        bump(&shared.stats.connections_ended);
    }
    match ended {
        Ended::Lost => AfterServing::Reconnect,
        Ended::BadInput => {
            bump(&shared.stats.peers_disconnected_bad_input);
            tracing::warn!(peer = %link.node_id, "cluster peer disconnected for bad input");
            AfterServing::Reconnect
        }
        Ended::Stopped => AfterServing::Stop,
    }
}

/// Writes queued frames in batches, one flush per batch.
async fn write_loop<M>(
    shared: &Shared<M>,
    mut sink: FrameSink,
    queued: &mut FrameReceiver,
) -> Ended {
    let batch_frames_max = shared.config.write_batch_frames_max;
    loop {
        let Some(first) = queued.recv().await else {
            return Ended::Stopped;
        };
        let mut frames = 0u64;
        let mut bytes = 0u64;
        let mut next = Some(first);
        while let Some(body) = next.take() {
            bytes += (body.len() + FRAME_LENGTH_PREFIX_BYTES) as u64;
            frames += 1;
            if sink.feed(body).await.is_err() {
                return Ended::Lost;
            }
            if frames < batch_frames_max as u64 {
                next = queued.try_recv();
            }
        }
        if sink.flush().await.is_err() {
            return Ended::Lost;
        }
        add(&shared.stats.frames_sent, frames);
        add(&shared.stats.bytes_sent, bytes);
    }
}

/// Reads frames and dispatches them until the connection ends.
async fn read_loop<M>(shared: &Shared<M>, link: &PeerLink, mut stream: FrameStream) -> Ended
where
    M: Serialize + DeserializeOwned + Send + 'static,
{
    let Some(inbound) = lock(&shared.inbound).clone() else {
        return Ended::Stopped;
    };
    loop {
        let body = match stream.next().await {
            None => return Ended::Lost,
            Some(Ok(body)) => body,
            Some(Err(error)) if frame::is_oversized(&error) => {
                bump(&shared.stats.oversized_frames);
                return Ended::BadInput;
            }
            Some(Err(_)) => return Ended::Lost,
        };
        bump(&shared.stats.frames_received);
        add(
            &shared.stats.bytes_received,
            (body.len() + FRAME_LENGTH_PREFIX_BYTES) as u64,
        );
        let Ok(envelope) = frame::decode::<Envelope<M>>(&body) else {
            bump(&shared.stats.malformed_frames);
            return Ended::BadInput;
        };
        dispatch(shared, link, &inbound, envelope);
    }
}

fn dispatch<M>(
    shared: &Shared<M>,
    link: &PeerLink,
    inbound: &mpsc::Sender<Incoming<M>>,
    envelope: Envelope<M>,
) {
    let incoming = match envelope {
        Envelope::Reply { id, message } => {
            if !shared.pending.complete(id, &link.node_id, message) {
                bump(&shared.stats.replies_unmatched);
            }
            return;
        }
        Envelope::Tell { message } => Incoming {
            from: link.node_id.clone(),
            message,
            reply: None,
        },
        Envelope::Request { id, message } => Incoming {
            from: link.node_id.clone(),
            message,
            reply: Some(Responder {
                id,
                peer: link.node_id.clone(),
                queue: link.queue.clone(),
                max_frame_bytes: shared.config.max_frame_bytes,
                stats: Arc::clone(&shared.stats),
                _message: std::marker::PhantomData,
            }),
        },
    };
    if let Err(mpsc::error::TrySendError::Full(_)) = inbound.try_send(incoming) {
        bump(&shared.stats.inbound_dropped_full);
    }
}
