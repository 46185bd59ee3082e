//! The partition machine: writes apply only against the stamp they read, a resubmitted write
//! applies once, barriers see changes, messaging travels with the write, replicas applying the
//! same ops hold the same bytes, and snapshots restore the same state.

use super::*;
use crate::messaging::{OutboxEntry, Reminder};
use crate::{Receipt, WriteSet};
use tessera_consensus::state_machine::StateMachine;
use tessera_contract::EntityAddress;

fn counter() -> EntityAddress {
    EntityAddress::new("t", "counter", "c1")
}

fn machine() -> PartitionMachine {
    PartitionMachine::in_memory().expect("an in-memory database opens")
}

fn put(machine: &mut PartitionMachine, expect: u64, stamp: u64, value: u8) -> PartitionResult {
    let mut writes = WriteSet::new(counter());
    writes.put("value", vec![value]);
    let op = PartitionOp::write(writes, expect, stamp, 1_000, vec![value]).expect("replicable");
    PartitionResult::decode(&machine.apply(&op.encode()))
}

fn value(machine: &PartitionMachine) -> Option<Vec<u8>> {
    machine.get(&counter(), "value").expect("readable")
}

#[test]
fn a_write_applies_only_against_the_stamp_it_read_and_once() {
    let mut machine = machine();
    assert_eq!(
        put(&mut machine, 0, 5, 1),
        PartitionResult::Applied { reply: vec![1] }
    );
    // Resubmitted (a retry after a lost answer): answered as applied, not applied again.
    assert_eq!(
        put(&mut machine, 0, 5, 1),
        PartitionResult::Applied { reply: vec![1] }
    );
    assert_eq!(machine.stamp(&counter()), Ok(5));
    // Computed from the copy before stamp 5 (a deposed primary's): refused, nothing changes.
    assert_eq!(
        put(&mut machine, 0, 6, 9),
        PartitionResult::Conflict { stamp: 5 }
    );
    assert_eq!(value(&machine), Some(vec![1]));
    assert_eq!(
        put(&mut machine, 5, 7, 2),
        PartitionResult::Applied { reply: vec![2] }
    );
    assert_eq!(value(&machine), Some(vec![2]));
}

#[test]
fn a_barrier_commits_only_if_the_state_read_is_still_current() {
    let mut machine = machine();
    put(&mut machine, 0, 5, 1);
    let check = |machine: &mut PartitionMachine, expect| {
        let op = PartitionOp::Check {
            entity: counter(),
            expect,
            reply: vec![expect as u8],
        };
        PartitionResult::decode(&machine.apply(&op.encode()))
    };
    assert_eq!(
        check(&mut machine, 5),
        PartitionResult::Checked { reply: vec![5] }
    );
    assert_eq!(
        check(&mut machine, 0),
        PartitionResult::Conflict { stamp: 5 }
    );
}

#[test]
fn removed_keys_keep_the_stamp_and_garbage_changes_nothing() {
    let mut machine = machine();
    put(&mut machine, 0, 5, 1);
    let mut writes = WriteSet::new(counter());
    writes.delete("value");
    writes.set_version(3);
    let op = PartitionOp::write(writes, 5, 6, 1_000, Vec::new()).expect("replicable");
    machine.apply(&op.encode());
    assert_eq!(value(&machine), None);
    assert_eq!(machine.version(&counter()), Ok(Some(3)));
    // A write computed when the entity was new cannot apply after the removal either.
    assert_eq!(
        put(&mut machine, 0, 8, 4),
        PartitionResult::Conflict { stamp: 6 }
    );
    let before = machine.image().expect("an image");
    assert!(matches!(
        PartitionResult::decode(&machine.apply(&[0xc1, 0x00])),
        PartitionResult::Malformed(_)
    ));
    assert_eq!(machine.image().expect("an image"), before);
}

#[test]
fn a_zero_stamp_is_not_replicable() {
    let mut writes = WriteSet::new(counter());
    writes.put("value", vec![1]);
    assert_eq!(
        PartitionOp::write(writes, 0, 0, 1_000, Vec::new()),
        Err(WriteNotReplicable::ZeroStamp)
    );
}

/// A message's whole outcome: a state key, a tell, a reminder and the receipt of the tell it
/// handled, from `sender`.
fn messaging_write(sender: &EntityAddress) -> WriteSet {
    let mut writes = WriteSet::new(counter());
    writes.put("value", vec![1]);
    let messaging = writes.messaging_mut();
    messaging.outbox.push(OutboxEntry {
        seq: 1,
        to: EntityAddress::new("t", "counter", "c2"),
        payload: b"tell".to_vec(),
    });
    messaging.reminders.push(Reminder {
        timer: 1,
        due_ms: 5_000,
        payload: b"later".to_vec(),
    });
    messaging.receipt = Some(Receipt::Entity {
        sender: sender.clone(),
        seq: 4,
    });
    messaging.counters = Some((2, 1));
    writes
}

#[test]
fn messaging_travels_with_the_write_and_a_duplicate_is_seen_on_every_replica() {
    let sender = EntityAddress::new("t", "relay", "r1");
    let op = PartitionOp::write(messaging_write(&sender), 0, 5, 1_000, Vec::new())
        .expect("replicable")
        .encode();
    let (mut first, mut second) = (machine(), machine());
    first.apply(&op);
    second.apply(&op);
    for replica in [&first, &second] {
        let store = replica.store();
        let outbox = store.outbox(&counter(), 10).expect("readable");
        assert_eq!(outbox.len(), 1);
        assert_eq!(outbox[0].payload, b"tell");
        let due = store.due_reminders(5_000, None, 10).expect("readable");
        assert_eq!(due.len(), 1);
        let duplicate = Receipt::Entity {
            sender: sender.clone(),
            seq: 4,
        };
        assert_eq!(store.is_duplicate(&counter(), &duplicate), Ok(true));
        let next = Receipt::Entity {
            sender: sender.clone(),
            seq: 5,
        };
        assert_eq!(store.is_duplicate(&counter(), &next), Ok(false));
    }
    assert_eq!(
        first.image().expect("an image"),
        second.image().expect("an image")
    );
}

#[test]
fn receipts_are_recorded_at_the_primarys_time_not_the_replicas() {
    // Two client keys committed a horizon apart by the primary's clock: the second evicts the
    // first on every replica, whenever the replica applies them (by its own clock they would
    // be a moment apart, and both kept).
    let mut machine = machine();
    let keyed = |key: &str| {
        let mut writes = WriteSet::new(counter());
        writes.messaging_mut().receipt = Some(Receipt::Client { key: key.into() });
        writes
    };
    // Recent by the clock reads use: the second key is a moment old.
    let horizon = crate::messaging::CLIENT_KEY_HORIZON_MS;
    let first = crate::messaging::now_ms() - horizon - 10_000;
    let later = first + horizon + 1;
    for (expect, stamp, at_ms, key) in [(0, 1, first, "k1"), (1, 2, later, "k2")] {
        let op = PartitionOp::write(keyed(key), expect, stamp, at_ms, Vec::new());
        machine.apply(&op.expect("replicable").encode());
    }
    let store = machine.store();
    let k1 = Receipt::Client { key: "k1".into() };
    let k2 = Receipt::Client { key: "k2".into() };
    assert_eq!(store.is_duplicate(&counter(), &k1), Ok(false));
    assert_eq!(store.is_duplicate(&counter(), &k2), Ok(true));
}

#[test]
fn a_snapshot_restores_the_same_state_and_garbage_leaves_it_unchanged() {
    let mut machine = machine();
    put(&mut machine, 0, 5, 1);
    let sender = EntityAddress::new("t", "relay", "r1");
    let op =
        PartitionOp::write(messaging_write(&sender), 5, 6, 1_000, Vec::new()).expect("replicable");
    machine.apply(&op.encode());
    let mut copy = self::machine();
    put(&mut copy, 0, 9, 7);
    copy.restore(&machine.image().expect("an image"))
        .expect("a snapshot restores");
    assert_eq!(
        copy.image().expect("an image"),
        machine.image().expect("an image")
    );
    assert_eq!(copy.stamp(&counter()), Ok(6));
    assert_eq!(copy.store().next_due(), Ok(Some(5_000)));
    assert!(copy.restore(&[0xc1]).is_err());
    assert_eq!(
        copy.image().expect("an image"),
        machine.image().expect("an image")
    );
    copy.clear().expect("clears");
    assert_eq!(
        copy.image().expect("an image"),
        self::machine().image().expect("an image")
    );
}

#[test]
fn every_shape_of_write_set_survives_the_ops_encoding() {
    // MessagePack structs are positional: a field left out of the encoding would shift the
    // next one into its place.
    let sender = EntityAddress::new("t", "relay", "r1");
    let bare = WriteSet::new(counter());
    let mut stamped = WriteSet::new(counter());
    stamped.set_stamps(crate::WriteStamps {
        read: 3,
        written: 4,
    });
    let mut versioned = messaging_write(&sender);
    versioned.set_version(7);
    let mut everything = versioned.clone();
    everything.set_stamps(crate::WriteStamps {
        read: 1,
        written: 2,
    });
    for writes in [bare, stamped, versioned, everything] {
        let op = PartitionOp::Settle { at_ms: 5, writes };
        let decoded: PartitionOp = rmp_serde::from_slice(&op.encode()).expect("decodes");
        assert_eq!(decoded, op);
    }
}

#[test]
fn remembered_ids_are_applied_in_order_and_carried_by_snapshots() {
    use crate::remember::{RememberOp, RememberedId};
    let mut machine = machine();
    let id = |id: &str| RememberedId::new(&EntityAddress::new("t", "counter", id), 3);
    let ops = vec![
        RememberOp::Started(id("c1")),
        RememberOp::Started(id("c2")),
        RememberOp::Forgotten(id("c1")),
    ];
    let applied = machine.apply(&PartitionOp::Remember { ops }.encode());
    assert!(matches!(
        PartitionResult::decode(&applied),
        PartitionResult::Applied { .. }
    ));
    let type_key = counter().type_key();
    assert_eq!(
        machine.store().remembered_ids(&type_key, 3),
        Ok(vec!["c2".to_string()])
    );
    let mut copy = self::machine();
    copy.restore(&machine.image().expect("an image"))
        .expect("a snapshot restores");
    assert_eq!(
        copy.store().remembered_ids(&type_key, 3),
        Ok(vec!["c2".to_string()])
    );
    assert_eq!(
        copy.image().expect("an image"),
        machine.image().expect("an image")
    );
}

#[test]
fn a_restored_part_writes_its_rows_and_restamps_its_entities_so_a_stale_write_conflicts() {
    use crate::shard_transfer::{EntityRecord, ShardPart, StateRow};
    let mut machine = machine();
    put(&mut machine, 0, 5, 1);
    let record = EntityRecord {
        id: "c1".into(),
        meta: Some((1, 1)),
        state: vec![StateRow {
            key: "value".into(),
            value: vec![42],
        }],
        ..EntityRecord::default()
    };
    let part = ShardPart {
        index: 0,
        last: true,
        entities: vec![record.clone()],
        remembered: vec!["c1".into()],
    };
    let install = |stamp, part: &ShardPart| PartitionOp::Install {
        stamp,
        type_key: counter().type_key(),
        shard: 3,
        part: part.clone(),
    };
    let applied = machine.apply(&install(9, &part).encode());
    assert!(matches!(
        PartitionResult::decode(&applied),
        PartitionResult::Applied { .. }
    ));
    assert_eq!(value(&machine), Some(vec![42]));
    assert_eq!(machine.stamp(&counter()), Ok(9));
    assert_eq!(
        machine.store().remembered_ids(&counter().type_key(), 3),
        Ok(vec!["c1".to_string()])
    );
    // An instance built before the restore read stamp 5: its write is refused.
    assert_eq!(
        put(&mut machine, 5, 6, 2),
        PartitionResult::Conflict { stamp: 9 }
    );
    assert_eq!(value(&machine), Some(vec![42]));

    // A zero stamp is refused.
    assert!(matches!(
        PartitionResult::decode(&machine.apply(&install(0, &part).encode())),
        PartitionResult::Malformed(_)
    ));
    assert_eq!(machine.stamp(&counter()), Ok(9));
}

/// A restored value larger than a part comes in pieces over several installs: it is written
/// once whole, its pieces then dropped; a replica that installs a checkpoint taken between the
/// pieces assembles the same value, so the replicas hold the same bytes.
#[test]
fn a_value_restored_in_pieces_over_several_installs_is_whole_on_every_replica() {
    use crate::shard_transfer::{EntityRecord, ShardPart, ValueChunk};
    let big: Vec<u8> = (0..3_000u32).map(|index| (index % 251) as u8).collect();
    let piece = |offset: usize, end: usize, index: u32| ShardPart {
        index,
        last: end == big.len(),
        entities: vec![EntityRecord {
            id: "c1".into(),
            chunks: vec![ValueChunk {
                key: "big".into(),
                offset: offset as u64,
                total: big.len() as u64,
                bytes: big[offset..end].to_vec(),
            }],
            ..EntityRecord::default()
        }],
        remembered: Vec::new(),
    };
    let install = |part: ShardPart| {
        PartitionOp::Install {
            stamp: 7,
            type_key: counter().type_key(),
            shard: 3,
            part,
        }
        .encode()
    };
    let ops = [
        install(piece(0, 1_000, 0)),
        install(piece(1_000, 2_000, 1)),
        install(piece(2_000, 3_000, 2)),
    ];
    let big_value = |machine: &PartitionMachine| machine.get(&counter(), "big").expect("readable");

    let mut first = machine();
    for op in &ops[..2] {
        let applied = PartitionResult::decode(&first.apply(op));
        assert!(
            matches!(applied, PartitionResult::Applied { .. }),
            "{applied:?}"
        );
    }
    assert_eq!(big_value(&first), None, "not whole before its last piece");
    // A replica behind installs a checkpoint taken between the pieces.
    let mut second = machine();
    second
        .restore(&first.image().expect("an image"))
        .expect("the checkpoint installs");
    for replica in [&mut first, &mut second] {
        replica.apply(&ops[2]);
        assert_eq!(
            big_value(replica),
            Some(big.clone()),
            "whole once its last piece commits"
        );
    }
    assert_eq!(
        first.image().expect("an image"),
        second.image().expect("an image"),
        "the replicas hold the same bytes"
    );
    let mut restored = machine();
    restored
        .restore(&first.image().expect("an image"))
        .expect("restores");
    assert_eq!(big_value(&restored), Some(big));
    // No staged piece is left behind to be carried by every later checkpoint.
    for replica in [&first, &second, &restored] {
        use redb::{ReadableDatabase, ReadableTableMetadata};
        let transaction = replica.store().database().begin_read().expect("reads");
        let staged = transaction
            .open_table(crate::shard_transfer::SHARD_TRANSFER_CHUNKS)
            .expect("the table")
            .len()
            .expect("counted");
        assert_eq!(
            staged, 0,
            "the pieces were dropped once the value was whole"
        );
    }
}

/// A restored part cut into small installs (as `PartitionState::install` cuts it, so no group
/// operation carries megabytes) leaves exactly the rows the whole part leaves: a value larger
/// than a piece goes in chunks, the rest of its entity's rows and the remembered ids with it.
#[test]
fn a_part_cut_into_small_installs_leaves_the_same_rows_as_the_whole_part() {
    use crate::shard_transfer::{EntityRecord, OutboxRow, ShardPart, StateRow};
    let value = |len: usize, seed: u8| -> Vec<u8> {
        (0..len)
            .map(|index| (index as u8).wrapping_mul(seed))
            .collect()
    };
    let record = |id: &str, big: usize| EntityRecord {
        id: id.into(),
        meta: Some((2, big as u64)),
        state: vec![
            StateRow {
                key: "big".into(),
                value: value(big, 7),
            },
            StateRow {
                key: "small".into(),
                value: vec![1, 2, 3],
            },
        ],
        sequences: Some((5, 1, 0, 1)),
        outbox: vec![OutboxRow {
            seq: 4,
            to_type: "counter".into(),
            to_id: "c2".into(),
            payload: b"tell".to_vec(),
        }],
        client_keys: vec![("key-1".into(), 1_000)],
        ..EntityRecord::default()
    };
    let part = ShardPart {
        index: 0,
        last: true,
        entities: vec![
            record("c1", 300_000),
            record("c2", 10),
            record("c3", 70_000),
        ],
        remembered: vec!["c1".into(), "c3".into()],
    };
    let install = |part: ShardPart| {
        PartitionOp::Install {
            stamp: 11,
            type_key: counter().type_key(),
            shard: 3,
            part,
        }
        .encode()
    };
    let mut whole = machine();
    let applied = PartitionResult::decode(&whole.apply(&install(part.clone())));
    assert!(
        matches!(applied, PartitionResult::Applied { .. }),
        "{applied:?}"
    );

    let bytes_max = 64 * 1024;
    let pieces = part.clone().split(bytes_max);
    assert!(pieces.len() >= 6, "cut into {} installs", pieces.len());
    let mut cut = machine();
    for piece in pieces {
        let encoded = install(piece);
        assert!(
            encoded.len() <= bytes_max + 4_096,
            "an install of {} bytes",
            encoded.len()
        );
        let applied = PartitionResult::decode(&cut.apply(&encoded));
        assert!(
            matches!(applied, PartitionResult::Applied { .. }),
            "{applied:?}"
        );
    }
    assert_eq!(
        cut.get(&counter(), "big").expect("readable"),
        Some(value(300_000, 7)),
        "the large value is whole"
    );
    assert_eq!(
        cut.image().expect("an image"),
        whole.image().expect("an image"),
        "the same rows, stamps and remembered ids"
    );
}
