//! The one encoding across the wasm boundary: MessagePack with named fields (rmp-serde).

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Encodes `value` as MessagePack with named struct fields; the error is a human reason.
pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, String> {
    rmp_serde::to_vec_named(value).map_err(|error| error.to_string())
}

/// Decodes MessagePack into `T`; the error is a human reason.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    rmp_serde::from_slice(bytes).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum Msg {
        Add(i64),
        Get,
        Transfer { to: String, amount: u64 },
    }

    /// `{"Add":5}` as a JSON-to-MessagePack converter writes it: fixmap(1), fixstr, fixint.
    const ADD_5: &[u8] = b"\x81\xa3Add\x05";
    /// `"Get"`: a fixstr.
    const GET: &[u8] = b"\xa3Get";
    /// `{"Transfer":{"to":"bob","amount":7}}`.
    const TRANSFER: &[u8] = b"\x81\xa8Transfer\x82\xa2to\xa3bob\xa6amount\x07";

    #[test]
    fn client_shapes_decode_into_default_serde_enums() {
        assert_eq!(decode::<Msg>(ADD_5), Ok(Msg::Add(5)));
        assert_eq!(decode::<Msg>(GET), Ok(Msg::Get));
        assert_eq!(
            decode::<Msg>(TRANSFER),
            Ok(Msg::Transfer {
                to: "bob".into(),
                amount: 7
            })
        );
    }

    #[test]
    fn encoding_matches_the_client_shapes() {
        assert_eq!(encode(&Msg::Add(5)).unwrap(), ADD_5);
        assert_eq!(encode(&Msg::Get).unwrap(), GET);
        assert_eq!(
            encode(&Msg::Transfer {
                to: "bob".into(),
                amount: 7
            })
            .unwrap(),
            TRANSFER
        );
    }

    #[test]
    fn structs_use_named_fields_and_bytes_use_bin() {
        #[derive(Serialize)]
        struct Blob {
            #[serde(with = "serde_bytes")]
            data: Vec<u8>,
        }
        assert_eq!(
            encode(&Blob { data: vec![1, 2] }).unwrap(),
            b"\x81\xa4data\xc4\x02\x01\x02"
        );
    }

    #[test]
    fn garbage_does_not_decode() {
        assert!(decode::<Msg>(b"\xc1").is_err());
        assert!(decode::<Msg>(b"\xa4Nope").is_err());
    }
}
