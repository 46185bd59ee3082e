//! When a failed call is tried again, and how long to wait first: [`Retry`], the policy an
//! application sets, and [`should_retry`], the classification every call goes through. A
//! request that was certainly not taken (no connection, or a `503` that says so) may always
//! be sent again; one whose outcome is unknown (the connection broke after it was sent, no
//! answer in time, `504 timeout`) only when sending it twice cannot run it twice (a tell with
//! an idempotency key, a read); a definite refusal never.

use crate::error::Error;
use std::time::Duration;

/// How often and how patiently a call is tried again after a retryable failure, moving to the
/// next node address each time.
///
/// ```
/// use std::time::Duration;
/// use tessera_client::Retry;
/// let patient = Retry { attempts_max: 20, elapsed_max: Duration::from_secs(60), ..Retry::default() };
/// assert_eq!(Retry::never().attempts_max, 1);
/// # let _ = patient;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all, the first included (1: never retry).
    pub attempts_max: u32,
    /// The wait before the first retry; each later wait doubles it, up to `backoff_max`.
    pub backoff_initial: Duration,
    /// The longest wait between two attempts.
    pub backoff_max: Duration,
    /// No retry starts later than this after the call began.
    pub elapsed_max: Duration,
}

impl Default for Retry {
    /// 8 attempts, 50 ms doubling to 2 s between them, within 15 s: rides out a shard's
    /// handoff or a node's restart, not an outage.
    fn default() -> Self {
        Retry {
            attempts_max: 8,
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            elapsed_max: Duration::from_secs(15),
        }
    }
}

impl Retry {
    /// One attempt, no retry.
    ///
    /// ```
    /// use tessera_client::Retry;
    /// assert_eq!(Retry::never().attempts_max, 1);
    /// ```
    pub fn never() -> Retry {
        Retry {
            attempts_max: 1,
            ..Retry::default()
        }
    }

    /// The wait before retry number `retry` (1 for the first): `backoff_initial` doubled per
    /// retry, capped at `backoff_max`, then jittered down by up to half so that many clients
    /// failing together do not come back together.
    pub(crate) fn backoff(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(20);
        let full = self
            .backoff_initial
            .saturating_mul(1 << doublings)
            .min(self.backoff_max);
        let jitter = rand::random::<f64>() * 0.5;
        full.mul_f64(1.0 - jitter)
    }
}

/// Whether sending a request twice could run its message twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// A second copy is harmless: a tell with an idempotency key, a read.
    Safe,
    /// A second copy could run the message again: an ask, a tell without a key.
    Unsafe,
}

/// Whether a call that failed with `error` may be sent again under `repeat`.
pub(crate) fn should_retry(error: &Error, repeat: Repeat) -> bool {
    match error {
        // Nothing was sent.
        Error::Connect { .. } => true,
        // The node says it did not take the message.
        Error::Api(refusal) if refusal.kind().is_transient() => true,
        // Sent, outcome unknown.
        Error::Interrupted { .. } | Error::TimedOut { .. } => repeat == Repeat::Safe,
        Error::Api(refusal) if refusal.kind() == crate::ErrorKind::Timeout => {
            repeat == Repeat::Safe
        }
        // A definite answer (or a local mistake): sending it again fails the same way, or
        // runs it again.
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ApiError;

    fn answer(status: u16, code: &str) -> Error {
        let body = format!(r#"{{"error":{{"code":"{code}","message":"m"}}}}"#);
        Error::Api(ApiError::from_answer(status, body).expect("an error body"))
    }

    fn interrupted() -> Error {
        Error::Interrupted {
            node: "http://n1".into(),
            reason: "reset".into(),
        }
    }

    #[test]
    fn definite_refusals_are_never_retried() {
        let refusals = [
            (400, "bad_message"),
            (400, "malformed_body"),
            (401, "unauthorized"),
            (404, "entity_type_not_registered"),
            (409, "deadlock"),
            (413, "payload_too_large"),
            (422, "rejected"),
            (422, "deadline"),
            (429, "quota_exceeded"),
            (500, "trap"),
            (500, "failed"),
            (500, "internal"),
            (502, "bad_reply"),
            (599, "a_code_from_the_future"),
        ];
        for (status, code) in refusals {
            for repeat in [Repeat::Safe, Repeat::Unsafe] {
                assert!(
                    !should_retry(&answer(status, code), repeat),
                    "{code} under {repeat:?}"
                );
            }
        }
        let decode = serde_json::from_str::<i64>("\"x\"").expect_err("not a number");
        assert!(!should_retry(&Error::Decode(decode), Repeat::Safe));
        let protocol = Error::Protocol {
            node: "http://n1".into(),
            status: 502,
            body: "<html>".into(),
        };
        assert!(!should_retry(&protocol, Repeat::Safe));
    }

    #[test]
    fn requests_not_taken_are_retried() {
        for code in [
            "unavailable",
            "shard_unavailable",
            "mailbox_full",
            "buffer_overflow",
        ] {
            for repeat in [Repeat::Safe, Repeat::Unsafe] {
                assert!(should_retry(&answer(503, code), repeat), "{code}");
            }
        }
        let refused = Error::Connect {
            node: "http://n1".into(),
            reason: "connection refused".into(),
        };
        assert!(should_retry(&refused, Repeat::Unsafe));
    }

    #[test]
    fn unknown_outcomes_are_retried_only_when_a_repeat_is_safe() {
        let timed_out = Error::TimedOut {
            node: "http://n1".into(),
            timeout: Duration::from_secs(1),
        };
        for error in [interrupted(), timed_out, answer(504, "timeout")] {
            assert!(should_retry(&error, Repeat::Safe), "{error}");
            assert!(!should_retry(&error, Repeat::Unsafe), "{error}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_with_jitter() {
        let retry = Retry::default();
        for attempt in 1..30 {
            let full =
                (retry.backoff_initial * 2u32.pow((attempt - 1).min(20))).min(retry.backoff_max);
            let wait = retry.backoff(attempt);
            assert!(wait <= full && wait >= full / 2, "{attempt}: {wait:?}");
        }
    }
}
