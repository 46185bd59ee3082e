//! The client table: per client session, the latest request that committed and its result, so a
//! retried request executes once and is answered with the same reply. It is replicated state,
//! changed only when a committed op is applied, so every replica holds the same table; it
//! travels inside every checkpoint (see `checkpoint.rs`) so at-most-once execution survives
//! state transfer and restarts.
//!
//! The table is bounded: when full it evicts the session whose request committed earliest and
//! remembers the evicted client (boundedly too), so a later request from it is answered
//! [`Lookup::Evicted`] rather than executed as if it were new.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::config::{CLIENT_SESSIONS_MAX, EVICTED_CLIENTS_MAX};
use super::message::{ClientId, OpNumber};

/// The latest committed request of one client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The request number that committed.
    pub request_number: u64,
    /// Its result.
    pub result: Vec<u8>,
    /// The op it committed at (the eviction order).
    pub op: OpNumber,
}

/// What the table says about a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// Newer than anything committed for the client: execute it.
    New,
    /// The latest committed request again: answer with its stored result.
    Latest(&'a [u8]),
    /// Older than the latest committed request: drop it.
    Stale,
    /// The client's session was evicted (or a request other than a session's first comes from
    /// a client without one): answer that, never execute.
    Evicted,
}

/// Sessions keyed by client, at most [`CLIENT_SESSIONS_MAX`], and the clients evicted most
/// recently, at most [`EVICTED_CLIENTS_MAX`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTable {
    sessions: HashMap<ClientId, Session>,
    /// Evicted client to the op that evicted it.
    evicted: HashMap<ClientId, OpNumber>,
}

/// The table as it travels in a checkpoint: sorted, so equal tables encode to equal bytes.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ClientTableImage {
    sessions: BTreeMap<ClientId, Session>,
    evicted: BTreeMap<ClientId, OpNumber>,
}

impl ClientTable {
    /// Classifies a request against the table. A session's first request is number 1; a
    /// client without a session asking anything later must have lost its session.
    pub fn lookup(&self, client: ClientId, request_number: u64) -> Lookup<'_> {
        match self.sessions.get(&client) {
            None if self.evicted.contains_key(&client) || request_number > 1 => Lookup::Evicted,
            None => Lookup::New,
            Some(session) if request_number > session.request_number => Lookup::New,
            Some(session) if request_number == session.request_number => {
                Lookup::Latest(&session.result)
            }
            Some(_) => Lookup::Stale,
        }
    }

    /// Every session, in no particular order.
    pub fn sessions(&self) -> impl Iterator<Item = (ClientId, &Session)> {
        self.sessions
            .iter()
            .map(|(client, session)| (*client, session))
    }

    /// Whether the client's session is known to have been evicted. Unlike
    /// [`Lookup::Evicted`] for a request above 1 without a session, this holds even for a
    /// primary whose table lags the log (the request before may be committed, not applied).
    pub fn was_evicted(&self, client: ClientId) -> bool {
        self.evicted.contains_key(&client)
    }

    /// Records a committed request, evicting the oldest session if the table is full.
    pub fn record(&mut self, client: ClientId, session: Session) {
        if !self.sessions.contains_key(&client) && self.sessions.len() >= CLIENT_SESSIONS_MAX {
            let oldest = oldest_by_op(self.sessions.iter().map(|(id, kept)| (id, &kept.op)));
            if let Some(oldest) = oldest {
                self.sessions.remove(&oldest);
                self.remember_evicted(oldest, session.op);
            }
        }
        self.sessions.insert(client, session);
        assert!(
            self.sessions.len() <= CLIENT_SESSIONS_MAX,
            "the client table never exceeds CLIENT_SESSIONS_MAX"
        );
    }

    fn remember_evicted(&mut self, client: ClientId, op: OpNumber) {
        if self.evicted.len() >= EVICTED_CLIENTS_MAX
            && let Some(oldest) = oldest_by_op(self.evicted.iter())
        {
            self.evicted.remove(&oldest);
        }
        self.evicted.insert(client, op);
    }

    /// The table in its deterministic, encodable form.
    pub(super) fn image(&self) -> ClientTableImage {
        ClientTableImage {
            sessions: self
                .sessions
                .iter()
                .map(|(client, session)| (*client, session.clone()))
                .collect(),
            evicted: self
                .evicted
                .iter()
                .map(|(client, op)| (*client, *op))
                .collect(),
        }
    }

    /// Rebuilds a table from an image; `None` if the image breaks the table's bounds.
    pub(super) fn from_image(image: ClientTableImage) -> Option<ClientTable> {
        if image.sessions.len() > CLIENT_SESSIONS_MAX || image.evicted.len() > EVICTED_CLIENTS_MAX {
            return None;
        }
        Some(ClientTable {
            sessions: image.sessions.into_iter().collect(),
            evicted: image.evicted.into_iter().collect(),
        })
    }
}

/// The client whose op is lowest (ties broken by client id, so every replica picks the same).
fn oldest_by_op<'a>(
    clients: impl Iterator<Item = (&'a ClientId, &'a OpNumber)>,
) -> Option<ClientId> {
    clients
        .min_by_key(|(client, op)| (**op, **client))
        .map(|(client, _)| *client)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(request_number: u64, op: OpNumber) -> Session {
        Session {
            request_number,
            result: vec![42],
            op,
        }
    }

    #[test]
    fn a_retry_is_answered_from_the_table_and_an_older_request_is_stale() {
        let mut table = ClientTable::default();
        assert_eq!(table.lookup(1, 1), Lookup::New);
        table.record(1, session(1, 1));
        assert_eq!(table.lookup(1, 1), Lookup::Latest(&[42]));
        assert_eq!(table.lookup(1, 0), Lookup::Stale);
        assert_eq!(table.lookup(1, 2), Lookup::New);
    }

    #[test]
    fn a_full_table_evicts_the_session_that_committed_first_and_says_so() {
        let mut table = ClientTable::default();
        for client in 0..CLIENT_SESSIONS_MAX as u64 {
            table.record(client, session(1, client + 10));
        }
        table.record(9999, session(1, 5000));
        assert_eq!(table.lookup(0, 1), Lookup::Evicted, "a retry of request 1");
        assert_eq!(table.lookup(0, 2), Lookup::Evicted, "a new request");
        assert!(matches!(table.lookup(1, 1), Lookup::Latest(_)));
        assert_eq!(
            table.lookup(5000, 1),
            Lookup::New,
            "an unknown client opens a session"
        );
        assert_eq!(
            table.lookup(5000, 3),
            Lookup::Evicted,
            "no session, not its first request"
        );
    }

    #[test]
    fn an_image_rebuilds_the_same_table() {
        let mut table = ClientTable::default();
        table.record(3, session(4, 9));
        table.record(1, session(2, 7));
        let encoded = rmp_serde::to_vec(&table.image()).expect("images encode");
        let decoded = rmp_serde::from_slice(&encoded).expect("images decode");
        assert_eq!(ClientTable::from_image(decoded), Some(table));
    }
}
