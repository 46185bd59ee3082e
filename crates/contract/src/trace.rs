//! W3C trace context (<https://www.w3.org/TR/trace-context/>): which trace a message belongs
//! to and which span caused it. A client's `traceparent` header starts it; every message an
//! entity sends while handling one (a tell, an ask, a reminder) carries the context of that
//! message's span, across nodes and through the durable outbox and reminder tables, so one
//! request's whole tree of entity hops is one trace. Nothing here records or exports spans:
//! that is the entity layer's (`tessera_entity::trace`).

use serde::{Deserialize, Serialize};

/// The length of a version-00 `traceparent` value: `00-` 32 hex `-` 16 hex `-` 2 hex.
const TRACEPARENT_LEN: usize = 55;

/// One span's place in a trace: the trace id, the span's id and whether it is sampled.
///
/// ```
/// use tessera_contract::TraceContext;
/// let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
/// let context = TraceContext::from_traceparent(header).unwrap();
/// assert!(context.sampled);
/// assert_eq!(context.traceparent(), header);
/// assert!(TraceContext::from_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct TraceContext {
    /// The trace, never all zeros.
    pub trace_id: [u8; 16],
    /// The span that caused this message, never all zeros.
    pub span_id: [u8; 8],
    /// Whether the trace is being recorded (the `sampled` flag).
    pub sampled: bool,
}

impl TraceContext {
    /// Parses a `traceparent` header value. A version this host does not know is read as
    /// version 00 if it starts like one, as the specification asks; anything malformed, and
    /// all-zero ids, give `None` (the message then starts a trace of its own).
    pub fn from_traceparent(value: &str) -> Option<TraceContext> {
        let value = value.trim();
        let bytes = value.as_bytes();
        if bytes.len() < TRACEPARENT_LEN {
            return None;
        }
        let version = hex_byte(&bytes[0..2])?;
        let longer_allowed = version != 0 && bytes.get(TRACEPARENT_LEN).is_none_or(|b| *b == b'-');
        if version == 0xff
            || (bytes.len() != TRACEPARENT_LEN && !longer_allowed)
            || bytes[2] != b'-'
            || bytes[35] != b'-'
            || bytes[52] != b'-'
        {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (index, byte) in trace_id.iter_mut().enumerate() {
            *byte = hex_byte(&bytes[3 + 2 * index..5 + 2 * index])?;
        }
        let mut span_id = [0u8; 8];
        for (index, byte) in span_id.iter_mut().enumerate() {
            *byte = hex_byte(&bytes[36 + 2 * index..38 + 2 * index])?;
        }
        let flags = hex_byte(&bytes[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The `traceparent` header value (version 00) naming this span as the parent.
    pub fn traceparent(&self) -> String {
        let mut value = String::with_capacity(TRACEPARENT_LEN);
        value.push_str("00-");
        push_hex(&mut value, &self.trace_id);
        value.push('-');
        push_hex(&mut value, &self.span_id);
        value.push_str(if self.sampled { "-01" } else { "-00" });
        value
    }
}

impl From<TraceContext> for String {
    fn from(context: TraceContext) -> String {
        context.traceparent()
    }
}

impl TryFrom<String> for TraceContext {
    type Error = String;

    fn try_from(value: String) -> Result<TraceContext, String> {
        TraceContext::from_traceparent(&value)
            .ok_or_else(|| format!("not a W3C traceparent: {value:?}"))
    }
}

fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |byte: u8| match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    };
    Some(digit(pair[0])? << 4 | digit(pair[1])?)
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0xf)] as char);
    }
}

/// What a message carries of its trace: the context of the span that caused it, if any, and
/// when it reached this node (not sent: a node that receives it notes its own arrival), from
/// which the span that runs it counts its wait.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageTrace {
    /// The causing span (`None`: the message starts a trace).
    pub parent: Option<TraceContext>,
    /// When the message reached this node.
    #[serde(skip, default = "std::time::Instant::now")]
    pub arrived: std::time::Instant,
}

impl MessageTrace {
    /// A message caused by `parent`, arriving now.
    pub fn new(parent: Option<TraceContext>) -> MessageTrace {
        MessageTrace {
            parent,
            arrived: std::time::Instant::now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_round_trips_and_says_whether_it_is_sampled() {
        let context = TraceContext::from_traceparent(HEADER).expect("valid");
        assert_eq!(context.trace_id[0], 0x4b);
        assert_eq!(context.span_id[7], 0xb7);
        assert!(context.sampled);
        assert_eq!(context.traceparent(), HEADER);
        let unsampled = TraceContext::from_traceparent(&HEADER.replace("-01", "-00"));
        assert_eq!(unsampled.map(|context| context.sampled), Some(false));
    }

    #[test]
    fn malformed_or_zero_traceparents_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
        ] {
            assert_eq!(TraceContext::from_traceparent(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_as_version_00() {
        let later = format!("01{}-what-comes-next", &HEADER[2..]);
        let context = TraceContext::from_traceparent(&later).expect("a later version");
        assert_eq!(context.traceparent(), HEADER);
    }

    #[test]
    fn the_context_travels_as_its_traceparent() {
        let trace = MessageTrace::new(TraceContext::from_traceparent(HEADER));
        let bytes = serde_json::to_string(&trace).expect("encodes");
        assert!(bytes.contains(HEADER), "{bytes}");
        let back: MessageTrace = serde_json::from_str(&bytes).expect("decodes");
        assert_eq!(back.parent, trace.parent);
        assert!(serde_json::from_str::<TraceContext>("\"nonsense\"").is_err());
    }
}
