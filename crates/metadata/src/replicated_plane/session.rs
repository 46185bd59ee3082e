//! This node's client session with the metadata plane, shared by a voter's and a non-voting
//! member's driver: one command in flight (a VSR client session has one outstanding request),
//! sent to every voter and again after [`RESEND_TICKS`] until the primary answers, and
//! answered to the caller once this node's own catalog has applied it too (or after
//! [`APPLIED_HERE_WAIT_TICKS`], if this node is catching up by a checkpoint).

use super::{PlaneMessage, PlaneOutbox};
use crate::{Applied, CatalogMachine, Command, MetadataError};
use tessera_consensus::message::{ClientId, Reply, ReplyError, Request};
use tokio::sync::oneshot;

/// Ticks before an unanswered command is sent to the voters again (a view change may have
/// moved the primary).
pub(super) const RESEND_TICKS: u64 = 20;

/// Ticks a command answered by the primary waits for this node's own catalog to apply it
/// before it is answered anyway (this node is catching up by state transfer).
pub(super) const APPLIED_HERE_WAIT_TICKS: u64 = 100;

/// A command submitted on this node and where its answer goes.
pub(super) struct Submission {
    pub(super) command: Command,
    pub(super) answer: oneshot::Sender<Result<Applied, MetadataError>>,
}

struct InFlight {
    request: Request,
    answer: oneshot::Sender<Result<Applied, MetadataError>>,
    sent_tick: u64,
    /// The primary's answer, once it came, and the tick it came at.
    reply: Option<(Result<Vec<u8>, ReplyError>, u64)>,
    applied_here: bool,
}

/// What the driver does next for the command in flight.
pub(super) enum Due {
    /// Nothing.
    Wait,
    /// Send the request again.
    Resend(Request),
}

/// One node's client session.
pub(super) struct ClientSession {
    node: String,
    /// New each start, so request numbers start at 1 again.
    client: ClientId,
    next_request: u64,
    in_flight: Option<InFlight>,
}

impl ClientSession {
    pub(super) fn new(node: String) -> ClientSession {
        ClientSession {
            node,
            client: rand::random::<u64>(),
            next_request: 1,
            in_flight: None,
        }
    }

    pub(super) fn client(&self) -> ClientId {
        self.client
    }

    pub(super) fn is_idle(&self) -> bool {
        self.in_flight.is_none()
    }

    /// Takes `submission` as the command in flight and returns its request, to be sent.
    pub(super) fn begin(&mut self, submission: Submission, tick: u64) -> Request {
        let request = Request {
            client: self.client,
            request_number: self.next_request,
            operation: CatalogMachine::encode_command(&submission.command),
        };
        self.next_request += 1;
        self.in_flight = Some(InFlight {
            request: request.clone(),
            answer: submission.answer,
            sent_tick: tick,
            reply: None,
            applied_here: false,
        });
        request
    }

    /// Sends `request` to every voter but this node.
    pub(super) fn send_to_voters(
        &self,
        outbox: &dyn PlaneOutbox,
        voters: &[String],
        request: &Request,
    ) {
        for voter in voters {
            if *voter != self.node {
                let submit = PlaneMessage::Submit {
                    origin: self.node.clone(),
                    request: request.clone(),
                };
                outbox.send(voter, submit);
            }
        }
    }

    /// Whether the command in flight is due to be sent again (or answered anyway, having
    /// waited long enough for this node to apply it).
    pub(super) fn due(&mut self, tick: u64) -> Due {
        let Some(in_flight) = &mut self.in_flight else {
            return Due::Wait;
        };
        if let Some((_, replied_tick)) = &in_flight.reply {
            if tick >= replied_tick + APPLIED_HERE_WAIT_TICKS {
                self.answer();
            }
            return Due::Wait;
        }
        if tick >= in_flight.sent_tick + RESEND_TICKS {
            in_flight.sent_tick = tick;
            return Due::Resend(in_flight.request.clone());
        }
        Due::Wait
    }

    /// Notes the requests this node's catalog just applied.
    pub(super) fn applied(&mut self, requests: &[(ClientId, u64)]) {
        if let Some(in_flight) = &mut self.in_flight {
            let mine = (in_flight.request.client, in_flight.request.request_number);
            if requests.contains(&mine) {
                in_flight.applied_here = true;
            }
        }
        self.answer_if_done();
    }

    /// Takes the primary's reply, if it is for the command in flight.
    pub(super) fn on_reply(&mut self, reply: Reply, tick: u64) {
        let Some(in_flight) = &mut self.in_flight else {
            return;
        };
        let mine = reply.client == in_flight.request.client
            && reply.request_number == in_flight.request.request_number;
        if mine && in_flight.reply.is_none() {
            in_flight.reply = Some((reply.result, tick));
        }
        self.answer_if_done();
    }

    fn answer_if_done(&mut self) {
        let done = self
            .in_flight
            .as_ref()
            .is_some_and(|in_flight| in_flight.reply.is_some() && in_flight.applied_here);
        if done {
            self.answer();
        }
    }

    /// Answers the command in flight with the primary's reply.
    fn answer(&mut self) {
        let Some(in_flight) = self.in_flight.take() else {
            return;
        };
        let result = match in_flight.reply {
            Some((Ok(bytes), _)) => CatalogMachine::decode_result(&bytes),
            Some((Err(ReplyError::SessionEvicted), _)) => Err(MetadataError::Unavailable(
                "this node's catalog session was evicted; the command may or may not have \
                 applied: read the catalog before retrying"
                    .into(),
            )),
            Some((Err(error), _)) => Err(MetadataError::Unavailable(format!(
                "the primary did not execute the command: {error}"
            ))),
            None => Err(MetadataError::Unavailable(
                "no answer from the primary".into(),
            )),
        };
        let _ = in_flight.answer.send(result);
    }
}
