//! Reading one JSON string for `json_in`: finds its end, checks UTF-8 and control characters, and
//! resolves escapes. A string without escapes stays a range of the input; one with escapes is
//! written, unescaped, into a scratch buffer that the caller reuses for every string.

use super::CodecError;

/// Where the contents of a string just read are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Text {
    /// `input[start..end]`, which had no escapes.
    Input { start: usize, end: usize },
    /// The whole scratch buffer.
    Unescaped,
}

impl Text {
    /// The string's UTF-8 bytes.
    pub(super) fn bytes<'a>(self, input: &'a [u8], scratch: &'a [u8]) -> &'a [u8] {
        match self {
            Text::Input { start, end } => &input[start..end],
            Text::Unescaped => scratch,
        }
    }
}

/// Reads the string whose opening quote is at `*position`, leaving `*position` after its closing
/// quote.
pub(super) fn read_string(
    input: &[u8],
    position: &mut usize,
    scratch: &mut Vec<u8>,
) -> Result<Text, CodecError> {
    let start = *position + 1;
    let mut run_start = start;
    let mut escaped = false;
    loop {
        let run_end = find_special(input, run_start);
        check_utf8(input, run_start, run_end)?;
        let run = input.get(run_start..run_end).unwrap_or_default();
        match input.get(run_end) {
            Some(b'"') => {
                *position = run_end + 1;
                if !escaped {
                    return Ok(Text::Input {
                        start,
                        end: run_end,
                    });
                }
                scratch.extend_from_slice(run);
                return Ok(Text::Unescaped);
            }
            Some(b'\\') => {
                if !escaped {
                    scratch.clear();
                    escaped = true;
                }
                scratch.extend_from_slice(run);
                run_start = unescape(input, run_end, scratch)?;
            }
            Some(_) => {
                return Err(invalid(
                    run_end,
                    "control character in a string (it must be escaped)",
                ));
            }
            None => return Err(invalid(*position, "unterminated string")),
        }
    }
}

/// The index of the first quote, backslash or control character at or after `from`, or the end.
fn find_special(input: &[u8], from: usize) -> usize {
    let rest = input.get(from..).unwrap_or_default();
    let found = rest
        .iter()
        .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20);
    from + found.unwrap_or(rest.len())
}

/// Escapes and quotes are ASCII, so the runs between them are whole UTF-8 sequences.
fn check_utf8(input: &[u8], start: usize, end: usize) -> Result<(), CodecError> {
    let run = input.get(start..end).unwrap_or_default();
    match std::str::from_utf8(run) {
        Ok(_) => Ok(()),
        Err(error) => Err(invalid(start + error.valid_up_to(), "invalid UTF-8")),
    }
}

/// Resolves the escape whose backslash is at `at` into `scratch`; returns the index after it.
fn unescape(input: &[u8], at: usize, scratch: &mut Vec<u8>) -> Result<usize, CodecError> {
    let byte = match input.get(at + 1) {
        Some(b'"') => b'"',
        Some(b'\\') => b'\\',
        Some(b'/') => b'/',
        Some(b'b') => 0x08,
        Some(b'f') => 0x0c,
        Some(b'n') => b'\n',
        Some(b'r') => b'\r',
        Some(b't') => b'\t',
        Some(b'u') => return unescape_unicode(input, at, scratch),
        _ => return Err(invalid(at, "invalid escape")),
    };
    scratch.push(byte);
    Ok(at + 2)
}

/// Resolves `\uXXXX` at `at`, or a surrogate pair `\uD8XX\uDCXX`; a lone surrogate is an error.
fn unescape_unicode(input: &[u8], at: usize, scratch: &mut Vec<u8>) -> Result<usize, CodecError> {
    let first = hex4(input, at + 2, at)?;
    let (code_point, end) = match first {
        0xd800..=0xdbff => {
            let low = if input.get(at + 6..at + 8) == Some(b"\\u") {
                hex4(input, at + 8, at)?
            } else {
                0
            };
            if !(0xdc00..=0xdfff).contains(&low) {
                return Err(invalid(at, "lone surrogate in a \\u escape"));
            }
            (0x10000 + ((first - 0xd800) << 10) + (low - 0xdc00), at + 12)
        }
        0xdc00..=0xdfff => return Err(invalid(at, "lone surrogate in a \\u escape")),
        _ => (first, at + 6),
    };
    let Some(character) = char::from_u32(code_point) else {
        return Err(invalid(at, "invalid \\u escape"));
    };
    let mut buffer = [0; 4];
    scratch.extend_from_slice(character.encode_utf8(&mut buffer).as_bytes());
    Ok(end)
}

/// The four hex digits at `at`, of the escape whose backslash is at `escape_at`.
fn hex4(input: &[u8], at: usize, escape_at: usize) -> Result<u32, CodecError> {
    let digits = input.get(at..).and_then(<[u8]>::first_chunk::<4>);
    let value = digits.and_then(|digits| {
        digits.iter().try_fold(0, |value, &digit| {
            Some(value << 4 | char::from(digit).to_digit(16)?)
        })
    });
    value.ok_or_else(|| invalid(escape_at, "a \\u escape needs four hex digits"))
}

pub(super) fn invalid(offset: usize, reason: &'static str) -> CodecError {
    CodecError::InvalidJson { offset, reason }
}
