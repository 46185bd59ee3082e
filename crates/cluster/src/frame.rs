//! Frames on the wire: a 4-byte big-endian length, then that many bytes of MessagePack
//! (rmp-serde, named fields). Every frame after the handshake is one `Envelope`: a one-way
//! message, a request with its correlation id, or the reply to one. A length above
//! `max_frame_bytes` is refused before its body is read.

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::net::TcpStream;
use tokio_rustls::TlsStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec, LengthDelimitedCodecError};

/// The bytes of a frame's length prefix.
pub const FRAME_LENGTH_PREFIX_BYTES: usize = 4;

/// A connection after TLS and the handshake: frames of this format both ways.
pub(crate) type Connection = Framed<TlsStream<TcpStream>, LengthDelimitedCodec>;

/// What one frame after the handshake carries.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Envelope<M> {
    /// A one-way message.
    Tell { message: M },
    /// A request; the receiver answers with a `Reply` carrying the same id.
    Request { id: u64, message: M },
    /// The answer to the request with this id.
    Reply { id: u64, message: M },
}

/// A frame that could not be made or read.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The value could not be encoded as MessagePack.
    #[error("cannot encode a frame: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    /// The bytes are not a valid MessagePack value of the expected shape.
    #[error("malformed frame: {0}")]
    Malformed(#[from] rmp_serde::decode::Error),
    /// The frame is longer than the limit.
    #[error("frame of {bytes} bytes exceeds the limit of {limit} bytes")]
    Oversized {
        /// The frame's length.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
}

/// The length-delimited codec, refusing frames longer than `max_frame_bytes`.
pub(crate) fn codec(max_frame_bytes: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(FRAME_LENGTH_PREFIX_BYTES)
        .max_frame_length(max_frame_bytes)
        .new_codec()
}

/// `value` as one frame body, refused if it would exceed `max_frame_bytes`.
pub(crate) fn encode<T: Serialize>(value: &T, max_frame_bytes: usize) -> Result<Bytes, FrameError> {
    let body = rmp_serde::to_vec_named(value)?;
    if body.len() > max_frame_bytes {
        return Err(FrameError::Oversized {
            bytes: body.len(),
            limit: max_frame_bytes,
        });
    }
    Ok(Bytes::from(body))
}

/// A frame body as `T`.
pub(crate) fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    Ok(rmp_serde::from_slice(body)?)
}

/// Whether a read error is the codec refusing an oversized frame (rather than the
/// connection failing).
pub(crate) fn is_oversized(error: &std::io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.is::<LengthDelimitedCodecError>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use tokio_util::codec::{Decoder, Encoder};

    #[test]
    fn an_envelope_round_trips() {
        let frame = encode(
            &Envelope::Request {
                id: 7,
                message: "hi".to_owned(),
            },
            1024,
        )
        .unwrap();
        let decoded: Envelope<String> = decode(&frame).unwrap();
        assert!(matches!(decoded, Envelope::Request { id: 7, message } if message == "hi"));
    }

    #[test]
    fn a_too_large_value_is_refused_before_sending() {
        let result = encode(
            &Envelope::Tell {
                message: vec![0u8; 2048],
            },
            1024,
        );
        assert!(matches!(
            result,
            Err(FrameError::Oversized { limit: 1024, .. })
        ));
    }

    #[test]
    fn garbage_is_malformed() {
        for body in [&b""[..], b"\xc1", b"\x92\x01", b"\x81\xa3Foo\x90"] {
            assert!(matches!(
                decode::<Envelope<String>>(body),
                Err(FrameError::Malformed(_))
            ));
        }
    }

    #[test]
    fn the_codec_refuses_a_long_length_before_the_body() {
        let mut codec = codec(1024);
        let mut buffer = BytesMut::new();
        buffer.extend_from_slice(&(1u32 << 30).to_be_bytes());
        let error = codec.decode(&mut buffer).unwrap_err();
        assert!(is_oversized(&error));
        let mut out = BytesMut::new();
        codec.encode(Bytes::from_static(b"abc"), &mut out).unwrap();
        assert_eq!(&out[..], b"\x00\x00\x00\x03abc");
    }
}
