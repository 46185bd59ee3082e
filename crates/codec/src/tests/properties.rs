//! Property tests, each bounded (`CASES`, small trees) so the suite runs in seconds: MessagePack
//! and JSON values survive a round trip through the other form, and no input panics.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

use super::*;

/// Cases per property: enough to hit every marker and escape many times over.
const CASES: u32 = 512;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Any map key that has a JSON form.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[a-z$]{0,5}"]
        .prop_filter("reserved key", |key| key != "$bin" && key != "$ext")
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z\"\\\\\u{0}-\u{1f}]{0,40}",
        Just("$bin".to_owned())
    ]
}

fn msgpack_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Nil),
        any::<bool>().prop_map(Value::Boolean),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f32>()
            .prop_filter("finite", |value| value.is_finite())
            .prop_map(Value::F32),
        any::<f64>()
            .prop_filter("finite", |value| value.is_finite())
            .prop_map(Value::F64),
        text().prop_map(Value::from),
        vec(any::<u8>(), 0..40).prop_map(Value::Binary),
        (any::<i8>(), vec(any::<u8>(), 0..20))
            .prop_map(|(ext_type, data)| Value::Ext(ext_type, data)),
    ]
}

/// MessagePack values with a JSON form, up to 4 deep, with arrays past the 15-item fix headers.
fn msgpack_value() -> impl Strategy<Value = Value> {
    let leaf =
        prop_oneof![9 => msgpack_leaf(), 1 => vec(msgpack_leaf(), 14..40).prop_map(Value::Array)];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..8).prop_map(Value::Array),
            vec((key().prop_map(Value::from), inner), 0..8).prop_map(Value::Map),
        ]
    })
}

/// `value` as it comes back from JSON: float 32 widened to float 64.
fn widened(value: Value) -> Value {
    match value {
        Value::F32(float) => Value::F64(f64::from(float)),
        Value::Array(items) => Value::Array(items.into_iter().map(widened).collect()),
        Value::Map(entries) => Value::Map(
            entries
                .into_iter()
                .map(|(key, value)| (key, widened(value)))
                .collect(),
        ),
        other => other,
    }
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<f64>()
            .prop_filter("finite", |value| value.is_finite())
            .prop_map(serde_json::Value::from),
        text().prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..8).prop_map(serde_json::Value::Array),
            vec((key(), inner), 0..8)
                .prop_map(|entries| serde_json::Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// `bytes` with each `(index, byte)` written over it, then cut at `cut`.
fn mutated(mut bytes: Vec<u8>, edits: &[(Index, u8)], cut: Option<Index>) -> Vec<u8> {
    if bytes.is_empty() {
        return bytes;
    }
    for (index, byte) in edits {
        let at = index.index(bytes.len());
        bytes[at] = *byte;
    }
    if let Some(cut) = cut {
        bytes.truncate(cut.index(bytes.len()));
    }
    bytes
}

/// Checks what any input must satisfy: JSON out only from valid MessagePack, and `NoJsonForm`
/// only for valid MessagePack.
fn check_msgpack_input(bytes: &[u8]) -> Result<(), TestCaseError> {
    let valid = validate_msgpack(bytes);
    match msgpack_to_json(bytes) {
        Ok(json) => {
            prop_assert_eq!(valid, Ok(()));
            prop_assert!(
                serde_json::from_slice::<serde_json::Value>(&json).is_ok(),
                "the output is JSON"
            );
        }
        Err(error) if error.is_no_json_form() => prop_assert_eq!(valid, Ok(())),
        Err(error) => prop_assert_eq!(valid, Err(error)),
    }
    Ok(())
}

/// Checks what any JSON input must satisfy: what converts has a JSON form and converts back.
fn check_json_input(json: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(bytes) = json_to_msgpack(json) {
        prop_assert_eq!(validate_msgpack(&bytes), Ok(()));
        let back =
            msgpack_to_json(&bytes).map_err(|error| TestCaseError::fail(error.to_string()))?;
        prop_assert_eq!(json_to_msgpack(&back), Ok(bytes));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn messagepack_survives_json(value in msgpack_value()) {
        let json = msgpack_to_json(&encode(&value)).map_err(|error| TestCaseError::fail(error.to_string()))?;
        let back = json_to_msgpack(&json).map_err(|error| TestCaseError::fail(error.to_string()))?;
        let expected = widened(value);
        prop_assert_eq!(decode(&back), expected.clone());
        prop_assert_eq!(back, encode(&expected), "canonical bytes, the sign of zero included");
    }

    #[test]
    fn json_survives_messagepack(value in json_value()) {
        let text = serde_json::to_vec(&value).expect("a value serializes");
        let bytes = json_to_msgpack(&text).map_err(|error| TestCaseError::fail(error.to_string()))?;
        let back = msgpack_to_json(&bytes).map_err(|error| TestCaseError::fail(error.to_string()))?;
        prop_assert_eq!(serde_json::from_slice::<serde_json::Value>(&back).expect("the output is JSON"), value.clone());
        prop_assert_eq!(&back, &text, "byte for byte what serde_json writes");
        let pretty = serde_json::to_vec_pretty(&value).expect("a value serializes");
        prop_assert_eq!(json_to_msgpack(&pretty), Ok(bytes));
    }

    #[test]
    fn floats_survive_json_bit_for_bit(
        value in prop_oneof![any::<f64>(), any::<i64>().prop_map(|integer| integer as f64)]
            .prop_filter("finite", |value| value.is_finite()),
    ) {
        let bytes = encode(&Value::F64(value));
        let json = msgpack_to_json(&bytes).map_err(|error| TestCaseError::fail(error.to_string()))?;
        prop_assert_eq!(json_to_msgpack(&json), Ok(bytes), "{}", String::from_utf8_lossy(&json));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..256)) {
        check_msgpack_input(&bytes)?;
        check_json_input(&bytes)?;
    }

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        check_json_input(text.as_bytes())?;
        check_msgpack_input(text.as_bytes())?;
    }

    #[test]
    fn mutated_messagepack_never_panics(
        value in msgpack_value(),
        edits in vec((any::<Index>(), any::<u8>()), 0..4),
        cut in proptest::option::of(any::<Index>()),
    ) {
        check_msgpack_input(&mutated(encode(&value), &edits, cut))?;
    }

    #[test]
    fn mutated_json_never_panics(
        value in json_value(),
        edits in vec((any::<Index>(), proptest::sample::select(b"{}[],:\"\\ 0123456789-+.eEtrufalsn$ubx\x01\xff".to_vec())), 0..4),
        cut in proptest::option::of(any::<Index>()),
    ) {
        let text = serde_json::to_vec(&value).expect("a value serializes");
        check_json_input(&mutated(text, &edits, cut))?;
    }
}
