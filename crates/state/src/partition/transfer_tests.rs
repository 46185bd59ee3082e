//! A replica of a partition's group that lost its disk rebuilds from its peers by a state
//! transfer streamed in parts, through the one group driver: every row comes back, no part is
//! larger than a state chunk, and no whole checkpoint is sent.

use super::group_tests::{Network, start_member};
use super::*;
use crate::WriteSet;
use std::sync::Arc;
use std::time::Duration;
use tessera_consensus::config::STATE_CHUNK_BYTES_MAX;
use tessera_consensus::group::{Group, GroupId};
use tessera_contract::EntityAddress;

const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
const GROUP: GroupId = GroupId(9);
/// Entities written, 16 KiB each: 1 MiB of state, several parts.
const ENTITIES: u32 = 64;
const VALUE_BYTES: usize = 16 * 1024;

fn entity(id: u32) -> EntityAddress {
    EntityAddress::new("t", "blob", format!("b{id}"))
}

fn value(id: u32, round: u8) -> Vec<u8> {
    let mut value = vec![round; VALUE_BYTES];
    value[..4].copy_from_slice(&id.to_le_bytes());
    value
}

/// Writes round `round` of every entity through `group` (each against its last stamp).
async fn write_round(group: &Group, round: u8) {
    for id in 0..ENTITIES {
        let mut writes = WriteSet::new(entity(id));
        writes.put("value", value(id, round));
        let expect = if round == 0 {
            0
        } else {
            u64::from(round) << 32 | u64::from(id)
        };
        let stamp = u64::from(round + 1) << 32 | u64::from(id);
        let op = PartitionOp::write(writes, expect, stamp, 1_000, Vec::new())
            .expect("replicable")
            .encode();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            match group.submit(op.clone()).await {
                Ok(bytes) => {
                    let result = PartitionResult::decode(&bytes);
                    assert_eq!(result, PartitionResult::Applied { reply: Vec::new() });
                    break;
                }
                Err(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(error) => panic!("write {id} of round {round} never committed: {error}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_lost_its_disk_rebuilds_from_a_stream_of_bounded_parts() {
    let dirs = [(); 2].map(|()| tempfile::tempdir().expect("temp dir"));
    let lost = tempfile::tempdir().expect("temp dir");
    let network = Arc::new(Network {
        checkpoint_interval_ops: Some(8),
        ..Network::default()
    });
    let member = |index: usize, dir: &tempfile::TempDir| {
        let machine = PartitionMachine::open(&dir.path().join("p.redb")).expect("opens");
        start_member(GROUP, &VOTERS, VOTERS[index], &network, dir, machine)
    };
    let (first, _, _) = member(0, &dirs[0]);
    let (second, _, _) = member(1, &dirs[1]);
    let (third, _, _) = member(2, &lost);
    write_round(&first, 0).await;

    // n3 stops and its disk is lost; the others write on past many checkpoints, so the log no
    // longer reaches back to what n3 held.
    third.stop().await;
    drop(lost);
    write_round(&first, 1).await;
    write_round(&second, 2).await;

    let empty = tempfile::tempdir().expect("temp dir");
    let (third, _, store) = member(2, &empty);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let rebuilt = (0..ENTITIES)
            .all(|id| store.get(&entity(id), "value").ok().flatten() == Some(value(id, 2)));
        if rebuilt {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "n3 never held every row again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Its status, published after the handler that installed, counts the install.
    loop {
        let status = third.status();
        if status.states_installed >= 1 && !status.fetching_state {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "its status never counted the install: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (chunks, parts, largest) = *network.transfers.lock().expect("network");
    assert_eq!(chunks, 0, "no whole checkpoint is sent");
    assert!(
        parts as usize > (ENTITIES as usize * VALUE_BYTES) / STATE_CHUNK_BYTES_MAX,
        "the state came in parts: {parts}"
    );
    assert!(
        largest <= STATE_CHUNK_BYTES_MAX,
        "a part of {largest} bytes"
    );
}
