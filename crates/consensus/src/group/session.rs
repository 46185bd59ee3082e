//! This node's client sessions with a group, shared by a voter's and a non-voting member's
//! driver. A VSR client session has one outstanding request, so a node that wants several
//! operations in flight at once (a partition's primary, committing many entities' writes)
//! opens several sessions ([`ClientSessions`], `GroupConfig::sessions` of them; the metadata
//! plane uses one). Sessions count time in [`SESSION_TICK`]s of real time, whatever the
//! group's own tick. Each operation in flight is sent to every voter and again after
//! [`RESEND_TICKS`], then twice, four and eight times as long, until the primary answers (a
//! large operation that takes long to commit is not sent again and again while it does), and
//! answered to the caller once this node's own
//! state machine has applied it too (or after [`APPLIED_HERE_WAIT_TICKS`], if this node is
//! catching up by a checkpoint).

use super::frame::{GroupFrame, GroupId, GroupMessage};
use super::{GroupOutbox, SubmitError};
use crate::message::{ClientId, Reply, ReplyError, Request};
use std::time::Duration;
use tokio::sync::oneshot;

/// The unit the session timers below count in: a group driver ticking every `tick` advances
/// its sessions' clock by `tick / SESSION_TICK` of them per tick.
pub const SESSION_TICK: Duration = Duration::from_millis(10);

/// How many [`SESSION_TICK`]s one tick of `tick` is (at least one).
pub(super) fn session_ticks_per_tick(tick: Duration) -> u64 {
    let ratio = tick.as_nanos() / SESSION_TICK.as_nanos();
    u64::try_from(ratio).unwrap_or(u64::MAX).max(1)
}

/// Ticks before an unanswered operation is sent to the voters again (a view change may have
/// moved the primary).
pub(super) const RESEND_TICKS: u64 = 20;

/// How often the wait before a resend doubles: at most `RESEND_TICKS << 3` (1.6 s) between
/// two sends of one operation.
const RESEND_DOUBLINGS_MAX: u32 = 3;

/// Ticks an operation answered by the primary waits for this node's own state machine to
/// apply it before it is answered anyway (this node is catching up by state transfer).
pub(super) const APPLIED_HERE_WAIT_TICKS: u64 = 100;

/// What an operation submitted on this node is answered with: the state machine's result
/// bytes, or why there is none.
pub(super) type Answer = Result<Vec<u8>, SubmitError>;

/// An operation submitted on this node and where its answer goes.
pub(super) struct Submission {
    pub(super) operation: Vec<u8>,
    pub(super) answer: oneshot::Sender<Answer>,
}

struct InFlight {
    request: Request,
    answer: oneshot::Sender<Answer>,
    sent_tick: u64,
    /// Times it was sent again.
    resends: u32,
    /// The primary's answer, once it came, and the tick it came at.
    reply: Option<(Result<Vec<u8>, ReplyError>, u64)>,
    applied_here: bool,
}

/// What the driver does next for the operation in flight.
enum Due {
    /// Nothing.
    Wait,
    /// Send the request again.
    Resend(Request),
}

/// The most client sessions one node keeps with one group: the operations it may have in
/// flight at once. Bounds what the node holds and what it adds to the group's client table.
pub const SESSIONS_PER_NODE_MAX: usize = 64;

/// One node's client sessions with one group: as many operations in flight as sessions.
pub(super) struct ClientSessions {
    sessions: Vec<ClientSession>,
}

impl ClientSessions {
    /// `count` sessions (at least one, at most [`SESSIONS_PER_NODE_MAX`]).
    pub(super) fn new(group: GroupId, node: &str, count: usize) -> ClientSessions {
        let count = count.clamp(1, SESSIONS_PER_NODE_MAX);
        ClientSessions {
            sessions: (0..count)
                .map(|_| ClientSession::new(group, node.to_string()))
                .collect(),
        }
    }

    /// Whether a session has no operation in flight.
    pub(super) fn has_idle(&self) -> bool {
        self.sessions.iter().any(ClientSession::is_idle)
    }

    /// Whether `client` is one of this node's sessions.
    pub(super) fn owns(&self, client: ClientId) -> bool {
        self.sessions
            .iter()
            .any(|session| session.client() == client)
    }

    /// Takes `submission` on an idle session and returns its request, to be sent; `None` if
    /// every session is busy (the caller waits for one to be idle first).
    pub(super) fn begin(&mut self, submission: Submission, tick: u64) -> Option<Request> {
        let session = self.sessions.iter_mut().find(|session| session.is_idle())?;
        Some(session.begin(submission, tick))
    }

    /// Sends `request` to every voter but this node.
    pub(super) fn send_to_voters(
        &self,
        outbox: &dyn GroupOutbox,
        voters: &[String],
        request: &Request,
    ) {
        if let Some(session) = self.sessions.first() {
            session.send_to_voters(outbox, voters, request);
        }
    }

    /// The requests due to be sent again.
    pub(super) fn due(&mut self, tick: u64) -> Vec<Request> {
        self.sessions
            .iter_mut()
            .filter_map(|session| match session.due(tick) {
                Due::Resend(request) => Some(request),
                Due::Wait => None,
            })
            .collect()
    }

    /// Notes the requests this node's state machine just applied.
    pub(super) fn applied(&mut self, requests: &[(ClientId, u64)]) {
        for session in &mut self.sessions {
            session.applied(requests);
        }
    }

    /// Takes the primary's reply, for whichever session it answers.
    pub(super) fn on_reply(&mut self, reply: Reply, tick: u64) {
        if let Some(session) = self
            .sessions
            .iter_mut()
            .find(|session| session.client() == reply.client)
        {
            session.on_reply(reply, tick);
        }
    }
}

/// One client session with one group: one operation in flight.
struct ClientSession {
    group: GroupId,
    node: String,
    /// New each start, so request numbers start at 1 again.
    client: ClientId,
    next_request: u64,
    in_flight: Option<InFlight>,
}

impl ClientSession {
    pub(super) fn new(group: GroupId, node: String) -> ClientSession {
        ClientSession {
            group,
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

    /// Takes `submission` as the operation in flight and returns its request, to be sent.
    pub(super) fn begin(&mut self, submission: Submission, tick: u64) -> Request {
        let request = Request {
            client: self.client,
            request_number: self.next_request,
            operation: submission.operation,
        };
        self.next_request += 1;
        self.in_flight = Some(InFlight {
            request: request.clone(),
            answer: submission.answer,
            sent_tick: tick,
            resends: 0,
            reply: None,
            applied_here: false,
        });
        request
    }

    /// Sends `request` to every voter but this node.
    pub(super) fn send_to_voters(
        &self,
        outbox: &dyn GroupOutbox,
        voters: &[String],
        request: &Request,
    ) {
        for voter in voters {
            if *voter != self.node {
                let submit = GroupMessage::Submit {
                    origin: self.node.clone(),
                    request: request.clone(),
                };
                outbox.send(
                    voter,
                    GroupFrame {
                        group: self.group,
                        message: submit,
                    },
                );
            }
        }
    }

    /// Whether the operation in flight is due to be sent again (or answered anyway, having
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
        let wait = RESEND_TICKS << in_flight.resends.min(RESEND_DOUBLINGS_MAX);
        if tick >= in_flight.sent_tick + wait {
            in_flight.sent_tick = tick;
            in_flight.resends += 1;
            return Due::Resend(in_flight.request.clone());
        }
        Due::Wait
    }

    /// Notes the requests this node's state machine just applied.
    pub(super) fn applied(&mut self, requests: &[(ClientId, u64)]) {
        if let Some(in_flight) = &mut self.in_flight {
            let mine = (in_flight.request.client, in_flight.request.request_number);
            if requests.contains(&mine) {
                in_flight.applied_here = true;
            }
        }
        self.answer_if_done();
    }

    /// Takes the primary's reply, if it is for the operation in flight.
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

    /// Answers the operation in flight with the primary's reply.
    fn answer(&mut self) {
        let Some(in_flight) = self.in_flight.take() else {
            return;
        };
        let answer = match in_flight.reply {
            Some((Ok(bytes), _)) => Ok(bytes),
            Some((Err(error @ ReplyError::SessionEvicted), _)) => {
                Err(SubmitError::SessionEvicted(error))
            }
            None => Err(SubmitError::NoAnswer),
        };
        let _ = in_flight.answer.send(answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An unanswered operation is sent again after `RESEND_TICKS`, then after twice, four
    /// and eight times as long, and no longer apart than that.
    #[test]
    fn an_unanswered_operation_is_sent_again_less_and_less_often() {
        let mut sessions = ClientSessions::new(GroupId(1), "n1", 1);
        let (answer, _answered) = oneshot::channel();
        let submission = Submission {
            operation: vec![1; 16],
            answer,
        };
        assert!(sessions.begin(submission, 0).is_some());
        let resent: Vec<u64> = (1..2_000)
            .filter(|&tick| !sessions.due(tick).is_empty())
            .collect();
        assert_eq!(
            &resent[..5],
            &[20, 60, 140, 300, 460],
            "resent at {resent:?}"
        );
        let longest = RESEND_TICKS << RESEND_DOUBLINGS_MAX;
        assert!(resent.windows(2).all(|pair| pair[1] - pair[0] <= longest));
    }
}
