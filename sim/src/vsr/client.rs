//! Simulated clients and the history they record. A client has at most one request
//! outstanding (as VSR assumes), sends it to the primary it believes in, and after a timeout
//! resends it to every replica with the same request number. Every invocation and completion
//! is recorded in a [`History`] for the workload's check. What a request carries and what a
//! reply means is the [`Workload`]'s business.

use super::history::{History, Operation};
use super::workload::Workload;
use crate::rng::SimRng;
use tessera_consensus::message::{ClientId, Message, ReplicaIndex, Reply, Request};

/// Ticks a client waits for a reply before resending to every replica.
pub const CLIENT_RETRY_TICKS: u64 = 40;

#[derive(Debug)]
struct Outstanding {
    request: Request,
    sent_tick: u64,
    history_index: usize,
}

/// One simulated client.
#[derive(Debug)]
pub struct Client {
    id: ClientId,
    request_number: u64,
    outstanding: Option<Outstanding>,
    view_guess: u64,
    replica_count: u8,
    requests_left: u64,
    issue_per_mille: u64,
}

impl Client {
    /// A client that will issue up to `requests_max` requests, each tick it is idle with
    /// probability `issue_per_mille / 1000`.
    pub fn new(id: ClientId, replica_count: u8, requests_max: u64, issue_per_mille: u64) -> Client {
        Client {
            id,
            request_number: 0,
            outstanding: None,
            view_guess: 0,
            replica_count,
            requests_left: requests_max,
            issue_per_mille,
        }
    }

    /// This client's id.
    pub fn id(&self) -> ClientId {
        self.id
    }

    /// Whether a request awaits its reply.
    pub fn is_waiting(&self) -> bool {
        self.outstanding.is_some()
    }

    /// Issues a new request of `workload` (when `may_issue`) or resends a timed-out one;
    /// returns what to send.
    pub fn tick<W: Workload>(
        &mut self,
        workload: &W,
        rng: &mut SimRng,
        now_tick: u64,
        may_issue: bool,
        history: &mut History<W::Operation, W::Answer>,
    ) -> Vec<(ReplicaIndex, Message)> {
        if let Some(outstanding) = self.outstanding.as_mut() {
            if now_tick < outstanding.sent_tick + CLIENT_RETRY_TICKS {
                return Vec::new();
            }
            outstanding.sent_tick = now_tick;
            let message = Message::Request(outstanding.request.clone());
            return (0..self.replica_count)
                .map(|replica| (replica, message.clone()))
                .collect();
        }
        if !may_issue || self.requests_left == 0 || !rng.per_mille(self.issue_per_mille) {
            return Vec::new();
        }
        self.requests_left -= 1;
        self.request_number += 1;
        let operation = workload.next_operation(rng, self.id, self.request_number);
        let request = Request {
            client: self.id,
            request_number: self.request_number,
            operation: workload.encode(&operation),
        };
        let invoked = history.next_event();
        history.operations.push(Operation {
            client: self.id,
            request_number: self.request_number,
            operation,
            invoked,
            completed: None,
        });
        let primary = (self.view_guess % u64::from(self.replica_count)) as ReplicaIndex;
        let message = Message::Request(request.clone());
        let history_index = history.operations.len() - 1;
        self.outstanding = Some(Outstanding {
            request,
            sent_tick: now_tick,
            history_index,
        });
        vec![(primary, message)]
    }

    /// Takes a reply; returns the acknowledged request number if it completed the outstanding
    /// request (duplicates and stale replies return `None`).
    pub fn on_reply<W: Workload>(
        &mut self,
        workload: &W,
        reply: &Reply,
        history: &mut History<W::Operation, W::Answer>,
    ) -> Result<Option<u64>, String> {
        self.view_guess = self.view_guess.max(reply.view);
        let Some(outstanding) = self.outstanding.as_ref() else {
            return Ok(None);
        };
        if reply.request_number != outstanding.request.request_number {
            return Ok(None);
        }
        let Ok(result) = &reply.result else {
            return Err(format!("client {} was told {:?}", self.id, reply.result));
        };
        let answer = workload
            .decode_answer(result)
            .map_err(|error| format!("client {} got a bad answer: {error}", self.id))?;
        let completed = history.next_event();
        history.operations[outstanding.history_index].completed = Some((completed, answer));
        self.outstanding = None;
        Ok(Some(reply.request_number))
    }
}
