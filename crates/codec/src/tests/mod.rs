//! Tests of the codec: one unit test per mapping rule, by direction, then byte-for-byte agreement
//! with `rmp_serde` and `rmpv`, then property tests.

use rmpv::Value;

use super::{
    CodecError, json_to_msgpack, msgpack_to_json, msgpack_to_json_string, validate_msgpack,
};

mod compatibility;
mod json_in;
mod json_out;
mod properties;
mod reserved;

/// The MessagePack for `json`, which must convert.
fn to_msgpack(json: &str) -> Vec<u8> {
    json_to_msgpack(json.as_bytes())
        .unwrap_or_else(|error| panic!("{json:?} should convert: {error}"))
}

/// The JSON for `msgpack`, which must convert.
fn to_json(msgpack: &[u8]) -> String {
    msgpack_to_json_string(msgpack)
        .unwrap_or_else(|error| panic!("{msgpack:02x?} should convert: {error}"))
}

/// What `rmpv` writes for `value`: the canonical encoding.
fn encode(value: &Value) -> Vec<u8> {
    let mut bytes = Vec::new();
    rmpv::encode::write_value(&mut bytes, value).expect("writing into a Vec never fails");
    bytes
}

fn decode(mut bytes: &[u8]) -> Value {
    rmpv::decode::read_value(&mut bytes).expect("the codec writes well-formed MessagePack")
}

/// The error converting `json`, which must fail.
fn json_error(json: &[u8]) -> CodecError {
    match json_to_msgpack(json) {
        Ok(bytes) => panic!(
            "{:?} should fail, got {bytes:02x?}",
            String::from_utf8_lossy(json)
        ),
        Err(error) => error,
    }
}

/// The error converting `msgpack`, which must fail.
fn msgpack_error(msgpack: &[u8]) -> CodecError {
    match msgpack_to_json_string(msgpack) {
        Ok(json) => panic!("{msgpack:02x?} should fail, got {json}"),
        Err(error) => error,
    }
}

fn string(text: &str) -> Value {
    Value::from(text)
}

fn map(entries: &[(&str, Value)]) -> Value {
    Value::Map(
        entries
            .iter()
            .map(|(key, value)| (string(key), value.clone()))
            .collect(),
    )
}

/// `depth` arrays, one inside the other, around `inner`.
fn nested_arrays(depth: usize, inner: &str) -> String {
    format!("{}{inner}{}", "[".repeat(depth), "]".repeat(depth))
}
