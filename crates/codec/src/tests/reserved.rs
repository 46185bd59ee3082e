//! `$bin` and `$ext`: both directions, and every way the reserved keys can be misused.

use super::*;
use crate::NESTING_DEPTH_MAX;

#[test]
fn bin_takes_the_bin_form_both_ways() {
    assert_eq!(to_msgpack(r#"{"$bin":"AQID"}"#), [0xc4, 0x03, 1, 2, 3]);
    assert_eq!(to_msgpack(r#"{ "$bin" : "" }"#), [0xc4, 0x00]);
    assert_eq!(to_json(&[0xc4, 0x03, 1, 2, 3]), r#"{"$bin":"AQID"}"#);
    assert_eq!(to_json(&[0xc4, 0x00]), r#"{"$bin":""}"#);
    for length in [1, 2, 255, 256, 65_536] {
        let bytes = encode(&Value::Binary(
            (0..length).map(|index| index as u8).collect(),
        ));
        assert_eq!(to_msgpack(&to_json(&bytes)), bytes, "{length}");
    }
}

#[test]
fn reserved_keys_are_recognized_when_escaped() {
    assert_eq!(to_msgpack(r#"{"\u0024bin":"AQID"}"#), [0xc4, 0x03, 1, 2, 3]);
    assert_eq!(to_msgpack(r#"{"$bin":"AQ\u0049D"}"#), [0xc4, 0x03, 1, 2, 3]);
    assert!(matches!(
        json_error(br#"{"a":1,"\u0024ext":2}"#),
        CodecError::ReservedKey { .. }
    ));
}

#[test]
fn ext_takes_the_ext_form_both_ways_with_fields_in_either_order() {
    let expected = encode(&Value::Ext(5, vec![1, 2, 3]));
    assert_eq!(to_msgpack(r#"{"$ext":{"type":5,"data":"AQID"}}"#), expected);
    assert_eq!(
        to_msgpack(r#"{"$ext" : { "data" : "AQID" , "type" : 5 } }"#),
        expected
    );
    assert_eq!(to_json(&expected), r#"{"$ext":{"type":5,"data":"AQID"}}"#);
    for length in [0, 1, 2, 3, 4, 8, 16, 17, 255, 256, 65_536] {
        for ext_type in [i8::MIN, -1, 0, i8::MAX] {
            let bytes = encode(&Value::Ext(ext_type, vec![7; length]));
            assert_eq!(
                to_msgpack(&to_json(&bytes)),
                bytes,
                "type {ext_type}, {length} bytes"
            );
        }
    }
}

#[test]
fn timestamps_are_ext_type_minus_one() {
    let timestamp = [0xd6, 0xff, 0x65, 0x53, 0xf1, 0x00];
    assert_eq!(
        to_json(&timestamp),
        r#"{"$ext":{"type":-1,"data":"ZVPxAA=="}}"#
    );
    assert_eq!(
        to_msgpack(r#"{"$ext":{"type":-1,"data":"ZVPxAA=="}}"#),
        timestamp
    );
}

#[test]
fn reserved_forms_are_leaves_for_the_nesting_bound() {
    let json = nested_arrays(NESTING_DEPTH_MAX, r#"{"$ext":{"type":1,"data":"AQ=="}}"#);
    assert_eq!(to_json(&to_msgpack(&json)), json);
}

#[test]
fn misused_reserved_keys_are_errors() {
    let cases = [
        r#"{"$bin":"AQID","x":1}"#,
        r#"{"x":1,"$bin":"AQID"}"#,
        r#"{"x":1,"$ext":{"type":1,"data":""}}"#,
        r#"{"$bin":"AQID","$bin":"AQID"}"#,
        r#"{"$bin":5}"#,
        r#"{"$bin":null}"#,
        r#"{"$bin":["AQID"]}"#,
        r#"{"$bin":"AQI"}"#,
        r#"{"$bin":"AQJ="}"#,
        r#"{"$bin":"AQ-_"}"#,
        r#"{"$bin":"AQID "}"#,
        r#"{"$bin":"A==="}"#,
        r#"{"$ext":5}"#,
        r#"{"$ext":"AQID"}"#,
        r#"{"$ext":{}}"#,
        r#"{"$ext":{"type":1}}"#,
        r#"{"$ext":{"data":"AQ=="}}"#,
        r#"{"$ext":{"type":1,"data":"AQ==","x":1}}"#,
        r#"{"$ext":{"x":1,"type":1,"data":"AQ=="}}"#,
        r#"{"$ext":{"type":1,"type":2}}"#,
        r#"{"$ext":{"data":"AQ==","data":"AQ=="}}"#,
        r#"{"$ext":{"type":128,"data":""}}"#,
        r#"{"$ext":{"type":-129,"data":""}}"#,
        r#"{"$ext":{"type":1.0,"data":""}}"#,
        r#"{"$ext":{"type":1e0,"data":""}}"#,
        r#"{"$ext":{"type":"1","data":""}}"#,
        r#"{"$ext":{"type":null,"data":""}}"#,
        r#"{"$ext":{"type":1,"data":5}}"#,
        r#"{"$ext":{"type":1,"data":"AQ="}}"#,
        r#"{"$ext":{"type":1,"data":""},"x":1}"#,
    ];
    for case in cases {
        let error = json_error(case.as_bytes());
        assert!(
            matches!(error, CodecError::ReservedKey { .. }),
            "{case}: {error:?}"
        );
    }
}

#[test]
fn reserved_forms_still_need_well_formed_json() {
    for case in [
        r#"{"$bin":"AQID""#,
        r#"{"$bin":"AQID" x}"#,
        r#"{"$bin" "AQID"}"#,
        r#"{"$ext":{"type":-,"data":""}}"#,
    ] {
        let error = json_error(case.as_bytes());
        assert!(
            matches!(error, CodecError::InvalidJson { .. }),
            "{case}: {error:?}"
        );
    }
}
