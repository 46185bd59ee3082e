//! JSON text to MessagePack: scalars, numbers, strings, containers, text and nesting rules.

use super::*;
use crate::NESTING_DEPTH_MAX;

fn sint(value: i64) -> Vec<u8> {
    let mut bytes = Vec::new();
    rmp::encode::write_sint(&mut bytes, value).expect("writing into a Vec never fails");
    bytes
}

fn float64(value: f64) -> Vec<u8> {
    let mut bytes = vec![0xcb];
    bytes.extend_from_slice(&value.to_be_bytes());
    bytes
}

fn assert_invalid_json(json: &[u8], offset: usize) {
    match json_error(json) {
        CodecError::InvalidJson { offset: found, .. } if found == offset => {}
        other => panic!(
            "{:?}: expected InvalidJson at {offset}, got {other:?}",
            String::from_utf8_lossy(json)
        ),
    }
}

#[test]
fn literals_map_one_to_one() {
    assert_eq!(to_msgpack("null"), [0xc0]);
    assert_eq!(to_msgpack("true"), [0xc3]);
    assert_eq!(to_msgpack("false"), [0xc2]);
}

#[test]
fn integers_take_the_smallest_encoding_rmp_chooses() {
    let boundaries = [
        0,
        1,
        127,
        128,
        255,
        256,
        65_535,
        65_536,
        4_294_967_295,
        4_294_967_296,
        i64::MAX,
    ];
    let negatives = [
        -1,
        -32,
        -33,
        -128,
        -129,
        -32_768,
        -32_769,
        -2_147_483_648,
        -2_147_483_649,
        i64::MIN,
    ];
    for value in boundaries.into_iter().chain(negatives) {
        assert_eq!(to_msgpack(&value.to_string()), sint(value), "{value}");
    }
    let mut max = Vec::new();
    rmp::encode::write_uint(&mut max, u64::MAX).expect("writing into a Vec never fails");
    assert_eq!(to_msgpack("18446744073709551615"), max);
}

#[test]
fn integers_beyond_64_bits_are_errors_not_floats() {
    for literal in [
        "18446744073709551616",
        "-9223372036854775809",
        "100000000000000000000000",
    ] {
        let error = json_error(literal.as_bytes());
        assert_eq!(
            error,
            CodecError::IntegerOutOfRange {
                offset: 0,
                literal: literal.to_owned()
            }
        );
    }
    let CodecError::IntegerOutOfRange { offset, literal } =
        json_error(b"[1, 99999999999999999999]")
    else {
        panic!("expected IntegerOutOfRange");
    };
    assert_eq!((offset, literal.as_str()), (4, "99999999999999999999"));
}

#[test]
fn long_literals_are_cut_short_in_errors() {
    let literal = "9".repeat(10_000);
    let CodecError::IntegerOutOfRange {
        literal: quoted, ..
    } = json_error(literal.as_bytes())
    else {
        panic!("expected IntegerOutOfRange");
    };
    assert_eq!(quoted, format!("{}…", "9".repeat(64)));
}

#[test]
fn minus_zero_is_the_integer_zero() {
    assert_eq!(to_msgpack("-0"), [0x00]);
}

#[test]
fn a_fraction_or_exponent_makes_a_float64() {
    assert_eq!(to_msgpack("1.0"), float64(1.0));
    assert_eq!(to_msgpack("1e2"), float64(100.0));
    assert_eq!(to_msgpack("1E+2"), float64(100.0));
    assert_eq!(to_msgpack("-2.5e-3"), float64(-0.0025));
    assert_eq!(to_msgpack("0.1"), float64(0.1));
    assert_eq!(
        to_msgpack("-0.0"),
        float64(-0.0),
        "the sign of zero is kept"
    );
    assert_eq!(
        to_msgpack("1e-400"),
        float64(0.0),
        "underflow rounds to zero like any parser"
    );
}

#[test]
fn floats_beyond_f64_are_errors() {
    for literal in ["1e400", "-1e400", "1.5e309"] {
        let error = json_error(literal.as_bytes());
        assert_eq!(
            error,
            CodecError::FloatOutOfRange {
                offset: 0,
                literal: literal.to_owned()
            }
        );
    }
}

#[test]
fn malformed_numbers_are_rejected() {
    let cases = [
        "01", "00", "1.", ".5", "+1", "-", "1e", "1e+", "--1", "0x10", "1.e5", "-a",
    ];
    for case in cases.into_iter().chain(["NaN", "Infinity", "-Infinity"]) {
        assert!(
            matches!(json_error(case.as_bytes()), CodecError::InvalidJson { .. }),
            "{case}"
        );
    }
}

#[test]
fn escapes_are_resolved() {
    let json = r#""\" \\ \/ \b \f \n \r \t \u00e9 \u20AC \u0000""#;
    assert_eq!(
        to_msgpack(json),
        encode(&string("\" \\ / \u{8} \u{c} \n \r \t é € \0"))
    );
}

#[test]
fn surrogate_pairs_become_one_character() {
    assert_eq!(to_msgpack(r#""\ud83d\ude00""#), encode(&string("😀")));
    assert_eq!(to_msgpack(r#""a\uD83D\uDE00b""#), encode(&string("a😀b")));
}

#[test]
fn lone_surrogates_are_rejected_at_their_offset() {
    assert_invalid_json(br#"["\ud83d"]"#, 2);
    assert_invalid_json(br#""\ude00""#, 1);
    assert_invalid_json(br#""ab\ud83d\u0041""#, 3);
    assert_invalid_json(br#""\ud83dx""#, 1);
    assert_invalid_json(br#""\ud83d\n""#, 1);
}

#[test]
fn control_characters_in_strings_are_rejected() {
    assert_invalid_json(b"\"a\x01b\"", 2);
    assert_invalid_json(b"[\"\t\"]", 2);
    assert_invalid_json(b"\"\\n\n\"", 3);
    assert_eq!(
        to_msgpack("\"\u{7f}\""),
        encode(&string("\u{7f}")),
        "DEL is not a control character in JSON"
    );
}

#[test]
fn invalid_utf8_is_rejected_at_its_offset() {
    assert_invalid_json(b"\"ab\xff\"", 3);
    assert_invalid_json(b"[\"\xc3\"]", 2);
    assert_invalid_json(b"\"\xc0\xaf\"", 1);
    assert_invalid_json(b"\"\xed\xa0\x80\"", 1);
    assert_invalid_json(b"\"\\n\xff\"", 3);
    assert_invalid_json(b"\xff", 0);
    assert_invalid_json(b"[1,\xc3\xa9]", 3);
}

#[test]
fn invalid_escapes_are_rejected() {
    assert_invalid_json(br#""\x""#, 1);
    assert_invalid_json(br#""ab\u12""#, 3);
    assert_invalid_json(br#""\u12g4""#, 1);
    assert_invalid_json(br#""\"#, 1);
    assert_invalid_json(br#"["abc"#, 1);
}

#[test]
fn string_headers_are_minimal() {
    for length in [0, 31, 32, 255, 256, 65_535, 65_536] {
        let text = "x".repeat(length);
        assert_eq!(
            to_msgpack(&format!("\"{text}\"")),
            encode(&string(&text)),
            "{length}"
        );
        let escaped = "\\n".repeat(length);
        assert_eq!(
            to_msgpack(&format!("\"{escaped}\"")),
            encode(&string(&"\n".repeat(length))),
            "{length}"
        );
    }
}

#[test]
fn arrays_and_objects_map_one_to_one() {
    let json = r#"{"a":[1,{"b":null}],"c":{},"d":[]}"#;
    let inner = Value::Array(vec![Value::from(1), map(&[("b", Value::Nil)])]);
    let expected = map(&[("a", inner), ("c", map(&[])), ("d", Value::Array(vec![]))]);
    assert_eq!(to_msgpack(json), encode(&expected));
}

#[test]
fn container_headers_are_minimal_at_every_boundary() {
    for count in [0, 1, 15, 16, 17, 65_535, 65_536] {
        let items = vec!["0"; count].join(",");
        assert_eq!(
            to_msgpack(&format!("[{items}]")),
            encode(&Value::Array(vec![Value::from(0); count]))
        );
        let keys: Vec<String> = (0..count).map(|index| index.to_string()).collect();
        let entries: Vec<String> = keys.iter().map(|key| format!("\"{key}\":0")).collect();
        let expected = Value::Map(
            keys.iter()
                .map(|key| (string(key), Value::from(0)))
                .collect(),
        );
        assert_eq!(
            to_msgpack(&format!("{{{}}}", entries.join(","))),
            encode(&expected),
            "{count}"
        );
    }
}

#[test]
fn patched_headers_inside_patched_containers_stay_in_place() {
    let big = Value::Array((0..20).map(Value::from).collect());
    let expected = Value::Array(vec![
        big.clone(),
        map(&[("k", big.clone())]),
        Value::Array(vec![big; 17]),
    ]);
    let json = to_json(&encode(&expected));
    assert_eq!(to_msgpack(&json), encode(&expected));
}

#[test]
fn key_order_and_duplicate_keys_are_kept() {
    let expected = map(&[
        ("b", Value::from(1)),
        ("a", Value::from(2)),
        ("b", Value::from(3)),
    ]);
    assert_eq!(to_msgpack(r#"{"b":1,"a":2,"b":3}"#), encode(&expected));
}

#[test]
fn whitespace_around_tokens_is_allowed() {
    let spaced = " \t\n\r{ \"a\" : [ 1 , 2 ] ,\n\"b\"\t:\rtrue }\r\n ";
    assert_eq!(to_msgpack(spaced), to_msgpack(r#"{"a":[1,2],"b":true}"#));
}

#[test]
fn whitespace_outside_rfc_8259_is_rejected() {
    for json in ["\u{c}1", "\u{a0}1", "\u{feff}1", "[1,\u{b}2]", "1\u{2028}"] {
        assert!(
            matches!(json_error(json.as_bytes()), CodecError::InvalidJson { .. }),
            "{json:?}"
        );
    }
}

#[test]
fn exactly_one_value_is_required() {
    assert_invalid_json(b"", 0);
    assert_invalid_json(b"  \n", 3);
    assert_invalid_json(b"1 2", 2);
    assert_invalid_json(b"[1] x", 4);
    assert_invalid_json(b"{}{}", 2);
    assert_invalid_json(b"nullx", 4);
    assert_invalid_json(b"tru", 0);
    assert_invalid_json(b"]", 0);
}

#[test]
fn malformed_containers_are_rejected() {
    assert_invalid_json(b"[1,]", 3);
    assert_invalid_json(b"[,1]", 1);
    assert_invalid_json(b"[1 2]", 3);
    assert_invalid_json(br#"{"a":1,}"#, 7);
    assert_invalid_json(b"{,}", 1);
    assert_invalid_json(br#"{"a" 1}"#, 5);
    assert_invalid_json(b"{1:2}", 1);
    assert_invalid_json(br#"{"a":1 "b":2}"#, 7);
    assert_invalid_json(b"[", 1);
    assert_invalid_json(br#"{"a":"#, 5);
    assert_invalid_json(b"[1}", 2);
}

#[test]
fn nesting_up_to_the_bound_is_accepted() {
    let arrays = nested_arrays(NESTING_DEPTH_MAX, "");
    assert_eq!(to_msgpack(&arrays).len(), NESTING_DEPTH_MAX);
    let objects = format!(
        "{}{{}}{}",
        r#"{"a":"#.repeat(NESTING_DEPTH_MAX - 1),
        "}".repeat(NESTING_DEPTH_MAX - 1)
    );
    assert_eq!(to_json(&to_msgpack(&objects)), objects);
}

#[test]
fn nesting_past_the_bound_is_too_deep() {
    let arrays = nested_arrays(NESTING_DEPTH_MAX + 1, "");
    assert_eq!(
        json_error(arrays.as_bytes()),
        CodecError::TooDeep {
            offset: NESTING_DEPTH_MAX
        }
    );
    let objects = format!(
        "{}{{}}{}",
        r#"{"a":"#.repeat(NESTING_DEPTH_MAX),
        "}".repeat(NESTING_DEPTH_MAX)
    );
    assert!(matches!(
        json_error(objects.as_bytes()),
        CodecError::TooDeep { .. }
    ));
    let keyed = format!(
        "{}1{}",
        r#"{"a":"#.repeat(NESTING_DEPTH_MAX + 1),
        "}".repeat(NESTING_DEPTH_MAX + 1)
    );
    assert!(matches!(
        json_error(keyed.as_bytes()),
        CodecError::TooDeep { .. }
    ));
}

#[test]
fn hostile_nesting_fails_without_overflowing_the_stack() {
    let arrays = "[".repeat(1_000_000);
    assert!(matches!(
        json_error(arrays.as_bytes()),
        CodecError::TooDeep { .. }
    ));
    let objects = r#"{"a":"#.repeat(1_000_000);
    assert!(matches!(
        json_error(objects.as_bytes()),
        CodecError::TooDeep { .. }
    ));
}
