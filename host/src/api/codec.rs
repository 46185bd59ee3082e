//! JSON at the edge, MessagePack inside: lossless conversion between the two.
//!
//! JSON objects become MessagePack maps with string keys (serde's named-field form), numbers
//! keep their integer or float kind, and MessagePack `bin` becomes a JSON array of byte values
//! (which the SDK's byte fields accept back).

use serde_json::{Map, Number, Value as Json};

/// Why a conversion failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodecError {
    /// The bytes are not valid MessagePack.
    #[error("not valid MessagePack: {0}")]
    InvalidMessagePack(String),
    /// The MessagePack value has no JSON form (an extension type, a NaN float).
    #[error("cannot be shown as JSON: {0}")]
    NoJsonForm(String),
}

/// Encodes a JSON value as MessagePack.
///
/// ```
/// use tessera_host::api::codec::{json_to_msgpack, msgpack_to_json};
/// let json = serde_json::json!({"Add": 5});
/// let bytes = json_to_msgpack(&json);
/// assert_eq!(msgpack_to_json(&bytes).unwrap(), json);
/// ```
pub fn json_to_msgpack(json: &Json) -> Vec<u8> {
    let value = json_to_value(json);
    let mut bytes = Vec::new();
    rmpv::encode::write_value(&mut bytes, &value).expect("invariant: writing to a Vec cannot fail");
    bytes
}

/// Decodes MessagePack bytes into JSON.
pub fn msgpack_to_json(bytes: &[u8]) -> Result<Json, CodecError> {
    let mut reader = bytes;
    let value = rmpv::decode::read_value(&mut reader)
        .map_err(|error| CodecError::InvalidMessagePack(error.to_string()))?;
    if !reader.is_empty() {
        return Err(CodecError::InvalidMessagePack(format!(
            "{} trailing bytes after the value",
            reader.len()
        )));
    }
    value_to_json(&value)
}

fn json_to_value(json: &Json) -> rmpv::Value {
    match json {
        Json::Null => rmpv::Value::Nil,
        Json::Bool(value) => rmpv::Value::Boolean(*value),
        Json::Number(number) => {
            if let Some(value) = number.as_u64() {
                rmpv::Value::from(value)
            } else if let Some(value) = number.as_i64() {
                rmpv::Value::from(value)
            } else {
                rmpv::Value::F64(number.as_f64().unwrap_or(0.0))
            }
        }
        Json::String(text) => rmpv::Value::from(text.as_str()),
        Json::Array(items) => rmpv::Value::Array(items.iter().map(json_to_value).collect()),
        Json::Object(map) => rmpv::Value::Map(
            map.iter()
                .map(|(key, value)| (rmpv::Value::from(key.as_str()), json_to_value(value)))
                .collect(),
        ),
    }
}

fn value_to_json(value: &rmpv::Value) -> Result<Json, CodecError> {
    Ok(match value {
        rmpv::Value::Nil => Json::Null,
        rmpv::Value::Boolean(value) => Json::Bool(*value),
        rmpv::Value::Integer(integer) => {
            if let Some(value) = integer.as_u64() {
                Json::from(value)
            } else if let Some(value) = integer.as_i64() {
                Json::from(value)
            } else {
                return Err(CodecError::NoJsonForm(format!("integer {integer}")));
            }
        }
        rmpv::Value::F32(value) => float(f64::from(*value))?,
        rmpv::Value::F64(value) => float(*value)?,
        rmpv::Value::String(text) => match text.as_str() {
            Some(text) => Json::String(text.to_string()),
            None => return Err(CodecError::NoJsonForm("a string that is not UTF-8".into())),
        },
        rmpv::Value::Binary(bytes) => Json::Array(bytes.iter().map(|&b| Json::from(b)).collect()),
        rmpv::Value::Array(items) => {
            Json::Array(items.iter().map(value_to_json).collect::<Result<_, _>>()?)
        }
        rmpv::Value::Map(entries) => {
            let mut map = Map::with_capacity(entries.len());
            for (key, value) in entries {
                let key = match key {
                    rmpv::Value::String(text) => text.as_str().unwrap_or_default().to_string(),
                    other => value_to_json(other)?.to_string(),
                };
                map.insert(key, value_to_json(value)?);
            }
            Json::Object(map)
        }
        rmpv::Value::Ext(kind, _) => {
            return Err(CodecError::NoJsonForm(format!("extension type {kind}")));
        }
    })
}

fn float(value: f64) -> Result<Json, CodecError> {
    Number::from_f64(value)
        .map(Json::Number)
        .ok_or_else(|| CodecError::NoJsonForm(format!("float {value}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_json_kind() {
        let json = serde_json::json!({
            "null": null, "yes": true, "small": 5, "negative": -7, "big": u64::MAX,
            "float": 1.5, "text": "héllo", "list": [1, "two", [3]], "Add": {"n": 1}
        });
        assert_eq!(msgpack_to_json(&json_to_msgpack(&json)).unwrap(), json);
    }

    #[test]
    fn serde_enum_forms_match_what_rmp_serde_writes() {
        #[derive(serde::Serialize)]
        enum Msg {
            Add(i64),
            Get,
        }
        let add = rmp_serde::to_vec_named(&Msg::Add(5)).unwrap();
        assert_eq!(
            msgpack_to_json(&add).unwrap(),
            serde_json::json!({"Add": 5})
        );
        let get = rmp_serde::to_vec_named(&Msg::Get).unwrap();
        assert_eq!(msgpack_to_json(&get).unwrap(), serde_json::json!("Get"));
    }

    #[test]
    fn binary_becomes_a_byte_array_and_garbage_is_refused() {
        let bytes = rmp_serde::to_vec_named(&serde_bytes::ByteBuf::from(vec![1u8, 2])).unwrap();
        assert_eq!(msgpack_to_json(&bytes).unwrap(), serde_json::json!([1, 2]));
        assert!(matches!(
            msgpack_to_json(&[0xa5, b'a']),
            Err(CodecError::InvalidMessagePack(_))
        ));
        assert!(
            msgpack_to_json(&[0x01, 0x02]).is_err(),
            "trailing bytes are refused"
        );
    }
}
