//! What `GET /v1/entities/{type}/{id}/state` answers, as types: [`EntityState`] and its
//! [`StateEntry`]s.

use serde::{Deserialize, Serialize};

/// An entity's committed state, as the node owning its shard holds it.
///
/// ```
/// let state: tessera_client::EntityState = serde_json::from_str(
///     r#"{"type":"counter","id":"c1","entries":[{"key":"value","value":3}],"bytes_total":6}"#,
/// )?;
/// assert_eq!(state.entries[0].value, tessera_client::StateValue::Json(serde_json::json!(3)));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntityState {
    /// The entity type.
    #[serde(rename = "type")]
    pub entity_type: String,
    /// The entity id.
    pub id: String,
    /// Its committed keys, in key order.
    pub entries: Vec<StateEntry>,
    /// Keys plus values, in bytes: what the `entity_state_bytes_max` quota is checked against.
    pub bytes_total: u64,
}

/// One committed key and its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateEntry {
    /// The state key.
    pub key: String,
    /// The value.
    #[serde(flatten)]
    pub value: StateValue,
}

/// A state value: its JSON form when it is MessagePack with one (what the SDK's `ctx.put`
/// writes), else its bytes in standard base64.
///
/// ```
/// use tessera_client::StateValue;
/// let value: StateValue = serde_json::from_str(r#"{"raw_base64":"AAE="}"#)?;
/// assert_eq!(value, StateValue::RawBase64("AAE=".into()));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StateValue {
    /// The value's JSON form.
    #[serde(rename = "value")]
    Json(serde_json::Value),
    /// The raw bytes, standard base64.
    #[serde(rename = "raw_base64")]
    RawBase64(String),
}
