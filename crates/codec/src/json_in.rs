//! JSON text to MessagePack: a recursive-descent parser, bounded by
//! [`NESTING_DEPTH_MAX`](super::NESTING_DEPTH_MAX), that writes MessagePack as it reads. An array
//! or map header needs the item count before the items, so a one-byte placeholder is written first
//! and patched at the closing bracket; past 15 items the longer header is spliced in. Every header
//! is therefore the minimal one, as `rmp_serde` and `rmpv` write it. Strings are read by
//! `json_string`; `$bin` and `$ext` objects by `reserved`.

use rmp::Marker;
use rmp::encode::{self, ByteBuf};

use super::json_string::{Text, invalid, read_string};
use super::{CodecError, nested_depth};

mod reserved;

/// How much of an out-of-range literal an error quotes, so an error stays small however long the
/// client's literal is.
const LITERAL_IN_ERROR_BYTES_MAX: usize = 64;

/// Converts the JSON text `json` to MessagePack.
pub(super) fn convert(json: &[u8]) -> Result<Vec<u8>, CodecError> {
    let mut parser = Parser {
        input: json,
        position: 0,
        // MessagePack is rarely longer than the JSON it comes from (floats can be).
        out: ByteBuf::with_capacity(json.len()),
        scratch: Vec::new(),
    };
    parser.value(0)?;
    parser.skip_whitespace();
    if parser.position < json.len() {
        return Err(invalid(
            parser.position,
            "unexpected text after the JSON value",
        ));
    }
    Ok(parser.out.into_vec())
}

/// The two kinds of MessagePack container a JSON text can open.
#[derive(Clone, Copy)]
enum Container {
    Array,
    Map,
}

/// Which reserved form an object's first key starts.
enum Reserved {
    Bin,
    Ext,
}

struct Parser<'a> {
    input: &'a [u8],
    position: usize,
    out: ByteBuf,
    /// Unescaped string contents, reused for every string with escapes.
    scratch: Vec<u8>,
}

impl Parser<'_> {
    /// Reads the value (after optional whitespace) at `depth` containers deep.
    fn value(&mut self, depth: usize) -> Result<(), CodecError> {
        self.skip_whitespace();
        match self.input.get(self.position) {
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => {
                let text = read_string(self.input, &mut self.position, &mut self.scratch)?;
                self.write_str(text)
            }
            Some(b't') => self.literal(b"true", Marker::True),
            Some(b'f') => self.literal(b"false", Marker::False),
            Some(b'n') => self.literal(b"null", Marker::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(invalid(self.position, "expected a JSON value")),
            None => Err(invalid(
                self.position,
                "expected a JSON value, found the end of the input",
            )),
        }
    }

    fn literal(&mut self, word: &[u8], marker: Marker) -> Result<(), CodecError> {
        if !self
            .input
            .get(self.position..)
            .unwrap_or_default()
            .starts_with(word)
        {
            return Err(invalid(self.position, "expected a JSON value"));
        }
        self.position += word.len();
        self.out.as_mut_vec().push(marker.to_u8());
        Ok(())
    }

    fn array(&mut self, depth: usize) -> Result<(), CodecError> {
        let inner = nested_depth(depth, self.position)?;
        self.position += 1;
        let header_at = self.begin_container();
        self.skip_whitespace();
        let mut count = 0;
        if !self.eat(b']') {
            loop {
                self.value(inner)?;
                count = self.count_item(count)?;
                if self.end_of_items(b']')? {
                    break;
                }
            }
        }
        self.end_container(header_at, Container::Array, count);
        Ok(())
    }

    fn object(&mut self, depth: usize) -> Result<(), CodecError> {
        let open_at = self.position;
        self.position += 1;
        self.skip_whitespace();
        if self.eat(b'}') {
            nested_depth(depth, open_at)?;
            self.out.as_mut_vec().push(Marker::FixMap(0).to_u8());
            return Ok(());
        }
        let key = self.key()?;
        match reserved(key.bytes(self.input, &self.scratch)) {
            Some(Reserved::Bin) => return self.bin_form(),
            Some(Reserved::Ext) => return self.ext_form(),
            None => {}
        }
        let inner = nested_depth(depth, open_at)?;
        let header_at = self.begin_container();
        self.entry(key, inner)?;
        let mut count = 1;
        while !self.end_of_items(b'}')? {
            self.skip_whitespace();
            let key_at = self.position;
            let key = self.key()?;
            if reserved(key.bytes(self.input, &self.scratch)).is_some() {
                return Err(reserved_error(key_at, reserved::ONLY_KEY));
            }
            self.entry(key, inner)?;
            count = self.count_item(count)?;
        }
        self.end_container(header_at, Container::Map, count);
        Ok(())
    }

    /// Reads an object key (the opening quote must be next) and the colon after it.
    fn key(&mut self) -> Result<Text, CodecError> {
        if self.input.get(self.position) != Some(&b'"') {
            return Err(invalid(self.position, "expected a string key"));
        }
        let text = read_string(self.input, &mut self.position, &mut self.scratch)?;
        self.skip_whitespace();
        if !self.eat(b':') {
            return Err(invalid(self.position, "expected ':' after an object key"));
        }
        Ok(text)
    }

    /// Writes a key already read, then reads and writes its value.
    fn entry(&mut self, key: Text, depth: usize) -> Result<(), CodecError> {
        self.write_str(key)?;
        self.value(depth)
    }

    /// After an item: `Ok(true)` at the closing `close`, `Ok(false)` after a comma.
    fn end_of_items(&mut self, close: u8) -> Result<bool, CodecError> {
        self.skip_whitespace();
        match self.input.get(self.position) {
            Some(b',') => {
                self.position += 1;
                Ok(false)
            }
            Some(&byte) if byte == close => {
                self.position += 1;
                Ok(true)
            }
            _ if close == b']' => Err(invalid(self.position, "expected ',' or ']'")),
            _ => Err(invalid(self.position, "expected ',' or '}'")),
        }
    }

    fn count_item(&self, count: u32) -> Result<u32, CodecError> {
        count
            .checked_add(1)
            .ok_or_else(|| invalid(self.position, "more items than MessagePack allows"))
    }

    /// Writes a one-byte header placeholder and returns where it is.
    fn begin_container(&mut self) -> usize {
        let out = self.out.as_mut_vec();
        out.push(0);
        out.len() - 1
    }

    /// Replaces the placeholder at `header_at` with the minimal header for `count` items.
    fn end_container(&mut self, header_at: usize, container: Container, count: u32) {
        let (header, length) = container_header(container, count);
        let out = self.out.as_mut_vec();
        if let [byte] = &header[..length] {
            out[header_at] = *byte;
        } else {
            out.splice(header_at..=header_at, header[..length].iter().copied());
        }
    }

    fn write_str(&mut self, text: Text) -> Result<(), CodecError> {
        let bytes = text.bytes(self.input, &self.scratch);
        let Ok(length) = u32::try_from(bytes.len()) else {
            return Err(invalid(
                self.position,
                "a string longer than MessagePack allows",
            ));
        };
        let Ok(_) = encode::write_str_len(&mut self.out, length);
        self.out.as_mut_vec().extend_from_slice(bytes);
        Ok(())
    }

    fn number(&mut self) -> Result<(), CodecError> {
        let start = self.position;
        let is_integer = self.scan_number()?;
        let literal = self.input.get(start..self.position).unwrap_or_default();
        if is_integer {
            let Ok(_) = match parse_integer(literal) {
                Some(Integer::Unsigned(value)) => encode::write_uint(&mut self.out, value),
                Some(Integer::Signed(value)) => encode::write_sint(&mut self.out, value),
                None => return Err(out_of_range(start, literal, true)),
            };
            return Ok(());
        }
        let value = parse_float(literal).ok_or_else(|| out_of_range(start, literal, false))?;
        let Ok(()) = encode::write_f64(&mut self.out, value);
        Ok(())
    }

    /// Moves past a number per RFC 8259's grammar; returns whether it has neither fraction nor
    /// exponent.
    fn scan_number(&mut self) -> Result<bool, CodecError> {
        self.eat(b'-');
        match self.input.get(self.position) {
            Some(b'0') => self.position += 1,
            Some(b'1'..=b'9') => self.skip_digits(),
            _ => return Err(invalid(self.position, "expected a digit")),
        }
        let mut is_integer = true;
        if self.eat(b'.') {
            self.require_digits("expected a digit after the decimal point")?;
            is_integer = false;
        }
        if self.eat(b'e') || self.eat(b'E') {
            let _sign = self.eat(b'+') || self.eat(b'-');
            self.require_digits("expected a digit in the exponent")?;
            is_integer = false;
        }
        Ok(is_integer)
    }

    fn require_digits(&mut self, reason: &'static str) -> Result<(), CodecError> {
        if !self
            .input
            .get(self.position)
            .is_some_and(u8::is_ascii_digit)
        {
            return Err(invalid(self.position, reason));
        }
        self.skip_digits();
        Ok(())
    }

    fn skip_digits(&mut self) {
        let rest = self.input.get(self.position..).unwrap_or_default();
        self.position += rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
    }

    /// Moves past RFC 8259 whitespace: space, tab, line feed, carriage return.
    fn skip_whitespace(&mut self) {
        let rest = self.input.get(self.position..).unwrap_or_default();
        self.position += rest
            .iter()
            .take_while(|byte| matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
            .count();
    }

    /// Moves past `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        let found = self.input.get(self.position) == Some(&byte);
        self.position += usize::from(found);
        found
    }
}

/// The reserved form an object key starts, if any.
fn reserved(key: &[u8]) -> Option<Reserved> {
    match key {
        b"$bin" => Some(Reserved::Bin),
        b"$ext" => Some(Reserved::Ext),
        _ => None,
    }
}

fn reserved_error(offset: usize, reason: &'static str) -> CodecError {
    CodecError::ReservedKey { offset, reason }
}

/// The minimal header for `count` items, as `rmp::encode::write_array_len` and `write_map_len`
/// choose it, and its length.
fn container_header(container: Container, count: u32) -> ([u8; 5], usize) {
    let (fix, short, long) = match container {
        Container::Array => (Marker::FixArray(0), Marker::Array16, Marker::Array32),
        Container::Map => (Marker::FixMap(0), Marker::Map16, Marker::Map32),
    };
    match (u8::try_from(count), u16::try_from(count)) {
        (Ok(small @ 0..=15), _) => ([fix.to_u8() | small, 0, 0, 0, 0], 1),
        (_, Ok(medium)) => {
            let [high, low] = medium.to_be_bytes();
            ([short.to_u8(), high, low, 0, 0], 3)
        }
        _ => {
            let [a, b, c, d] = count.to_be_bytes();
            ([long.to_u8(), a, b, c, d], 5)
        }
    }
}

enum Integer {
    Unsigned(u64),
    Signed(i64),
}

/// A JSON integer literal as `u64` if non-negative (`-0` included), else as `i64`.
fn parse_integer(literal: &[u8]) -> Option<Integer> {
    let (negative, digits) = match literal.split_first() {
        Some((b'-', digits)) => (true, digits),
        _ => (false, literal),
    };
    let magnitude = digits.iter().try_fold(0u64, |value, &digit| {
        value
            .checked_mul(10)?
            .checked_add(char::from(digit).to_digit(10)?.into())
    })?;
    if !negative || magnitude == 0 {
        return Some(Integer::Unsigned(magnitude));
    }
    0i64.checked_sub_unsigned(magnitude).map(Integer::Signed)
}

/// A JSON number literal with fraction or exponent, rounded to the nearest finite `f64`.
fn parse_float(literal: &[u8]) -> Option<f64> {
    let value: f64 = std::str::from_utf8(literal).ok()?.parse().ok()?;
    value.is_finite().then_some(value)
}

fn out_of_range(offset: usize, literal: &[u8], is_integer: bool) -> CodecError {
    let quoted = literal.get(..LITERAL_IN_ERROR_BYTES_MAX).unwrap_or(literal);
    let mut text = String::from_utf8_lossy(quoted).into_owned();
    if quoted.len() < literal.len() {
        text.push('…');
    }
    if is_integer {
        CodecError::IntegerOutOfRange {
            offset,
            literal: text,
        }
    } else {
        CodecError::FloatOutOfRange {
            offset,
            literal: text,
        }
    }
}
