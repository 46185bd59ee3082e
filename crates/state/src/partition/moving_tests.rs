//! Moving a partition (`moving`): a sealed machine refuses every entity op, a filling one
//! serves nothing until the image it took is whole and opens, a checkpoint taken mid-move
//! carries the phase and the staged pieces; and a partition's group of three voters moves to
//! a new set — one voter replaced — with every committed write, the new voter taking it
//! through the new group's log alone, and a commit through the sealed group following the
//! partition to the new one.

use super::group_tests::{Network, commit, start_member, until};
use super::*;
use crate::{CommitError, EntityState, WriteSet, WriteStamps};
use std::sync::Arc;
use tessera_consensus::group::GroupId;
use tessera_consensus::message::checksum_bytes;
use tessera_consensus::state_machine::StateMachine;
use tessera_contract::EntityAddress;

fn counter(id: u32) -> EntityAddress {
    EntityAddress::new("t", "counter", format!("c{id}"))
}

fn apply(machine: &mut PartitionMachine, op: PartitionOp) -> PartitionResult {
    PartitionResult::decode(&machine.apply(&op.encode()))
}

fn write(id: u32, expect: u64, stamp: u64, value: u8) -> PartitionOp {
    let mut writes = WriteSet::new(counter(id));
    writes.put("value", vec![value]);
    PartitionOp::write(writes, expect, stamp, 1_000, vec![value]).expect("replicable")
}

fn applied() -> PartitionResult {
    PartitionResult::Applied { reply: Vec::new() }
}

/// The stream of `machine`'s rows a move's leader fills with (`FillSource`), whole.
fn stream(machine: &PartitionMachine) -> Vec<u8> {
    FillSource::of_machine(machine)
        .whole_stream()
        .expect("the rows stream")
}

/// The fills of `image` in pieces of `size` bytes, and the open after them.
fn fills(image: &[u8], size: usize) -> (Vec<PartitionOp>, PartitionOp) {
    let checksum = checksum_bytes(image);
    let pieces: Vec<PartitionOp> = image
        .chunks(size)
        .enumerate()
        .map(|(index, bytes)| PartitionOp::Fill {
            checksum,
            index: index as u32,
            bytes: bytes.to_vec(),
        })
        .collect();
    let open = PartitionOp::Open {
        checksum,
        pieces: pieces.len() as u32,
    };
    (pieces, open)
}

#[test]
fn a_sealed_machine_refuses_entity_ops_and_a_filling_one_serves_once_its_image_is_whole() {
    let mut old = PartitionMachine::in_memory().expect("machine");
    assert_eq!(
        apply(&mut old, write(1, 0, 11, 1)),
        PartitionResult::Applied { reply: vec![1] }
    );
    assert_eq!(apply(&mut old, PartitionOp::Seal), applied());
    assert_eq!(old.phase(), Phase::Sealed);
    assert_eq!(
        apply(&mut old, write(1, 11, 12, 2)),
        PartitionResult::Sealed
    );
    assert_eq!(apply(&mut old, write(2, 0, 13, 2)), PartitionResult::Sealed);
    assert_eq!(
        apply(&mut old, PartitionOp::Seal),
        applied(),
        "sealing twice"
    );
    assert_eq!(old.get(&counter(1), "value").expect("get"), Some(vec![1]));
    let image = stream(&old);
    assert!(!image.is_empty());

    let mut new = PartitionMachine::in_memory()
        .and_then(PartitionMachine::filling)
        .expect("machine");
    assert_eq!(new.phase(), Phase::Filling);
    assert_eq!(
        apply(&mut new, write(1, 0, 14, 3)),
        PartitionResult::Filling
    );
    assert_eq!(apply(&mut new, PartitionOp::Seal), PartitionResult::Filling);
    let (pieces, open) = fills(&image, 16);
    assert!(pieces.len() > 2, "an image of several pieces");
    assert_eq!(
        apply(&mut new, open.clone()),
        PartitionResult::Filling,
        "nothing staged"
    );
    // Another filler's image, staged under its own checksum, is not mixed in.
    let (other, _) = fills(b"another image", 100);
    for fill in other {
        assert_eq!(apply(&mut new, fill), applied());
    }
    let (last, first) = pieces.split_last().expect("pieces");
    for fill in first {
        assert_eq!(apply(&mut new, fill.clone()), applied());
    }
    assert_eq!(
        apply(&mut new, open.clone()),
        PartitionResult::Filling,
        "a piece missing"
    );
    let PartitionOp::Open {
        checksum,
        pieces: count,
    } = open.clone()
    else {
        unreachable!("an open");
    };
    assert_eq!(apply(&mut new, last.clone()), applied());
    let short = PartitionOp::Open {
        checksum,
        pieces: count - 1,
    };
    assert_eq!(
        apply(&mut new, short),
        PartitionResult::Filling,
        "a whole that does not match"
    );
    assert_eq!(new.get(&counter(1), "value").expect("get"), None);

    assert_eq!(apply(&mut new, open.clone()), applied());
    assert_eq!(
        new.phase(),
        Phase::Serving,
        "the sealed image's phase is not taken over"
    );
    assert_eq!(new.get(&counter(1), "value").expect("get"), Some(vec![1]));
    assert_eq!(new.stamp(&counter(1)).expect("stamp"), 11, "stamps travel");
    // A write computed against the old group's copy commits: nothing changed since.
    assert_eq!(
        apply(&mut new, write(1, 11, 15, 4)),
        PartitionResult::Applied { reply: vec![4] }
    );
    // A late filler changes nothing: an open group takes no fill, and opens no more.
    assert_eq!(apply(&mut new, last.clone()), PartitionResult::Opened);
    assert_eq!(apply(&mut new, open), applied());
    assert_eq!(new.get(&counter(1), "value").expect("get"), Some(vec![4]));
    let mut serving = PartitionMachine::in_memory().expect("machine");
    assert_eq!(apply(&mut serving, last.clone()), PartitionResult::Opened);
}

#[test]
fn a_whole_image_an_earlier_build_filled_with_still_opens() {
    let mut old = PartitionMachine::in_memory().expect("machine");
    for id in 0..20 {
        apply(&mut old, write(id, 0, 100 + u64::from(id), id as u8));
    }
    apply(&mut old, PartitionOp::Seal);
    let whole = old.image().expect("an image");
    assert!(!image_stream::is_stream(&whole) && image_stream::is_stream(&stream(&old)));
    let mut new = PartitionMachine::in_memory()
        .and_then(PartitionMachine::filling)
        .expect("machine");
    let (pieces, open) = fills(&whole, 64);
    for fill in pieces {
        assert_eq!(apply(&mut new, fill), applied());
    }
    assert_eq!(apply(&mut new, open), applied());
    assert_eq!(new.phase(), Phase::Serving);
    for id in 0..20 {
        assert_eq!(new.stamp(&counter(id)).expect("stamp"), 100 + u64::from(id));
    }
}

#[test]
fn a_move_fills_the_same_rows_whichever_sealed_replica_streams_them() {
    // Two replicas of the sealed epoch (one restored from the other's image) stream the same
    // bytes, so fills from both stage under one checksum; the new group holds exactly the
    // sealed rows, and keeps its own apply count.
    let mut first = PartitionMachine::in_memory().expect("machine");
    for id in 0..40 {
        apply(&mut first, write(id, 0, 100 + u64::from(id), id as u8));
    }
    apply(&mut first, PartitionOp::Seal);
    let mut second = PartitionMachine::in_memory().expect("machine");
    second
        .restore(&first.image().expect("an image"))
        .expect("restores");
    assert_eq!(stream(&second), stream(&first));
    let mut new = PartitionMachine::in_memory()
        .and_then(PartitionMachine::filling)
        .expect("machine");
    let (pieces, open) = fills(&stream(&first), 100);
    let ops = pieces.len() as u64 + 2;
    for fill in pieces {
        assert_eq!(apply(&mut new, fill), applied());
    }
    assert_eq!(apply(&mut new, open), applied());
    assert_eq!(new.phase(), Phase::Serving);
    assert_eq!(apply(&mut new, PartitionOp::Seal), applied());
    assert_eq!(
        new.image().expect("an image"),
        first.image().expect("an image"),
        "sealed, the new group's rows are the old group's"
    );
    assert_eq!(
        savepoint::Snapshot::parse(&new.snapshot()),
        Ok(savepoint::Snapshot::Reference { applied: ops }),
        "its apply count counts its own ops: the fills, the open and the seal"
    );
}

#[test]
fn a_checkpoint_taken_mid_move_carries_the_phase_and_the_staged_pieces() {
    let mut old = PartitionMachine::in_memory().expect("machine");
    for id in 0..20 {
        apply(&mut old, write(id, 0, 100 + u64::from(id), id as u8));
    }
    apply(&mut old, PartitionOp::Seal);
    let sealed = old.image().expect("an image");
    // A sealed machine's checkpoint restores sealed, on any machine.
    let mut copy = PartitionMachine::in_memory().expect("machine");
    copy.restore(&sealed).expect("restores");
    assert_eq!(copy.phase(), Phase::Sealed);
    assert_eq!(
        apply(&mut copy, write(0, 100, 200, 9)),
        PartitionResult::Sealed
    );

    let (pieces, open) = fills(&sealed, 64);
    let half = pieces.len() / 2;
    let mut filling = PartitionMachine::in_memory()
        .and_then(PartitionMachine::filling)
        .expect("machine");
    for fill in &pieces[..half] {
        apply(&mut filling, fill.clone());
    }
    let checkpoint = filling.image().expect("an image");
    // A backup that installs it (its own start was a serving machine's) fills on from there.
    let mut backup = PartitionMachine::in_memory().expect("machine");
    backup.restore(&checkpoint).expect("restores");
    assert_eq!(backup.phase(), Phase::Filling);
    for fill in &pieces[half..] {
        assert_eq!(apply(&mut backup, fill.clone()), applied());
    }
    assert_eq!(apply(&mut backup, open), applied());
    for id in 0..20 {
        assert_eq!(
            backup.get(&counter(id), "value").expect("get"),
            Some(vec![id as u8])
        );
    }
    // An open machine's checkpoint is as before moves existed: no trailer.
    let mut plain = PartitionMachine::in_memory().expect("machine");
    apply(&mut plain, write(0, 0, 1, 1));
    let bytes = plain.image().expect("an image");
    let image: rmpv::Value = rmp_serde::from_slice(&bytes).expect("one value");
    assert_eq!(
        rmp_serde::to_vec(&image).expect("encodes").len(),
        bytes.len()
    );
    // Emptied, a move's new group is filling again.
    filling.clear().expect("clears");
    assert_eq!(filling.phase(), Phase::Filling);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_moves_to_a_new_replica_set_with_every_committed_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let old_voters = ["n1", "n2", "n3"];
    let new_voters = ["n1", "n2", "n4"];
    let old_network = Arc::new(Network::default());
    let new_network = Arc::new(Network::default());
    let mut old = std::collections::BTreeMap::new();
    for node in old_voters {
        let machine = PartitionMachine::open(&dir.path().join(format!("{node}.old.redb")))
            .expect("the partition database opens");
        let (group, _, store) =
            start_member(GroupId(8), &old_voters, node, &old_network, &dir, machine);
        old.insert(node, Arc::new(PartitionState::new(store, Arc::new(group))));
    }
    let stamp = |state: &PartitionState, id: u32| state.meta(&counter(id)).expect("meta").stamp;
    for id in 0..16 {
        let mut writes = WriteSet::new(counter(id));
        writes.put("value", vec![id as u8]);
        writes.set_stamps(WriteStamps {
            read: 0,
            written: 1_000 + u64::from(id),
        });
        commit(&old["n1"], writes).await.expect("commits");
    }
    old["n3"].seal().await.expect("sealed");
    for node in old_voters {
        until(&old[node], "the seal applied", |state| {
            state.phase() == Ok(Phase::Sealed)
        })
        .await;
    }
    let mut late = WriteSet::new(counter(0));
    late.put("value", vec![99]);
    late.set_stamps(WriteStamps {
        read: 1_000,
        written: 5_000,
    });
    assert!(
        matches!(
            old["n1"].commit(late.clone()).await,
            Err(CommitError::Unavailable(_))
        ),
        "a sealed group commits nothing"
    );

    let mut new = std::collections::BTreeMap::new();
    for node in new_voters {
        let machine = PartitionMachine::open(&dir.path().join(format!("{node}.new.redb")))
            .and_then(PartitionMachine::filling)
            .expect("the partition database opens");
        let (group, _, store) =
            start_member(GroupId(9), &new_voters, node, &new_network, &dir, machine);
        new.insert(node, Arc::new(PartitionState::new(store, Arc::new(group))));
    }
    // Refused until it opens (the first election may come first: asked until it orders).
    let refused = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            match new["n4"].commit(late.clone()).await {
                Err(CommitError::Unavailable(reason)) if reason.contains("still taking") => {
                    return;
                }
                other => {
                    assert!(
                        matches!(other, Err(CommitError::Unavailable(_))),
                        "{other:?}"
                    );
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    });
    refused.await.expect("the new group answers");
    // A commit through the sealed group, once the new group runs on the same node, follows
    // the partition there and waits while it fills: it lands once the group opens.
    old["n1"].succeeded_by(Arc::clone(&new["n1"]));
    let mut moved_write = WriteSet::new(counter(1));
    moved_write.put("value", vec![77]);
    moved_write.set_stamps(WriteStamps {
        read: 1_001,
        written: 6_000,
    });
    let following = tokio::spawn({
        let old = Arc::clone(&old["n1"]);
        async move { old.commit(moved_write).await }
    });
    // The two voters that stay fill it at once from their sealed copies.
    let sources = [
        FillSource::sealed(&old["n1"]),
        FillSource::sealed(&old["n2"]),
    ];
    let (first, second) = tokio::join!(new["n1"].fill(&sources[0]), new["n2"].fill(&sources[1]));
    first.expect("filled");
    second.expect("filled");
    for node in new_voters {
        until(&new[node], "every committed write moved", |state| {
            state.phase() == Ok(Phase::Serving)
                && (0..16).all(|id| {
                    state.get(&counter(id), "value").ok().flatten() == Some(vec![id as u8])
                        && stamp(state, id) == 1_000 + u64::from(id)
                })
        })
        .await;
    }
    following
        .await
        .expect("the commit runs")
        .expect("it followed the partition to its new group");
    until(
        &new["n4"],
        "the followed write read on the new voter",
        |state| state.get(&counter(1), "value").ok().flatten() == Some(vec![77]),
    )
    .await;
    // The write refused by the sealed group commits in the new one, read on the new voter.
    commit(&new["n4"], late).await.expect("commits");
    until(&new["n4"], "the write read back", |state| {
        state.get(&counter(0), "value").ok().flatten() == Some(vec![99])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_restarted_mid_move_rebuilds_its_phase_and_pieces_from_its_journal() {
    let dir = tempfile::tempdir().expect("temp dir");
    let voters = ["n1"];
    let mut sealed = PartitionMachine::in_memory().expect("machine");
    for id in 0..8 {
        apply(&mut sealed, write(id, 0, 50 + u64::from(id), id as u8));
    }
    apply(&mut sealed, PartitionOp::Seal);
    let (pieces, open) = fills(&stream(&sealed), 64);
    let half = pieces.len() / 2;
    let start = || {
        let machine = PartitionMachine::open(&dir.path().join("n1.redb"))
            .and_then(PartitionMachine::filling)
            .expect("the partition database opens");
        let network = Arc::new(Network::default());
        let (group, _, store) = start_member(GroupId(10), &voters, "n1", &network, &dir, machine);
        (group, store, network)
    };
    let (group, store, network) = start();
    for fill in &pieces[..half] {
        assert_eq!(submit(&group, fill).await, applied());
    }
    drop((network, store));
    group.stop().await;
    // Restarted: the machine is rebuilt from the journal, still filling, with its pieces.
    let (group, store_again, network) = start();
    assert_eq!(phase(&store_again), Ok(Phase::Filling));
    for fill in &pieces[half..] {
        assert_eq!(submit(&group, fill).await, applied());
    }
    assert_eq!(submit(&group, &open).await, applied());
    drop((network, store_again));
    group.stop().await;
    // Restarted once more: open, with every row.
    let (group, store, _network) = start();
    assert_eq!(phase(&store), Ok(Phase::Serving));
    for id in 0..8 {
        assert_eq!(
            store.get(&counter(id), "value").expect("get"),
            Some(vec![id as u8])
        );
    }
    assert_eq!(
        submit(&group, &write(0, 50, 99, 7)).await,
        PartitionResult::Applied { reply: vec![7] }
    );
}

/// Submits `op` to a group of one voter and reads the result.
async fn submit(group: &tessera_consensus::group::Group, op: &PartitionOp) -> PartitionResult {
    PartitionResult::decode(&group.submit(op.encode()).await.expect("commits"))
}
