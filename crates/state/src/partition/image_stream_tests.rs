//! A partition's state streamed to a peer in parts: the receiver ends with exactly the source's
//! rows and apply count, staged apart from its live rows until the last part is in; the source
//! streams the state it had when the stream opened, whatever it applies meanwhile; bytes that
//! do not decode, come out of order or end inside a row are refused and change nothing.

use super::*;
use crate::WriteSet;
use crate::messaging::{OutboxEntry, Receipt, Reminder};
use crate::remember::{RememberOp, RememberedId};
use tessera_consensus::state_machine::{ImageReader, StateMachine};
use tessera_contract::EntityAddress;

fn counter(id: u32) -> EntityAddress {
    EntityAddress::new("t", "counter", format!("c{id}"))
}

/// Writes `value` (`len` bytes of it) to counter `id`, with a tell, a reminder and a receipt.
fn put(machine: &mut PartitionMachine, id: u32, value: u8, len: usize) {
    let mut writes = WriteSet::new(counter(id));
    writes.put("value", vec![value; len]);
    let messaging = writes.messaging_mut();
    messaging.outbox.push(OutboxEntry {
        seq: u64::from(value),
        to: counter(id + 1),
        payload: b"tell".to_vec(),
    });
    messaging.reminders.push(Reminder {
        timer: u64::from(value),
        due_ms: 5_000 + u64::from(id),
        payload: b"later".to_vec(),
    });
    messaging.receipt = Some(Receipt::Entity {
        sender: EntityAddress::new("t", "relay", "r1"),
        seq: u64::from(value),
    });
    messaging.counters = Some((u64::from(value) + 1, u64::from(value)));
    let expect = machine.stamp(&counter(id)).expect("a stamp");
    let stamp = (u64::from(id) << 16) + u64::from(value) + 1;
    let op = PartitionOp::write(writes, expect, stamp, 1_000, vec![]).expect("replicable");
    let result = PartitionResult::decode(&machine.apply(&op.encode()));
    assert_eq!(result, PartitionResult::Applied { reply: vec![] });
}

fn remember(machine: &mut PartitionMachine, ids: &[&str]) {
    let ops = ids
        .iter()
        .map(|id| {
            RememberOp::Started(RememberedId::new(
                &EntityAddress::new("t", "counter", *id),
                3,
            ))
        })
        .collect();
    machine.apply(&PartitionOp::Remember { ops }.encode());
}

/// A machine holding rows in every table a message writes, and remembered ids.
fn source() -> PartitionMachine {
    let mut machine = PartitionMachine::in_memory().expect("a machine");
    for id in 0..40 {
        put(&mut machine, id, 1, 3_000);
    }
    put(&mut machine, 7, 2, 200_000);
    remember(&mut machine, &["c1", "c2"]);
    machine
}

/// The whole stream of `reader`, in parts of `part` bytes.
fn parts(reader: &mut dyn ImageReader, part: usize) -> Vec<Vec<u8>> {
    let mut parts = Vec::new();
    loop {
        let bytes = reader.read(part).expect("the image reads");
        assert!(bytes.len() <= part, "a part is at most what was asked");
        let last = bytes.len() < part;
        parts.push(bytes);
        if last {
            return parts;
        }
    }
}

/// Stages `parts` into `machine` from offset 0.
fn stage(machine: &mut PartitionMachine, parts: &[Vec<u8>]) {
    let mut offset = 0;
    for part in parts {
        machine.stage_image(offset, part).expect("a part stages");
        offset += part.len() as u64;
    }
}

#[test]
fn a_streamed_image_installs_the_source_rows_staged_apart_from_the_live_ones() {
    let mut source = source();
    let expected = source.image().expect("an image");
    let mut receiver = PartitionMachine::in_memory().expect("a machine");
    put(&mut receiver, 99, 9, 10);
    let live_before = receiver.image().expect("an image");
    for part in [1, 97, 4_096, 65_536] {
        let mut reader = source.image_reader().expect("a reader");
        let parts = parts(reader.as_mut(), part);
        stage(&mut receiver, &parts);
        assert_eq!(
            receiver.image().expect("an image"),
            live_before,
            "staging ({part}-byte parts) leaves the live rows as they were"
        );
    }
    receiver
        .install_staged_image()
        .expect("the staged image installs");
    assert_eq!(receiver.image().expect("an image"), expected);
    assert_eq!(
        receiver.store().remembered_ids(&counter(0).type_key(), 3),
        Ok(vec!["c1".to_string(), "c2".to_string()])
    );
    assert_eq!(
        receiver
            .store()
            .due_reminders(6_000, None, 100)
            .map(|due| due.len()),
        Ok(41),
        "the due-time index is rebuilt from the reminders"
    );
    // Same apply count: both replicas' next checkpoints name the same state.
    assert_eq!(receiver.snapshot(), source.snapshot());
    // And the installed copy goes on like the source.
    put(&mut source, 3, 5, 10);
    put(&mut receiver, 3, 5, 10);
    assert_eq!(receiver.image().ok(), source.image().ok());
}

#[test]
fn a_stream_reads_the_state_it_was_opened_on_while_the_source_applies_more() {
    let mut source = source();
    let at_open = source.image().expect("an image");
    let mut reader = source.image_reader().expect("a reader");
    let first = reader.read(1_000).expect("a first part");
    for id in 0..40 {
        put(&mut source, id, 3, 100);
    }
    let mut parts = vec![first];
    parts.extend(self::parts(reader.as_mut(), 1_000));
    drop(reader);
    let mut receiver = PartitionMachine::in_memory().expect("a machine");
    stage(&mut receiver, &parts);
    receiver.install_staged_image().expect("installs");
    assert_eq!(receiver.image().expect("an image"), at_open);
    assert_ne!(source.image().expect("an image"), at_open);
}

#[test]
fn a_stream_that_does_not_decode_or_follow_or_ends_inside_a_row_changes_nothing() {
    let source = source();
    let mut reader = source.image_reader().expect("a reader");
    let parts = parts(reader.as_mut(), 4_096);
    let mut receiver = PartitionMachine::in_memory().expect("a machine");
    put(&mut receiver, 99, 9, 10);
    let live = receiver.image().expect("an image");

    // Garbage.
    assert!(receiver.stage_image(0, &[0xc1, 0xc1, 0xc1]).is_err());
    assert!(receiver.install_staged_image().is_err());
    assert_eq!(receiver.image().expect("an image"), live);

    // A part out of order.
    receiver.stage_image(0, &parts[0]).expect("part 0 stages");
    assert!(receiver.stage_image(1, &parts[1]).is_err());

    // Cut short inside a row: not installed.
    stage(&mut receiver, &parts[..parts.len() / 2]);
    let cut = &parts[parts.len() / 2];
    let offset: u64 = parts[..parts.len() / 2]
        .iter()
        .map(|p| p.len() as u64)
        .sum();
    receiver
        .stage_image(offset, &cut[..cut.len() / 2])
        .expect("half a part stages");
    assert!(receiver.install_staged_image().is_err());
    assert_eq!(receiver.image().expect("an image"), live);

    // No apply count: not installed either.
    let empty = PartitionMachine::in_memory().expect("a machine");
    let mut rows = empty.image_reader().expect("a reader");
    let whole = self::parts(rows.as_mut(), 1 << 20).concat();
    assert!(!whole.is_empty());
    receiver.stage_image(0, &[]).expect("nothing stages");
    assert!(receiver.install_staged_image().is_err());
    assert_eq!(receiver.image().expect("an image"), live);

    // The whole stream again, from offset 0, still installs.
    stage(&mut receiver, &parts);
    receiver.install_staged_image().expect("installs");
    assert_eq!(receiver.image().ok(), source.image().ok());
}
