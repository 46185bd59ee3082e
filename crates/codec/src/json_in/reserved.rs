//! The two reserved JSON forms, `{"$bin": "<base64>"}` and
//! `{"$ext": {"type": <i8>, "data": "<base64>"}}`, read after their key. The bytes are decoded
//! straight into the output and the bin or ext header is then moved in front of them, since an
//! ext's type may come after its data.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rmp::encode::{self, ByteBuf};

use super::super::CodecError;
use super::super::json_string::{invalid, read_string};
use super::{Integer, Parser, parse_integer, reserved_error};

pub(super) const ONLY_KEY: &str = "\"$bin\" and \"$ext\" must be the only key of their object";
const EXT_SHAPE: &str = "\"$ext\" needs an object with exactly the fields \"type\" and \"data\"";
const BASE64_DATA: &str = "binary data must be a string of padded standard base64";
const EXT_TYPE: &str = "an ext type must be an integer from -128 to 127";

impl Parser<'_> {
    /// Reads the rest of `{"$bin": "<base64>"}` after the colon.
    pub(super) fn bin_form(&mut self) -> Result<(), CodecError> {
        let data_start = self.out.as_slice().len();
        let length = self.base64_data()?;
        self.prepend_header(data_start, |out| {
            let Ok(_) = encode::write_bin_len(out, length);
        });
        self.close_reserved()
    }

    /// Reads the rest of `{"$ext": {"type": <i8>, "data": "<base64>"}}` after the colon.
    pub(super) fn ext_form(&mut self) -> Result<(), CodecError> {
        self.skip_whitespace();
        if !self.eat(b'{') {
            return Err(reserved_error(self.position, EXT_SHAPE));
        }
        let data_start = self.out.as_slice().len();
        let (mut ext_type, mut length) = (None, None);
        for field in 0..2 {
            self.skip_whitespace();
            if field == 1 && !self.eat(b',') {
                return Err(reserved_error(self.position, EXT_SHAPE));
            }
            self.skip_whitespace();
            let key_at = self.position;
            if self.input.get(key_at) != Some(&b'"') {
                return Err(reserved_error(key_at, EXT_SHAPE));
            }
            match self.key()?.bytes(self.input, &self.scratch) {
                b"type" if ext_type.is_none() => ext_type = Some(self.ext_type()?),
                b"data" if length.is_none() => length = Some(self.base64_data()?),
                _ => return Err(reserved_error(key_at, EXT_SHAPE)),
            }
        }
        self.skip_whitespace();
        let (Some(ext_type), Some(length), true) = (ext_type, length, self.eat(b'}')) else {
            return Err(reserved_error(self.position, EXT_SHAPE));
        };
        self.prepend_header(data_start, |out| {
            let Ok(_) = encode::write_ext_meta(out, length, ext_type);
        });
        self.close_reserved()
    }

    /// Reads an ext type: an integer literal in `i8` range.
    fn ext_type(&mut self) -> Result<i8, CodecError> {
        self.skip_whitespace();
        let start = self.position;
        if !matches!(self.input.get(start), Some(b'-' | b'0'..=b'9')) {
            return Err(reserved_error(start, EXT_TYPE));
        }
        let is_integer = self.scan_number()?;
        let literal = self.input.get(start..self.position).unwrap_or_default();
        let value = match parse_integer(literal).filter(|_| is_integer) {
            Some(Integer::Unsigned(value)) => i8::try_from(value).ok(),
            Some(Integer::Signed(value)) => i8::try_from(value).ok(),
            None => None,
        };
        value.ok_or_else(|| reserved_error(start, EXT_TYPE))
    }

    /// Reads a base64 string and appends the bytes it encodes to the output; returns their count.
    fn base64_data(&mut self) -> Result<u32, CodecError> {
        self.skip_whitespace();
        let start = self.position;
        if self.input.get(start) != Some(&b'"') {
            return Err(reserved_error(start, BASE64_DATA));
        }
        let text = read_string(self.input, &mut self.position, &mut self.scratch)?;
        let encoded = text.bytes(self.input, &self.scratch);
        let out = self.out.as_mut_vec();
        let before = out.len();
        if BASE64.decode_vec(encoded, out).is_err() {
            return Err(reserved_error(start, BASE64_DATA));
        }
        let decoded = out.len() - before;
        u32::try_from(decoded)
            .map_err(|_| invalid(start, "binary data longer than MessagePack allows"))
    }

    /// Writes a header with `write` and moves it to `data_start`, in front of the data.
    fn prepend_header(&mut self, data_start: usize, write: impl FnOnce(&mut ByteBuf)) {
        let header_start = self.out.as_slice().len();
        write(&mut self.out);
        let header_length = self.out.as_slice().len() - header_start;
        self.out.as_mut_vec()[data_start..].rotate_right(header_length);
    }

    /// Reads the closing brace of a `$bin` or `$ext` object.
    fn close_reserved(&mut self) -> Result<(), CodecError> {
        self.skip_whitespace();
        match self.input.get(self.position) {
            Some(b'}') => {
                self.position += 1;
                Ok(())
            }
            Some(b',') => Err(reserved_error(self.position, ONLY_KEY)),
            _ => Err(invalid(self.position, "expected '}'")),
        }
    }
}
