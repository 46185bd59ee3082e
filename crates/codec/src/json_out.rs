//! MessagePack to JSON text: reads tokens from `msgpack_read` and writes compact JSON as it goes,
//! recursing into arrays and maps at most [`NESTING_DEPTH_MAX`](super::NESTING_DEPTH_MAX) deep.
//! Strings are escaped as `serde_json` escapes them and numbers are formatted by `serde_json`'s
//! formatter, so output matches `serde_json::to_vec` for the same value.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::ser::{CompactFormatter, Formatter as _};

use super::msgpack_read::{Cursor, Token};
use super::{CodecError, nested_depth};

/// Converts the MessagePack value `msgpack` to JSON text.
pub(super) fn convert(msgpack: &[u8]) -> Result<Vec<u8>, CodecError> {
    let mut writer = Writer {
        cursor: Cursor::new(msgpack),
        out: Vec::with_capacity(json_capacity(msgpack.len())),
    };
    writer.value(0)?;
    writer.cursor.finish()?;
    Ok(writer.out)
}

/// The output to reserve for `msgpack_length` bytes of MessagePack: JSON of typical messages is
/// 1 to 1.5 times as long (quotes and commas; base64 is 4/3). Bounded by the input's size, never
/// by a length the input declares.
fn json_capacity(msgpack_length: usize) -> usize {
    msgpack_length
        .saturating_add(msgpack_length / 2)
        .saturating_add(16)
}

struct Writer<'a> {
    cursor: Cursor<'a>,
    out: Vec<u8>,
}

impl Writer<'_> {
    /// Writes the next value, `depth` containers deep.
    fn value(&mut self, depth: usize) -> Result<(), CodecError> {
        let start = self.cursor.position();
        match self.cursor.next_token()? {
            Token::Nil => self.out.extend_from_slice(b"null"),
            Token::Boolean(true) => self.out.extend_from_slice(b"true"),
            Token::Boolean(false) => self.out.extend_from_slice(b"false"),
            Token::Unsigned(value) => written(CompactFormatter.write_u64(&mut self.out, value)),
            Token::Signed(value) => written(CompactFormatter.write_i64(&mut self.out, value)),
            Token::Float32(value) => self.float(f64::from(value), start)?,
            Token::Float64(value) => self.float(value, start)?,
            Token::Str(bytes) => write_escaped(&mut self.out, utf8(bytes, start)?),
            Token::Bin(bytes) => {
                self.out.extend_from_slice(br#"{"$bin":""#);
                write_base64(&mut self.out, bytes);
                self.out.extend_from_slice(br#""}"#);
            }
            Token::Ext(ext_type, bytes) => {
                self.out.extend_from_slice(br#"{"$ext":{"type":"#);
                written(CompactFormatter.write_i8(&mut self.out, ext_type));
                self.out.extend_from_slice(br#","data":""#);
                write_base64(&mut self.out, bytes);
                self.out.extend_from_slice(br#""}}"#);
            }
            Token::Array(count) => self.array(count, nested_depth(depth, start)?)?,
            Token::Map(count) => self.map(count, nested_depth(depth, start)?)?,
        }
        Ok(())
    }

    fn float(&mut self, value: f64, start: usize) -> Result<(), CodecError> {
        if !value.is_finite() {
            return Err(CodecError::NoJsonForm {
                offset: start,
                what: "NaN or an infinite float",
            });
        }
        written(CompactFormatter.write_f64(&mut self.out, value));
        Ok(())
    }

    /// Writes `count` items, each `inner` containers deep.
    fn array(&mut self, count: u32, inner: usize) -> Result<(), CodecError> {
        self.out.push(b'[');
        for index in 0..count {
            if index > 0 {
                self.out.push(b',');
            }
            self.value(inner)?;
        }
        self.out.push(b']');
        Ok(())
    }

    /// Writes `count` entries, each value `inner` containers deep.
    fn map(&mut self, count: u32, inner: usize) -> Result<(), CodecError> {
        self.out.push(b'{');
        for index in 0..count {
            if index > 0 {
                self.out.push(b',');
            }
            self.key()?;
            self.out.push(b':');
            self.value(inner)?;
        }
        self.out.push(b'}');
        Ok(())
    }

    /// Writes a map key, which must be a UTF-8 str other than `"$bin"` and `"$ext"`.
    fn key(&mut self) -> Result<(), CodecError> {
        let start = self.cursor.position();
        let Token::Str(bytes) = self.cursor.next_token()? else {
            return Err(CodecError::NoJsonForm {
                offset: start,
                what: "a map key that is not a string",
            });
        };
        let key = utf8(bytes, start)?;
        if key == "$bin" || key == "$ext" {
            let what = "a map key \"$bin\" or \"$ext\" (it would read back as bin or ext)";
            return Err(CodecError::NoJsonForm {
                offset: start,
                what,
            });
        }
        write_escaped(&mut self.out, key);
        Ok(())
    }
}

fn utf8(bytes: &[u8], start: usize) -> Result<&str, CodecError> {
    std::str::from_utf8(bytes).map_err(|_| CodecError::NoJsonForm {
        offset: start,
        what: "a string that is not valid UTF-8",
    })
}

/// Writing into a `Vec<u8>` never fails: running out of memory aborts instead.
fn written(result: std::io::Result<()>) {
    result.expect("invariant: writing into a Vec<u8> never fails");
}

/// Appends `bytes` as padded standard base64.
fn write_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    let start = out.len();
    let encoded_length = bytes.len().div_ceil(3) * 4;
    out.resize(start + encoded_length, 0);
    let encoded = BASE64
        .encode_slice(bytes, &mut out[start..])
        .expect("invariant: the output was sized for padded base64");
    debug_assert_eq!(encoded, encoded_length);
}

/// What follows the backslash for each byte `serde_json` escapes (`u`: as `\u00XX`); 0 for bytes
/// written as they are.
const ESCAPES: [u8; 256] = {
    let mut table = [0; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends `text` as a quoted JSON string, escaped exactly as `serde_json` escapes it.
fn write_escaped(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.push(b'"');
    let mut run_start = 0;
    for (index, &byte) in bytes.iter().enumerate() {
        let escape = ESCAPES[usize::from(byte)];
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[run_start..index]);
        if escape == b'u' {
            let hex = [
                HEX_DIGITS[usize::from(byte >> 4)],
                HEX_DIGITS[usize::from(byte & 0x0f)],
            ];
            out.extend_from_slice(b"\\u00");
            out.extend_from_slice(&hex);
        } else {
            out.extend_from_slice(&[b'\\', escape]);
        }
        run_start = index + 1;
    }
    out.extend_from_slice(&bytes[run_start..]);
    out.push(b'"');
}
