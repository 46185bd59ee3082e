//! A connection's activity as its watchdog in the accept loop ([`super::server`]) reads it:
//! where it is between requests ([`Phase`]: reading a request head, busy with requests, idle),
//! updated by the bytes its socket passes ([`Watched`]) and by the requests it hands to the
//! router ([`Activity::request_started`]), and which of the `[api]` timeouts it has passed. The
//! admission table ([`super::admission`]) reads it too: a connection busy with a request is
//! never shed.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The per-connection bounds, from `ApiLimits`.
#[derive(Clone, Copy, Debug)]
pub(super) struct ConnectionTimeouts {
    pub(super) header: Duration,
    pub(super) idle: Duration,
}

/// Which bound a connection passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Expired {
    Header,
    Idle,
}

/// Where a connection is between requests, as its reads, writes and requests show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request head: since the connection opened, or since the first byte
    /// after an idle spell.
    Head { since: Instant },
    /// Requests handed to the router and not answered yet (bodies are bounded there).
    Busy { requests: usize },
    /// Answered; nothing new read since the last answer or write.
    Idle { since: Instant },
}

/// A connection's phase, updated by its reads ([`Watched`]) and requests, read by its watchdog.
#[derive(Debug)]
pub(super) struct Activity {
    phase: Mutex<Phase>,
}

impl Activity {
    pub(super) fn new() -> Activity {
        Activity {
            phase: Mutex::new(Phase::Head {
                since: Instant::now(),
            }),
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        // Every critical section is one assignment: a poisoned lock still holds a valid phase.
        self.phase
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Bytes arrived: after an idle spell they start a request head.
    fn read(&self) {
        let mut phase = self.phase();
        if let Phase::Idle { .. } = *phase {
            *phase = Phase::Head {
                since: Instant::now(),
            };
        }
    }

    /// Bytes of an answer went out: the connection is not idle yet.
    fn wrote(&self) {
        let mut phase = self.phase();
        if let Phase::Idle { .. } = *phase {
            *phase = Phase::Idle {
                since: Instant::now(),
            };
        }
    }

    /// A request head was read and handed to the router; the guard marks its answer.
    pub(super) fn request_started(self: &Arc<Self>) -> RequestDone {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Busy { requests } => Phase::Busy {
                requests: requests + 1,
            },
            _ => Phase::Busy { requests: 1 },
        };
        RequestDone(self.clone())
    }

    fn request_done(&self) {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Busy { requests } if requests > 1 => Phase::Busy {
                requests: requests - 1,
            },
            _ => Phase::Idle {
                since: Instant::now(),
            },
        };
    }

    /// Whether requests are in the router now: a busy connection is never shed.
    pub(super) fn is_busy(&self) -> bool {
        matches!(*self.phase(), Phase::Busy { .. })
    }

    /// When the current phase runs out, if it can.
    pub(super) fn deadline(&self, timeouts: ConnectionTimeouts) -> Option<Instant> {
        match *self.phase() {
            Phase::Head { since } => Some(since + timeouts.header),
            Phase::Idle { since } => Some(since + timeouts.idle),
            Phase::Busy { .. } => None,
        }
    }

    /// The bound the connection has passed at `now`, if any.
    pub(super) fn expired(&self, timeouts: ConnectionTimeouts, now: Instant) -> Option<Expired> {
        match *self.phase() {
            Phase::Head { since } if now >= since + timeouts.header => Some(Expired::Header),
            Phase::Idle { since } if now >= since + timeouts.idle => Some(Expired::Idle),
            _ => None,
        }
    }
}

/// Marks a request answered when dropped (also when hyper drops the request's future).
pub(super) struct RequestDone(Arc<Activity>);

impl Drop for RequestDone {
    fn drop(&mut self) {
        self.0.request_done();
    }
}

/// A connection's socket, telling its [`Activity`] about the bytes that pass.
pub(super) struct Watched {
    pub(super) stream: TcpStream,
    pub(super) activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUTS: ConnectionTimeouts = ConnectionTimeouts {
        header: Duration::from_millis(100),
        idle: Duration::from_millis(1_000),
    };

    #[tokio::test(start_paused = true)]
    async fn a_connection_moves_between_head_busy_and_idle() {
        let activity = Arc::new(Activity::new());
        let opened = Instant::now();
        assert_eq!(activity.deadline(TIMEOUTS), Some(opened + TIMEOUTS.header));
        let request = activity.request_started();
        assert_eq!(activity.deadline(TIMEOUTS), None);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(activity.expired(TIMEOUTS, Instant::now()), None);
        drop(request);
        let answered = Instant::now();
        assert_eq!(activity.deadline(TIMEOUTS), Some(answered + TIMEOUTS.idle));
        tokio::time::advance(Duration::from_millis(500)).await;
        activity.read();
        let head = Instant::now();
        assert_eq!(activity.deadline(TIMEOUTS), Some(head + TIMEOUTS.header));
        tokio::time::advance(TIMEOUTS.header).await;
        assert_eq!(
            activity.expired(TIMEOUTS, Instant::now()),
            Some(Expired::Header)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_expires_unless_it_writes() {
        let activity = Arc::new(Activity::new());
        drop(activity.request_started());
        tokio::time::advance(Duration::from_millis(900)).await;
        activity.wrote();
        tokio::time::advance(Duration::from_millis(900)).await;
        assert_eq!(activity.expired(TIMEOUTS, Instant::now()), None);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(
            activity.expired(TIMEOUTS, Instant::now()),
            Some(Expired::Idle)
        );
    }
}
