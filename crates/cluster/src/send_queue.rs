//! A peer's send queue: the frames waiting for its connection, bounded both in frames
//! (`send_queue_max`) and in bytes (`send_queue_bytes_max`), so that a slow or absent peer costs
//! bounded memory however large the frames are. The sending half is shared by `send` and by the
//! replies to the peer's requests; the peer's task holds the receiving half, and every frame it
//! takes — written, or dropped for a peer down too long — gives its bytes back.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use tokio::sync::mpsc;

/// A peer's send queue of at most `frames_max` frames and `bytes_max` bytes.
pub(crate) fn send_queue(frames_max: usize, bytes_max: usize) -> (FrameSender, FrameReceiver) {
    let (frames, queued) = mpsc::channel(frames_max);
    let queued_bytes = Arc::new(AtomicUsize::new(0));
    let sender = FrameSender {
        frames,
        queued_bytes: Arc::clone(&queued_bytes),
        bytes_max,
    };
    let receiver = FrameReceiver {
        frames: queued,
        queued_bytes,
    };
    (sender, receiver)
}

/// Why a frame was not queued.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum QueueRefused {
    /// The queue holds `frames_max` frames, or the frame would take it past `bytes_max`.
    Full,
    /// The peer's task is gone.
    Closed,
}

/// The sending half of a peer's send queue.
#[derive(Clone, Debug)]
pub(crate) struct FrameSender {
    frames: mpsc::Sender<Bytes>,
    queued_bytes: Arc<AtomicUsize>,
    bytes_max: usize,
}

impl FrameSender {
    /// Queues `frame` without waiting, unless the queue is full in frames or in bytes.
    pub(crate) fn try_send(&self, frame: Bytes) -> Result<(), QueueRefused> {
        let bytes = frame.len();
        let reserved =
            self.queued_bytes
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                    queued
                        .checked_add(bytes)
                        .filter(|total| *total <= self.bytes_max)
                });
        if reserved.is_err() {
            return Err(QueueRefused::Full);
        }
        self.frames.try_send(frame).map_err(|error| {
            self.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
            match error {
                mpsc::error::TrySendError::Full(_) => QueueRefused::Full,
                mpsc::error::TrySendError::Closed(_) => QueueRefused::Closed,
            }
        })
    }
}

/// The receiving half of a peer's send queue, held by the peer's task.
#[derive(Debug)]
pub(crate) struct FrameReceiver {
    frames: mpsc::Receiver<Bytes>,
    queued_bytes: Arc<AtomicUsize>,
}

impl FrameReceiver {
    /// The next frame, once one is queued; `None` once every sender is gone.
    pub(crate) async fn recv(&mut self) -> Option<Bytes> {
        let frame = self.frames.recv().await?;
        self.release(&frame);
        Some(frame)
    }

    /// The next frame if one is queued.
    pub(crate) fn try_recv(&mut self) -> Option<Bytes> {
        let frame = self.frames.try_recv().ok()?;
        self.release(&frame);
        Some(frame)
    }

    fn release(&self, frame: &Bytes) {
        self.queued_bytes.fetch_sub(frame.len(), Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_bounded_in_bytes_and_taking_a_frame_gives_its_bytes_back() {
        let (sender, mut receiver) = send_queue(100, 10);
        assert_eq!(sender.try_send(Bytes::from_static(b"123456")), Ok(()));
        assert_eq!(
            sender.try_send(Bytes::from_static(b"12345")),
            Err(QueueRefused::Full),
            "11 bytes would pass the bound of 10"
        );
        assert_eq!(sender.try_send(Bytes::from_static(b"1234")), Ok(()));
        assert_eq!(receiver.try_recv().as_deref(), Some(&b"123456"[..]));
        assert_eq!(sender.try_send(Bytes::from_static(b"12345")), Ok(()));
        drop(receiver);
        assert_eq!(
            sender.try_send(Bytes::from_static(b"1")),
            Err(QueueRefused::Closed)
        );
    }

    #[test]
    fn the_queue_is_bounded_in_frames() {
        let (sender, _receiver) = send_queue(2, 1_000);
        assert_eq!(sender.try_send(Bytes::from_static(b"a")), Ok(()));
        assert_eq!(sender.try_send(Bytes::from_static(b"b")), Ok(()));
        assert_eq!(
            sender.try_send(Bytes::from_static(b"c")),
            Err(QueueRefused::Full)
        );
    }
}
