//! The client table: per client session, the latest request that committed and its result, so a
//! retried request executes once and is answered with the same reply. It is replicated state,
//! changed only when a committed op is applied, so every replica holds the same table.

use std::collections::HashMap;

use super::config::CLIENT_SESSIONS_MAX;
use super::message::{ClientId, OpNumber};

/// The latest committed request of one client.
#[derive(Clone, Debug, PartialEq, Eq)]
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
}

/// Sessions keyed by client, at most [`CLIENT_SESSIONS_MAX`].
#[derive(Clone, Debug, Default)]
pub struct ClientTable {
    sessions: HashMap<ClientId, Session>,
}

impl ClientTable {
    /// Classifies a request against the table.
    pub fn lookup(&self, client: ClientId, request_number: u64) -> Lookup<'_> {
        match self.sessions.get(&client) {
            None => Lookup::New,
            Some(session) if request_number > session.request_number => Lookup::New,
            Some(session) if request_number == session.request_number => {
                Lookup::Latest(&session.result)
            }
            Some(_) => Lookup::Stale,
        }
    }

    /// Records a committed request, evicting the oldest session if the table is full.
    pub fn record(&mut self, client: ClientId, session: Session) {
        if !self.sessions.contains_key(&client) && self.sessions.len() >= CLIENT_SESSIONS_MAX {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(client, session)| (session.op, **client))
                .map(|(client, _)| *client);
            if let Some(oldest) = oldest {
                self.sessions.remove(&oldest);
            }
        }
        self.sessions.insert(client, session);
        assert!(
            self.sessions.len() <= CLIENT_SESSIONS_MAX,
            "the client table never exceeds CLIENT_SESSIONS_MAX"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_is_answered_from_the_table_and_an_older_request_is_stale() {
        let mut table = ClientTable::default();
        assert_eq!(table.lookup(1, 1), Lookup::New);
        table.record(
            1,
            Session {
                request_number: 1,
                result: vec![42],
                op: 1,
            },
        );
        assert_eq!(table.lookup(1, 1), Lookup::Latest(&[42]));
        assert_eq!(table.lookup(1, 0), Lookup::Stale);
        assert_eq!(table.lookup(1, 2), Lookup::New);
    }

    #[test]
    fn a_full_table_evicts_the_session_that_committed_first() {
        let mut table = ClientTable::default();
        for client in 0..CLIENT_SESSIONS_MAX as u64 {
            table.record(
                client,
                Session {
                    request_number: 1,
                    result: vec![],
                    op: client + 10,
                },
            );
        }
        table.record(
            9999,
            Session {
                request_number: 1,
                result: vec![],
                op: 5000,
            },
        );
        assert_eq!(table.lookup(0, 1), Lookup::New);
        assert!(matches!(table.lookup(1, 1), Lookup::Latest(_)));
    }
}
