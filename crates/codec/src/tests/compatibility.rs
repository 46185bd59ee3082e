//! Byte-for-byte agreement with what entities write and read: `rmp_serde::to_vec_named` for serde
//! types, and `rmpv` for values.

use serde::{Deserialize, Serialize};

use super::*;

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Msg {
    Add(i64),
    Get,
    Transfer { to: String, amount: u64 },
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Account {
    owner: String,
    balance: i64,
    limits: Vec<u32>,
    #[serde(with = "serde_bytes")]
    key: Vec<u8>,
    memo: Option<String>,
    ratio: f64,
    history: Vec<Msg>,
    nested: Vec<Vec<i8>>,
}

fn account() -> Account {
    Account {
        owner: "ada \"the\" countess\n".to_owned(),
        balance: -40_000_000_000,
        limits: (0..20).map(|index| index * 1_000).collect(),
        key: (0..=255).collect(),
        memo: None,
        ratio: 0.25,
        history: vec![
            Msg::Add(-5),
            Msg::Get,
            Msg::Transfer {
                to: "bob".to_owned(),
                amount: u64::MAX,
            },
        ],
        nested: vec![vec![-128, 127], vec![]],
    }
}

fn rmp_serde_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(value).expect("the value serializes")
}

#[test]
fn serde_messages_survive_json_byte_for_byte() {
    let messages = [
        Msg::Add(5),
        Msg::Add(i64::MIN),
        Msg::Get,
        Msg::Transfer {
            to: "é".to_owned(),
            amount: 300,
        },
    ];
    for message in &messages {
        let bytes = rmp_serde_bytes(message);
        assert_eq!(to_msgpack(&to_json(&bytes)), bytes, "{message:?}");
    }
    let bytes = rmp_serde_bytes(&account());
    assert_eq!(to_msgpack(&to_json(&bytes)), bytes);
    assert_eq!(
        rmp_serde::from_slice::<Account>(&to_msgpack(&to_json(&bytes))).expect("reads back"),
        account()
    );
}

#[test]
fn json_a_client_writes_is_what_rmp_serde_writes() {
    assert_eq!(to_msgpack(r#"{"Add":5}"#), rmp_serde_bytes(&Msg::Add(5)));
    assert_eq!(to_msgpack(r#""Get""#), rmp_serde_bytes(&Msg::Get));
    let transfer = Msg::Transfer {
        to: "bob".to_owned(),
        amount: 7,
    };
    let bytes = to_msgpack(r#"{"Transfer": {"to": "bob", "amount": 7}}"#);
    assert_eq!(bytes, rmp_serde_bytes(&transfer));
    assert_eq!(
        rmp_serde::from_slice::<Msg>(&bytes).expect("reads"),
        transfer
    );
}

#[test]
fn output_is_what_rmpv_writes_for_the_decoded_value() {
    let json = r#"{"list":[1,-1,300,-300,70000,1.5,"s",null,true,{"$bin":"AAEC"}],"empty":{},"big":18446744073709551615}"#;
    let bytes = to_msgpack(json);
    assert_eq!(encode(&decode(&bytes)), bytes);
}
