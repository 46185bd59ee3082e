//! Reading MessagePack one token at a time, for `json_out` and [`validate`]. A [`Cursor`] borrows
//! the input and hands out slices of it: it never allocates, and it checks every declared length
//! against the bytes that remain before it moves, so a 4 GiB str header on a 10-byte input fails
//! at once.

use rmp::Marker;

use super::{CodecError, nested_depth};

/// One MessagePack token: a whole scalar, or the header of an array or map whose items follow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Token<'a> {
    Nil,
    Boolean(bool),
    Unsigned(u64),
    Signed(i64),
    Float32(f32),
    Float64(f64),
    Str(&'a [u8]),
    Bin(&'a [u8]),
    Ext(i8, &'a [u8]),
    Array(u32),
    Map(u32),
}

/// A position in MessagePack input. Invariant: `position <= bytes.len()`.
pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, position: 0 }
    }

    pub(super) fn position(&self) -> usize {
        self.position
    }

    /// Fails unless the whole input has been read.
    pub(super) fn finish(&self) -> Result<(), CodecError> {
        if self.position == self.bytes.len() {
            return Ok(());
        }
        Err(self.invalid(self.position, "trailing bytes after the value"))
    }

    /// Reads the next token. For an array or map, its items are the tokens that follow.
    pub(super) fn next_token(&mut self) -> Result<Token<'a>, CodecError> {
        let start = self.position;
        let [marker] = self.fixed::<1>()?;
        let token = match Marker::from_u8(marker) {
            Marker::FixPos(value) => Token::Unsigned(value.into()),
            Marker::FixNeg(value) => Token::Signed(value.into()),
            Marker::Null => Token::Nil,
            Marker::False => Token::Boolean(false),
            Marker::True => Token::Boolean(true),
            Marker::U8 => Token::Unsigned(u8::from_be_bytes(self.fixed()?).into()),
            Marker::U16 => Token::Unsigned(u16::from_be_bytes(self.fixed()?).into()),
            Marker::U32 => Token::Unsigned(u32::from_be_bytes(self.fixed()?).into()),
            Marker::U64 => Token::Unsigned(u64::from_be_bytes(self.fixed()?)),
            Marker::I8 => Token::Signed(i8::from_be_bytes(self.fixed()?).into()),
            Marker::I16 => Token::Signed(i16::from_be_bytes(self.fixed()?).into()),
            Marker::I32 => Token::Signed(i32::from_be_bytes(self.fixed()?).into()),
            Marker::I64 => Token::Signed(i64::from_be_bytes(self.fixed()?)),
            Marker::F32 => Token::Float32(f32::from_be_bytes(self.fixed()?)),
            Marker::F64 => Token::Float64(f64::from_be_bytes(self.fixed()?)),
            Marker::FixStr(length) => Token::Str(self.take(length.into())?),
            Marker::Str8 | Marker::Str16 | Marker::Str32 => {
                let length = self.length(marker, Marker::Str8)?;
                Token::Str(self.take(length)?)
            }
            Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => {
                let length = self.length(marker, Marker::Bin8)?;
                Token::Bin(self.take(length)?)
            }
            Marker::FixExt1 => self.ext(1)?,
            Marker::FixExt2 => self.ext(2)?,
            Marker::FixExt4 => self.ext(4)?,
            Marker::FixExt8 => self.ext(8)?,
            Marker::FixExt16 => self.ext(16)?,
            Marker::Ext8 | Marker::Ext16 | Marker::Ext32 => {
                let length = self.length(marker, Marker::Ext8)?;
                self.ext(length)?
            }
            Marker::FixArray(count) => Token::Array(self.items(count.into(), 1, start)?),
            Marker::Array16 | Marker::Array32 => {
                let count = self.count(marker, Marker::Array16)?;
                Token::Array(self.items(count, 1, start)?)
            }
            Marker::FixMap(count) => Token::Map(self.items(count.into(), 2, start)?),
            Marker::Map16 | Marker::Map32 => {
                let count = self.count(marker, Marker::Map16)?;
                Token::Map(self.items(count, 2, start)?)
            }
            Marker::Reserved => return Err(self.invalid(start, "reserved marker 0xc1")),
        };
        Ok(token)
    }

    /// The next `N` bytes.
    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let rest = self.bytes.get(self.position..).unwrap_or_default();
        let Some(chunk) = rest.first_chunk::<N>() else {
            return Err(self.invalid(self.bytes.len(), "truncated: the input ends inside a value"));
        };
        self.position += N;
        Ok(*chunk)
    }

    /// The next `length` bytes, checked against what remains before anything moves.
    fn take(&mut self, length: usize) -> Result<&'a [u8], CodecError> {
        let rest = self.bytes.get(self.position..).unwrap_or_default();
        let Some(taken) = rest.get(..length) else {
            return Err(self.invalid(self.position, "a length claims more bytes than remain"));
        };
        self.position += length;
        Ok(taken)
    }

    /// The length after a str, bin or ext marker of width 8, 16 or 32 (`marker - first`).
    fn length(&mut self, marker: u8, first: Marker) -> Result<usize, CodecError> {
        let length = match marker - first.to_u8() {
            0 => u8::from_be_bytes(self.fixed()?).into(),
            1 => u16::from_be_bytes(self.fixed()?).into(),
            _ => u32::from_be_bytes(self.fixed()?),
        };
        Ok(usize::try_from(length).unwrap_or(usize::MAX))
    }

    fn ext(&mut self, length: usize) -> Result<Token<'a>, CodecError> {
        let [type_byte] = self.fixed::<1>()?;
        Ok(Token::Ext(
            i8::from_be_bytes([type_byte]),
            self.take(length)?,
        ))
    }

    /// The count after an array or map marker of width 16 or 32 (`marker - first`).
    fn count(&mut self, marker: u8, first: Marker) -> Result<u32, CodecError> {
        if marker == first.to_u8() {
            return Ok(u16::from_be_bytes(self.fixed()?).into());
        }
        Ok(u32::from_be_bytes(self.fixed()?))
    }

    /// `count` after checking that the items, each at least one byte (`tokens_per_item` tokens
    /// for a map entry), fit in what remains: a huge declared count fails here, before any loop.
    fn items(&self, count: u32, tokens_per_item: usize, start: usize) -> Result<u32, CodecError> {
        let remaining = self.bytes.len() - self.position;
        let needed = usize::try_from(count)
            .map_or(usize::MAX, |count| count.saturating_mul(tokens_per_item));
        if needed > remaining {
            return Err(self.invalid(start, "a count claims more items than bytes remain"));
        }
        Ok(count)
    }

    fn invalid(&self, offset: usize, reason: &'static str) -> CodecError {
        CodecError::InvalidMessagePack { offset, reason }
    }
}

/// Checks that `bytes` is exactly one well-formed value within the nesting bound.
pub(super) fn validate(bytes: &[u8]) -> Result<(), CodecError> {
    let mut cursor = Cursor::new(bytes);
    skip_value(&mut cursor, 0)?;
    cursor.finish()
}

/// Reads one whole value at `depth`, items included.
fn skip_value(cursor: &mut Cursor<'_>, depth: usize) -> Result<(), CodecError> {
    let start = cursor.position();
    let tokens = match cursor.next_token()? {
        Token::Array(count) => u64::from(count),
        Token::Map(count) => 2 * u64::from(count),
        _ => return Ok(()),
    };
    let inner = nested_depth(depth, start)?;
    for _ in 0..tokens {
        skip_value(cursor, inner)?;
    }
    Ok(())
}
