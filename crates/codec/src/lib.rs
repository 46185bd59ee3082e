//! Lossless transcoding between JSON text (the HTTP edge) and MessagePack bytes (what entities
//! read and write). Both directions stream: they walk the input once and write the output as they
//! go, without building a tree of values. [`json_to_msgpack`] lives in `json_in` (with its string
//! scanner in `json_string`), [`msgpack_to_json`] in `json_out`, and the MessagePack reader both of
//! them and [`validate_msgpack`] share in `msgpack_read`.
//!
//! Uses no other Tessera crate; the HTTP edge and the CLI (`tessera-host`) use it.
//!
//! # The mapping
//!
//! | JSON | MessagePack |
//! | --- | --- |
//! | `null`, `true`, `false` | nil, true, false |
//! | string | str (UTF-8) |
//! | array | array |
//! | object (string keys) | map with str keys; key order and duplicate keys kept as they are |
//! | number without fraction or exponent (`-12`, `0`, `-0`) | int, in the smallest encoding |
//! | number with a fraction or exponent (`1.0`, `2e3`) | float 64 |
//! | `{"$bin": "<base64>"}` | bin |
//! | `{"$ext": {"type": <i8>, "data": "<base64>"}}` | ext (timestamps are ext type -1) |
//!
//! - **Integers.** A literal without fraction or exponent is an integer and must fit `i64` or
//!   `u64` exactly; it becomes the smallest MessagePack int encoding (non-negative values as
//!   uint), byte for byte what `rmp_serde` and `rmpv` write. A literal outside that range is an
//!   error ([`CodecError::IntegerOutOfRange`]), never a float. `-0` is the integer 0.
//! - **Floats.** A literal with a fraction or exponent is rounded to the nearest `f64` and written
//!   as float 64; a literal beyond the `f64` range is an error ([`CodecError::FloatOutOfRange`]).
//!   Going out, a float 64 is written in the shortest form that reads back as the same `f64`, and
//!   always with a `.` or an exponent (`1.0`, `1e+300`, `-0.0`), so it reads back as a float. A
//!   float 32 is written as the exact value of the `f64` it widens to (`0.1f32` becomes
//!   `0.10000000149011612`), so it comes back as a float 64 of the same value. NaN and ±infinity
//!   have no JSON form ([`CodecError::NoJsonForm`]).
//! - **Binary and extension values.** base64 is the standard alphabet with padding, and decoding
//!   accepts only the canonical spelling, so one JSON text means one byte string. On the way in,
//!   an object with a key `"$bin"` or `"$ext"` (also when spelled with escapes) must be exactly
//!   one of the two forms above: the single key, valid base64, `type` an integer in `-128..=127`,
//!   `type` and `data` in either order and nothing else. Anything else is
//!   [`CodecError::ReservedKey`], never silently a map.
//! - **No JSON form.** On the way out, a map with a str key `"$bin"` or `"$ext"` (it would read
//!   back as bin or ext), a map key that is not a str, a str that is not valid UTF-8, and NaN or
//!   ±infinity have no JSON form: [`CodecError::NoJsonForm`], which
//!   [`CodecError::is_no_json_form`] tells apart from bad input (an HTTP 406 rather than a 400).
//!   A client that needs such values speaks `Content-Type: application/msgpack` instead.
//! - **Strings.** All JSON escapes are read, `\uXXXX` surrogate pairs included. A lone
//!   surrogate, an unescaped control character in a string, and invalid UTF-8 anywhere in the
//!   text are errors ([`CodecError::InvalidJson`], with the byte offset). Output escapes exactly
//!   as `serde_json` does: `"`, `\` and control characters, nothing else.
//! - **Text.** Exactly one value, with RFC 8259 whitespace (space, tab, line feed, carriage
//!   return) around tokens; empty input and trailing non-whitespace are errors. Output is compact
//!   (no whitespace).
//! - **Nesting.** Arrays, objects and maps nest at most [`NESTING_DEPTH_MAX`] deep, in both
//!   directions and in [`validate_msgpack`] ([`CodecError::TooDeep`]). The `$bin` and `$ext`
//!   wrapper objects are leaves and do not count.
//! - **Malformed MessagePack.** Truncated input, a length that claims more bytes than remain,
//!   the reserved marker `0xc1` and trailing bytes are [`CodecError::InvalidMessagePack`].
//!   Declared lengths are checked against the bytes that remain before anything is read, and
//!   nothing is ever allocated from them.

mod json_in;
mod json_out;
mod json_string;
mod msgpack_read;
#[cfg(test)]
mod tests;

/// How deep arrays, objects and maps may nest, in either direction.
///
/// Both directions and [`validate_msgpack`] descend one stack frame per level, so this bound is
/// what keeps a hostile body (`[[[[…` or `0x91 0x91 0x91 …`) from overflowing the stack. Real
/// messages nest a handful of levels.
pub const NESTING_DEPTH_MAX: usize = 128;

/// Why a conversion or validation failed. Offsets are byte offsets into the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The JSON text is malformed.
    #[error("invalid JSON at byte {offset}: {reason}")]
    InvalidJson { offset: usize, reason: &'static str },
    /// A JSON integer literal fits neither `i64` nor `u64`.
    #[error("integer {literal} at byte {offset} does not fit a 64-bit integer")]
    IntegerOutOfRange { offset: usize, literal: String },
    /// A JSON number literal is beyond the range of `f64`.
    #[error("number {literal} at byte {offset} is beyond the range of a 64-bit float")]
    FloatOutOfRange { offset: usize, literal: String },
    /// A JSON object uses `"$bin"` or `"$ext"` but is not exactly that form.
    #[error("reserved key misused at byte {offset}: {reason}")]
    ReservedKey { offset: usize, reason: &'static str },
    /// The MessagePack bytes are malformed.
    #[error("invalid MessagePack at byte {offset}: {reason}")]
    InvalidMessagePack { offset: usize, reason: &'static str },
    /// Well-formed MessagePack holds a value that JSON cannot carry.
    #[error("the MessagePack value at byte {offset} has no JSON form: {what}")]
    NoJsonForm { offset: usize, what: &'static str },
    /// Arrays, objects or maps nest deeper than [`NESTING_DEPTH_MAX`].
    #[error("nesting deeper than {NESTING_DEPTH_MAX} levels at byte {offset}")]
    TooDeep { offset: usize },
}

impl CodecError {
    /// Whether the input was well-formed MessagePack whose value JSON cannot carry (a reply to
    /// answer with 406 Not Acceptable), as opposed to bad input.
    ///
    /// ```
    /// use tessera_codec::msgpack_to_json;
    ///
    /// let nan = [0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0];
    /// assert!(msgpack_to_json(&nan).unwrap_err().is_no_json_form());
    /// let truncated = [0xcb, 0x7f];
    /// assert!(!msgpack_to_json(&truncated).unwrap_err().is_no_json_form());
    /// ```
    pub fn is_no_json_form(&self) -> bool {
        matches!(self, CodecError::NoJsonForm { .. })
    }
}

/// Converts one JSON value to MessagePack, following the mapping in the [module docs](self).
///
/// ```
/// use tessera_codec::json_to_msgpack;
///
/// let bytes = json_to_msgpack(br#"{"Add": 5}"#)?;
/// assert_eq!(bytes, [0x81, 0xa3, b'A', b'd', b'd', 0x05]);
/// let binary = json_to_msgpack(br#"{"$bin": "AQID"}"#)?;
/// assert_eq!(binary, [0xc4, 0x03, 1, 2, 3]);
/// # Ok::<(), tessera_codec::CodecError>(())
/// ```
pub fn json_to_msgpack(json: &[u8]) -> Result<Vec<u8>, CodecError> {
    json_in::convert(json)
}

/// Converts one MessagePack value to compact JSON text (UTF-8), following the mapping in the
/// [module docs](self). [`CodecError::NoJsonForm`] is returned only for well-formed input.
///
/// ```
/// use tessera_codec::msgpack_to_json;
///
/// let json = msgpack_to_json(&[0x82, 0xa1, b'a', 0x01, 0xa1, b'b', 0xc4, 0x01, 0xff])?;
/// assert_eq!(json, br#"{"a":1,"b":{"$bin":"/w=="}}"#);
/// # Ok::<(), tessera_codec::CodecError>(())
/// ```
pub fn msgpack_to_json(msgpack: &[u8]) -> Result<Vec<u8>, CodecError> {
    json_out::convert(msgpack).map_err(|error| {
        // A value can be both without JSON form and malformed further on: report the
        // malformation, so that NoJsonForm always means the input was good MessagePack.
        if error.is_no_json_form() {
            validate_msgpack(msgpack).err().unwrap_or(error)
        } else {
            error
        }
    })
}

/// Like [`msgpack_to_json`], returning the JSON text as a `String`.
///
/// ```
/// use tessera_codec::msgpack_to_json_string;
///
/// assert_eq!(msgpack_to_json_string(&[0x92, 0xc3, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0])?, "[true,1.5]");
/// # Ok::<(), tessera_codec::CodecError>(())
/// ```
pub fn msgpack_to_json_string(msgpack: &[u8]) -> Result<String, CodecError> {
    let json = msgpack_to_json(msgpack)?;
    Ok(String::from_utf8(json)
        .expect("invariant: json_out writes only UTF-8 (ASCII and checked strs)"))
}

/// Checks that `msgpack` is exactly one well-formed MessagePack value, nested at most
/// [`NESTING_DEPTH_MAX`] deep, with no trailing bytes. It does not require a JSON form: NaN,
/// non-str map keys and strs that are not UTF-8 pass.
///
/// ```
/// use tessera_codec::validate_msgpack;
///
/// assert!(validate_msgpack(&[0x81, 0x01, 0x02]).is_ok()); // {1: 2}: no JSON form, but valid
/// assert!(validate_msgpack(&[0xdb, 0xff, 0xff, 0xff, 0xff, b'x']).is_err()); // 4 GiB str, 1 byte
/// assert!(validate_msgpack(&[0x01, 0x02]).is_err()); // trailing byte
/// ```
pub fn validate_msgpack(msgpack: &[u8]) -> Result<(), CodecError> {
    msgpack_read::validate(msgpack)
}

/// The depth inside a container opened at `offset` by a value at `depth`, or
/// [`CodecError::TooDeep`] past [`NESTING_DEPTH_MAX`].
fn nested_depth(depth: usize, offset: usize) -> Result<usize, CodecError> {
    let inner = depth + 1;
    if inner > NESTING_DEPTH_MAX {
        return Err(CodecError::TooDeep { offset });
    }
    Ok(inner)
}
