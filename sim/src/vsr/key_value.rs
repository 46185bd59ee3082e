//! The key-value workload: every replica runs [`KeyValue`], clients put and get on a few keys
//! (unique put values, so a read names the write it saw), and the run is judged by the
//! Wing-Gong [`linearizability`] search over the clients' history.

use super::linearizability::{self, History};
use super::workload::{CommittedOrder, Workload, WorkloadCounts};
use crate::rng::SimRng;
use tessera_consensus::message::ClientId;
use tessera_consensus::state_machine::{KeyValue, KeyValueOperation, KeyValueResult};

/// Keys the clients use: few, so that operations contend.
pub const KEY_COUNT: u64 = 3;

/// Puts per thousand requests; the rest are gets.
const PUT_PER_MILLE: u64 = 500;

/// Puts and gets on [`KEY_COUNT`] keys, checked for linearizability.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyValueWorkload;

impl Workload for KeyValueWorkload {
    type Machine = KeyValue;
    type Operation = KeyValueOperation;
    type Answer = Option<u64>;

    fn name(&self) -> &'static str {
        "kv"
    }

    fn machine(&self) -> Result<KeyValue, String> {
        Ok(KeyValue::default())
    }

    fn next_operation(
        &self,
        rng: &mut SimRng,
        client: ClientId,
        request_number: u64,
    ) -> KeyValueOperation {
        let key = rng.below(KEY_COUNT);
        if rng.per_mille(PUT_PER_MILLE) {
            KeyValueOperation::Put {
                key,
                value: (client << 32) | request_number,
            }
        } else {
            KeyValueOperation::Get { key }
        }
    }

    fn encode(&self, operation: &KeyValueOperation) -> Vec<u8> {
        operation.encode()
    }

    fn decode_answer(&self, bytes: &[u8]) -> Result<Option<u64>, String> {
        match KeyValueResult::decode(bytes) {
            KeyValueResult::Value(value) => Ok(value),
            KeyValueResult::Malformed => Err("a malformed result".to_string()),
        }
    }

    fn check(&self, history: &History, _: &CommittedOrder) -> Result<WorkloadCounts, String> {
        linearizability::check(history)?;
        let replies_checked = history
            .operations
            .iter()
            .filter(|operation| operation.completed.is_some())
            .count() as u64;
        Ok(WorkloadCounts {
            replies_checked,
            ..WorkloadCounts::default()
        })
    }
}
