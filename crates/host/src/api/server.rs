//! The API's accept loop: hyper's HTTP/1 connection serving the axum [`Router`], with every
//! bound a hostile client could otherwise stretch (`[api]` in the node config, listed in
//! `docs/api.md`). Each accepted connection passes the admission rules of `admission`
//! — at most `connections_per_address_max` per client address, the oldest idle or
//! unauthenticated connection shed to make room near `connections_max`, a few places kept for
//! admin requests —; one refused is told `503` in one non-blocking write and closed, so a
//! client learns at once instead of hanging in the listen backlog. Each connection has a
//! watchdog over its `Activity`: a request head must arrive
//! within `header_read_timeout_ms` (from the connection's start, or from the first byte of a
//! later request), and a keep-alive connection idle between requests for `idle_timeout_ms` is
//! closed. hyper's own `header_read_timeout` is not used because its timer also runs while a
//! keep-alive connection waits for its next request, which would make the idle bound the
//! header bound. Bodies are bounded by the edge middleware ([`super::body::read_limited`]). On
//! shutdown the loop stops accepting, lets requests in flight finish for up to
//! `drain_timeout_ms`, then cuts what is left. The loop also writes the counts of repeated
//! request failures (`failure_log`) once their window has closed.

use super::activity::{ConnectionTimeouts, Expired, Watched};
use super::admission::{Admission, AdmissionLimits, ConnectionRef, OpenConnection, Place, Refusal};
use super::failure_log;
use crate::node::{EdgeCounters, Node};
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::Service as _;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Most bytes hyper buffers from one connection: bounds a request head (and each read of a
/// body), so all connections together buffer at most `connections_max` times this.
pub const CONNECTION_BUFFER_BYTES_MAX: usize = 64 * 1024;

/// Pause after an accept error that is not one connection's own (out of file descriptors,
/// say), so the loop does not spin while the error lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The whole answer to a connection refused at accept, written once without waiting: a `503`
/// whose body carries `message` in `length` bytes (a macro so `concat!` can build it; a unit
/// test checks the length).
macro_rules! refusal {
    ($length:literal, $message:literal) => {
        concat!(
            "HTTP/1.1 503 Service Unavailable\r\n",
            "content-type: application/json\r\n",
            "retry-after: 1\r\n",
            "connection: close\r\n",
            "content-length: ",
            $length,
            "\r\n\r\n",
            r#"{"error":{"code":"unavailable","message":""#,
            $message,
            r#""}}"#,
        )
    };
}

/// The answer when `connections_max` are open and none can be shed.
const NODE_FULL: &str = refusal!("96", "the node has too many open connections; retry later");

/// The answer when the client's address holds `connections_per_address_max` connections.
const ADDRESS_FULL: &str = refusal!(
    "107",
    "this client address has too many open connections; retry later"
);

/// Serves `router` on `listener` under `node`'s `[api]` limits until `shutdown` completes,
/// then drains; see the module doc.
pub(super) async fn serve(
    node: Arc<Node>,
    router: Router,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let limits = &node.config().api;
    let admission = Admission::new(AdmissionLimits::from(limits));
    let timeouts = ConnectionTimeouts {
        header: Duration::from_millis(limits.header_read_timeout_ms),
        idle: Duration::from_millis(limits.idle_timeout_ms),
    };
    let drain = Duration::from_millis(limits.drain_timeout_ms);
    let (stop, stopping) = watch::channel(false);
    let service = TowerToHyperService::new(router);
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    let mut summaries = tokio::time::interval(failure_log::REPEATED_FAILURE_WINDOW);
    summaries.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            // Reap finished connections so the set stays within the cap.
            Some(joined) = connections.join_next(), if !connections.is_empty() => {
                if let Err(error) = joined {
                    tracing::error!(%error, "a connection task failed");
                }
            }
            // The counts of repeated request failures, once their window has closed.
            _ = summaries.tick() => failure_log::write_summaries(),
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match admission.admit(peer.ip()) {
                    Ok(admitted) => {
                        // Answers go out when written, not after the client's next ACK.
                        let _ = stream.set_nodelay(true);
                        let counters = node.edge_counters();
                        EdgeCounters::bump(&counters.connections);
                        if admitted.shed_another {
                            EdgeCounters::bump(&counters.connections_shed);
                        }
                        let connection = Connection {
                            node: node.clone(),
                            service: service.clone(),
                            timeouts,
                            stopping: stopping.clone(),
                            open: admitted.connection,
                            _place: admitted.place,
                        };
                        connections.spawn(connection.run(stream));
                    }
                    Err(refusal) => {
                        let counters = node.edge_counters();
                        EdgeCounters::bump(match refusal {
                            Refusal::Full => &counters.connections_refused,
                            Refusal::PerAddress => &counters.connections_refused_per_address,
                        });
                        refuse(stream, refusal);
                    }
                },
                Err(error) => accept_failed(error).await,
            },
        }
    }
    drop(listener);
    // Every connection sees the flag (or the dropped sender) and shuts down gracefully.
    drop(stop);
    let drained = tokio::time::timeout(drain, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = connections.len(),
            "requests still in flight after the drain timeout; closing their connections"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// Tells a connection past a cap why, if its socket takes the answer at once, and closes it.
fn refuse(stream: TcpStream, refusal: Refusal) {
    tracing::debug!(?refusal, "connection refused");
    let answer = match refusal {
        Refusal::Full => NODE_FULL,
        Refusal::PerAddress => ADDRESS_FULL,
    };
    // One non-blocking write: a client that does not read cannot hold the accept loop.
    let _ = stream.try_write(answer.as_bytes());
}

/// An accept error that belongs to one connection (reset before it was accepted) is skipped;
/// any other (out of file descriptors) pauses the loop a moment.
async fn accept_failed(error: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted
    ) {
        return;
    }
    tracing::warn!(%error, "accepting a connection failed");
    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
}

/// One accepted connection and what it needs to serve it; holds its place until it ends.
struct Connection {
    node: Arc<Node>,
    service: TowerToHyperService<Router>,
    timeouts: ConnectionTimeouts,
    stopping: watch::Receiver<bool>,
    open: Arc<OpenConnection>,
    _place: Place,
}

impl Connection {
    /// Serves requests until the client or hyper closes the connection, a timeout cuts it, it
    /// is shed, or shutdown ends it after its request in flight.
    async fn run(mut self, stream: TcpStream) {
        let activity = self.open.activity().clone();
        let io = TokioIo::new(Watched {
            stream,
            activity: activity.clone(),
        });
        let service = {
            let activity = activity.clone();
            let open = ConnectionRef(self.open.clone());
            let service = self.service.clone();
            hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
                request.extensions_mut().insert(open.clone());
                let request_done = activity.request_started();
                let response = service.call(request);
                async move {
                    let response = response.await;
                    drop(request_done);
                    response
                }
            })
        };
        let mut builder = http1::Builder::new();
        builder
            .max_buf_size(CONNECTION_BUFFER_BYTES_MAX)
            .header_read_timeout(None::<Duration>);
        let mut connection = pin!(builder.serve_connection(io, service));
        // Every change of the activity happens inside a poll of `connection` (its reads, writes
        // and requests), so the watchdog re-reads the deadline after each poll instead of being
        // woken: a request costs no extra wake-up of this task, and the timer is reset only
        // when the deadline moves.
        let mut armed = activity.deadline(self.timeouts);
        let mut expiry = pin!(tokio::time::sleep_until(
            armed.unwrap_or_else(|| Instant::now() + self.timeouts.idle)
        ));
        let mut stop = pin!(self.stopping.changed());
        let mut shutting_down = false;
        let open = self.open.clone();
        let mut shed = pin!(open.shed());
        let mut shed_told = false;
        loop {
            let event = std::future::poll_fn(|context| {
                if let Poll::Ready(served) = connection.as_mut().poll(context) {
                    return Poll::Ready(Event::Served(served));
                }
                let deadline = activity.deadline(self.timeouts);
                if deadline != armed {
                    if let Some(deadline) = deadline {
                        expiry.as_mut().reset(deadline);
                    }
                    armed = deadline;
                }
                if armed.is_some() && expiry.as_mut().poll(context).is_ready() {
                    return Poll::Ready(Event::Expiry);
                }
                if !shutting_down && stop.as_mut().poll(context).is_ready() {
                    return Poll::Ready(Event::Stopping);
                }
                if !shed_told && shed.as_mut().poll(context).is_ready() {
                    return Poll::Ready(Event::Shed);
                }
                Poll::Pending
            })
            .await;
            match event {
                Event::Served(served) => {
                    if let Err(error) = served {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                    return;
                }
                Event::Expiry => match activity.expired(self.timeouts, Instant::now()) {
                    Some(Expired::Header) => {
                        EdgeCounters::bump(&self.node.edge_counters().header_timeouts);
                        tracing::debug!("connection closed: no request head in time");
                        return;
                    }
                    Some(Expired::Idle) => {
                        tracing::debug!("connection closed: idle");
                        return;
                    }
                    // Polled ready at a deadline that has moved since: arm the new one.
                    None => armed = None,
                },
                Event::Stopping => {
                    shutting_down = true;
                    // Closes an idle connection now, a busy one after its answer.
                    connection.as_mut().graceful_shutdown();
                }
                // Checked not busy when it was shed, but a request may have started since:
                // that one is answered first.
                Event::Shed if activity.is_busy() => {
                    shed_told = true;
                    connection.as_mut().graceful_shutdown();
                }
                Event::Shed => {
                    // Dropped rather than shut down gracefully: hyper would wait for a request
                    // head a client has only begun to send.
                    tracing::debug!("connection shed to make room for another");
                    return;
                }
            }
        }
    }
}

/// What woke a connection's loop.
enum Event {
    /// hyper is done with the connection.
    Served(hyper::Result<()>),
    /// The armed deadline passed.
    Expiry,
    /// The node is shutting down (or its shutdown signal was dropped).
    Stopping,
    /// The connection was shed to make room for another (`admission`).
    Shed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_is_one_well_formed_answer() {
        for refusal in [NODE_FULL, ADDRESS_FULL] {
            let (head, body) = refusal.split_once("\r\n\r\n").unwrap();
            let length = format!("content-length: {}", body.len());
            assert!(head.lines().any(|line| line == length), "{head}");
            let json: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(json["error"]["code"], "unavailable");
            assert!(json["error"]["message"].as_str().unwrap().contains("retry"));
        }
    }
}
