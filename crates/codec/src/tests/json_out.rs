//! MessagePack to JSON text, and validation: scalars, floats, strings, keys, malformed input and
//! nesting.

use std::time::{Duration, Instant};

use super::*;
use crate::NESTING_DEPTH_MAX;

fn no_json_form(msgpack: &[u8]) -> bool {
    msgpack_error(msgpack).is_no_json_form()
}

fn assert_invalid_msgpack(msgpack: &[u8]) {
    let error = msgpack_error(msgpack);
    assert!(
        matches!(error, CodecError::InvalidMessagePack { .. }),
        "{msgpack:02x?}: {error:?}"
    );
    let error = validate_msgpack(msgpack).expect_err("validation agrees");
    assert!(
        matches!(error, CodecError::InvalidMessagePack { .. }),
        "{msgpack:02x?}: {error:?}"
    );
}

#[test]
fn scalars_are_written_compactly() {
    let values = [
        Value::Nil,
        Value::from(true),
        Value::from(false),
        Value::from(0),
        Value::from(-1),
    ];
    let extremes = [Value::from(u64::MAX), Value::from(i64::MIN), string("x")];
    let array = Value::Array(values.into_iter().chain(extremes).collect());
    assert_eq!(
        to_json(&encode(&array)),
        r#"[null,true,false,0,-1,18446744073709551615,-9223372036854775808,"x"]"#
    );
}

#[test]
fn non_canonical_integers_read_as_their_value() {
    assert_eq!(to_json(&[0xcf, 0, 0, 0, 0, 0, 0, 0, 5]), "5");
    assert_eq!(to_json(&[0xd3, 0, 0, 0, 0, 0, 0, 0, 5]), "5");
    assert_eq!(to_json(&[0xd0, 0x05]), "5");
    assert_eq!(
        to_msgpack(&to_json(&[0xd3, 0, 0, 0, 0, 0, 0, 0, 5])),
        [0x05],
        "canonical on the way back"
    );
}

#[test]
fn float64_is_written_shortest_and_always_as_a_float() {
    let cases = [
        (1.0, "1.0"),
        (0.1, "0.1"),
        (-0.0, "-0.0"),
        (1e300, "1e+300"),
        (1e16, "1e+16"),
        (1.5e-7, "1.5e-7"),
        (123.0, "123.0"),
    ];
    for (value, text) in cases {
        assert_eq!(to_json(&encode(&Value::F64(value))), text);
    }
    for value in [
        5e-324,
        f64::MAX,
        f64::MIN_POSITIVE,
        -1.5e-7,
        9_007_199_254_740_994.0,
    ] {
        let bytes = encode(&Value::F64(value));
        assert_eq!(
            to_msgpack(&to_json(&bytes)),
            bytes,
            "{value:e} comes back bit for bit"
        );
    }
}

#[test]
fn float32_is_written_as_its_exact_value_and_returns_as_float64() {
    let json = to_json(&encode(&Value::F32(0.1)));
    assert_eq!(json, "0.10000000149011612");
    assert_eq!(to_msgpack(&json), encode(&Value::F64(f64::from(0.1_f32))));
    assert_eq!(to_json(&encode(&Value::F32(1.5))), "1.5");
}

#[test]
fn nan_and_infinity_have_no_json_form() {
    let values = [
        Value::F64(f64::NAN),
        Value::F64(f64::INFINITY),
        Value::F64(f64::NEG_INFINITY),
    ];
    for value in values
        .into_iter()
        .chain([Value::F32(f32::NAN), Value::F32(f32::INFINITY)])
    {
        assert!(no_json_form(&encode(&value)), "{value}");
    }
}

#[test]
fn strings_escape_as_serde_json_does() {
    let text: String = (0..=0x7f_u8)
        .map(char::from)
        .chain("é😀\u{2028}/".chars())
        .collect();
    let expected = serde_json::to_string(&text).expect("a string serializes");
    assert_eq!(to_json(&encode(&string(&text))), expected);
    assert!(expected.contains(r#"\u0001\u0002"#) && expected.contains(r#"\b\t\n\u000b\f\r"#));
}

#[test]
fn strings_that_are_not_utf8_have_no_json_form() {
    assert_eq!(
        msgpack_error(&[0xa1, 0xff]),
        CodecError::NoJsonForm {
            offset: 0,
            what: "a string that is not valid UTF-8",
        }
    );
    assert!(
        no_json_form(&[0x81, 0xa2, 0xc3, 0x28, 0x01]),
        "as a key too"
    );
}

#[test]
fn map_keys_must_be_strings() {
    assert!(no_json_form(&[0x81, 0x01, 0x02]));
    assert!(no_json_form(&[0x81, 0xc0, 0x02]));
    assert!(no_json_form(&[0x81, 0x90, 0x02]));
    assert!(
        no_json_form(&[0x81, 0xc4, 0x01, b'a', 0x02]),
        "bin keys are not strings"
    );
}

#[test]
fn reserved_map_keys_have_no_json_form() {
    assert!(no_json_form(&encode(&map(&[("$bin", Value::from(1))]))));
    assert!(no_json_form(&encode(&map(&[
        ("a", Value::from(1)),
        ("$ext", Value::from(2))
    ]))));
    let nested = Value::Array(vec![map(&[("$bin", string("AQID"))])]);
    assert!(no_json_form(&encode(&nested)));
    assert_eq!(
        to_json(&encode(&Value::Array(vec![string("$bin")]))),
        r#"["$bin"]"#,
        "values are fine"
    );
    assert_eq!(
        to_json(&encode(&map(&[("$bins", Value::Nil)]))),
        r#"{"$bins":null}"#
    );
}

#[test]
fn malformed_messagepack_is_invalid() {
    let cases: [&[u8]; 12] = [
        &[],
        &[0xc1],
        &[0xa3, b'a'],
        &[0xcb, 0],
        &[0x92, 0x01],
        &[0x81, 0xa1, b'a'],
        &[0xc7],
        &[0xd4],
        &[0xd4, 0x01],
        &[0x01, 0x02],
        &[0x91, 0xc1],
        &[0xdc, 0x00],
    ];
    for case in cases {
        assert_invalid_msgpack(case);
    }
}

#[test]
fn huge_declared_lengths_fail_fast() {
    let started = Instant::now();
    let headers: [&[u8]; 6] = [
        &[0xdb, 0xff, 0xff, 0xff, 0xff],
        &[0xc6, 0xff, 0xff, 0xff, 0xff],
        &[0xc9, 0xff, 0xff, 0xff, 0xff, 0x01],
        &[0xdd, 0xff, 0xff, 0xff, 0xff],
        &[0xdf, 0xff, 0xff, 0xff, 0xff],
        &[0x91, 0x91, 0xdd, 0x7f, 0xff, 0xff, 0xff],
    ];
    for header in headers {
        let input = [header, b"0123456789"].concat();
        assert_invalid_msgpack(&input);
    }
    let reason = "a count claims more items than bytes remain";
    let array = [&[0xdd, 0xff, 0xff, 0xff, 0xff][..], b"0123456789"].concat();
    assert_eq!(
        msgpack_error(&array),
        CodecError::InvalidMessagePack { offset: 0, reason }
    );
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "no work in proportion to a declared length"
    );
}

#[test]
fn malformed_input_is_reported_before_a_missing_json_form() {
    assert_invalid_msgpack(&[0x82, 0x01, 0x02, 0xa3, b'a']);
    assert_invalid_msgpack(&[0xa1, 0xff, 0x00]);
    assert_invalid_msgpack(&[0x92, 0xca, 0x7f, 0xc0, 0x00, 0x00]);
}

#[test]
fn nesting_up_to_the_bound_is_accepted() {
    let arrays = [vec![0x91; NESTING_DEPTH_MAX], vec![0xc0]].concat();
    assert_eq!(to_json(&arrays), nested_arrays(NESTING_DEPTH_MAX, "null"));
    assert_eq!(validate_msgpack(&arrays), Ok(()));
}

#[test]
fn nesting_past_the_bound_is_too_deep() {
    let arrays = [vec![0x91; NESTING_DEPTH_MAX + 1], vec![0xc0]].concat();
    assert_eq!(
        msgpack_error(&arrays),
        CodecError::TooDeep {
            offset: NESTING_DEPTH_MAX
        }
    );
    assert_eq!(
        validate_msgpack(&arrays),
        Err(CodecError::TooDeep {
            offset: NESTING_DEPTH_MAX
        })
    );
    let maps = [[0x81, 0xa1, b'a'].repeat(NESTING_DEPTH_MAX + 1), vec![0xc0]].concat();
    assert!(matches!(msgpack_error(&maps), CodecError::TooDeep { .. }));
    assert!(matches!(
        validate_msgpack(&maps),
        Err(CodecError::TooDeep { .. })
    ));
    let keys = [[0x81, 0x81].repeat(NESTING_DEPTH_MAX), vec![0xc0, 0xc0]].concat();
    assert!(
        matches!(validate_msgpack(&keys), Err(CodecError::TooDeep { .. })),
        "containers as keys nest too"
    );
}

#[test]
fn hostile_nesting_fails_without_overflowing_the_stack() {
    let arrays = [vec![0x91; 1_000_000], vec![0xc0]].concat();
    assert!(matches!(msgpack_error(&arrays), CodecError::TooDeep { .. }));
    assert!(matches!(
        validate_msgpack(&arrays),
        Err(CodecError::TooDeep { .. })
    ));
}

#[test]
fn validation_does_not_require_a_json_form() {
    let cases: [&[u8]; 4] = [
        &[0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0],
        &[0x81, 0x01, 0x02],
        &[0xa1, 0xff],
        &[0x81, 0xa4, b'$', b'b', b'i', b'n', 0x01],
    ];
    for case in cases {
        assert_eq!(validate_msgpack(case), Ok(()), "{case:02x?}");
        assert!(no_json_form(case));
    }
}

#[test]
fn no_json_form_is_told_apart_from_bad_input() {
    assert!(msgpack_error(&[0x81, 0x01, 0x02]).is_no_json_form());
    assert!(!msgpack_error(&[0x81, 0x01]).is_no_json_form());
    assert!(!json_error(b"{").is_no_json_form());
}

#[test]
fn json_text_and_string_forms_agree() {
    let bytes = encode(&map(&[(
        "a",
        Value::Array(vec![Value::from(1), string("é")]),
    )]));
    let json = msgpack_to_json(&bytes).expect("converts");
    assert_eq!(String::from_utf8(json).expect("UTF-8"), to_json(&bytes));
}
