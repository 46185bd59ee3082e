use super::*;
use crate::remember::{RememberOp, RememberedId};
use crate::{
    EntityState, GroupCommitConfig, LocalState, MessagingWrites, OutboxEntry, RememberStore,
    Reminder, ShardStates, StateStore, WriteSet,
};
use tessera_contract::{EntityAddress, Origin};

fn node(dir: &tempfile::TempDir, name: &str) -> LocalState {
    let store = StateStore::open(&dir.path().join(format!("{name}.redb"))).unwrap();
    LocalState::new(store, GroupCommitConfig::default())
}

/// Shard 1 holds ids starting with "a"; everything else is shard 0.
fn scope(shard: ShardId) -> ShardScope {
    ShardScope {
        type_key: TypeKey::new("t", "counter"),
        shard,
        contains: Arc::new(move |id: &str| u32::from(id.starts_with('a')) == shard),
    }
}

async fn write_entity(state: &LocalState, id: &str, value: u8) {
    let entity = EntityAddress::new("t", "counter", id);
    let mut writes = WriteSet::new(entity.clone());
    writes.put("value", vec![value]);
    writes.set_version(2);
    *writes.messaging_mut() = MessagingWrites {
        outbox: vec![OutboxEntry {
            seq: 1,
            to: EntityAddress::new("t", "counter", "z"),
            payload: vec![9],
        }],
        reminders: vec![Reminder {
            timer: 1,
            due_ms: 5_000 + u64::from(value),
            payload: vec![value],
        }],
        receipt: Some(Origin::Client {
            key: format!("k-{id}"),
        }),
        ..MessagingWrites::default()
    };
    state.commit(writes).await.unwrap();
    let remembered = RememberedId::new(&entity, u32::from(id.starts_with('a')));
    state
        .apply(vec![RememberOp::Started(remembered)])
        .await
        .unwrap();
}

#[tokio::test]
async fn a_shard_moves_whole_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let (from, to) = (node(&dir, "from"), node(&dir, "to"));
    for (id, value) in [("a1", 1), ("a2", 2), ("b1", 3)] {
        write_entity(&from, id, value).await;
    }
    // The receiver holds a stale copy of a1 and an entity the shard no longer has.
    write_entity(&to, "a1", 99).await;
    write_entity(&to, "a9", 98).await;

    let parts = export_all(&from, 1);
    assert_eq!(parts.len(), 1);
    assert!(parts[0].last);
    assert_eq!(parts[0].entities.len(), 2, "a1 and a2, not b1");
    assert_eq!(parts[0].remembered, vec!["a1", "a2"]);
    for part in parts.clone() {
        to.install(scope(1), 7, part).await.unwrap();
    }
    from.discard(scope(1)).await.unwrap();
    // A sender that lost its rows and sends the same move again changes nothing here.
    let empty = export_all(&from, 1);
    assert!(empty[0].entities.is_empty());
    to.install(scope(1), 7, empty[0].clone()).await.unwrap();

    let a1 = EntityAddress::new("t", "counter", "a1");
    assert_eq!(to.get(&a1, "value").unwrap(), Some(vec![1]));
    assert_eq!(to.meta(&a1).unwrap(), from_meta(2, 6));
    assert_eq!(to.sequences(&a1).unwrap().reminders, 1);
    assert_eq!(to.outbox(&a1, 10).unwrap().len(), 1);
    assert!(
        to.is_duplicate(&a1, &Origin::Client { key: "k-a1".into() })
            .unwrap()
    );
    assert_eq!(to.due_reminders(u64::MAX, None, 10).unwrap().len(), 2);
    let a9 = EntityAddress::new("t", "counter", "a9");
    assert_eq!(
        to.get(&a9, "value").unwrap(),
        None,
        "stale rows are cleared"
    );
    let type_key = TypeKey::new("t", "counter");
    assert_eq!(to.list_ids(&type_key, 1).unwrap(), vec!["a1", "a2"]);

    // The giver keeps only the other shard.
    assert_eq!(from.get(&a1, "value").unwrap(), None);
    assert_eq!(from.outbox(&a1, 10).unwrap(), Vec::new());
    assert_eq!(from.due_reminders(u64::MAX, None, 10).unwrap().len(), 1);
    assert!(from.list_ids(&type_key, 1).unwrap().is_empty());
    let b1 = EntityAddress::new("t", "counter", "b1");
    assert_eq!(from.get(&b1, "value").unwrap(), Some(vec![3]));
    assert_eq!(from.pending_messages().unwrap(), (1, 1));
    // Exporting again from the new owner gives the same parts.
    assert_eq!(export_all(&to, 1), parts);
}

/// Every part of the shard's export, in order.
fn export_all(state: &LocalState, shard: ShardId) -> Vec<ShardPart> {
    state
        .export(&scope(shard))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn from_meta(version: u32, state_bytes: u64) -> crate::EntityMeta {
    crate::EntityMeta {
        version: Some(version),
        state_bytes,
        stamp: 0,
    }
}

#[tokio::test]
async fn large_shards_are_cut_into_bounded_parts_that_install_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (from, to) = (node(&dir, "from"), node(&dir, "to"));
    let big = vec![7u8; 1 << 20];
    for index in 0..10 {
        let mut writes = WriteSet::new(EntityAddress::new("t", "counter", format!("a{index}")));
        writes.put("blob", big.clone());
        from.commit(writes).await.unwrap();
    }
    let parts = export_all(&from, 1);
    assert!(parts.len() >= 3, "10 MiB in parts of at most 4 MiB");
    for (index, part) in parts.iter().enumerate() {
        assert_eq!(part.index as usize, index);
        assert_eq!(part.last, index + 1 == parts.len());
        assert!(part.bytes() <= SHARD_PART_BYTES_MAX);
    }
    let values: usize = parts
        .iter()
        .flat_map(|part| &part.entities)
        .map(|record| record.state.len() + record.chunks.len())
        .sum();
    assert!(values >= 10, "every value is sent, some in chunks");
    for part in parts {
        to.install(scope(1), 7, part).await.unwrap();
    }
    for index in 0..10 {
        let entity = EntityAddress::new("t", "counter", format!("a{index}"));
        assert_eq!(
            to.get(&entity, "blob").unwrap().map(|v| v.len()),
            Some(1 << 20)
        );
    }
}

#[tokio::test]
async fn a_part_naming_an_entity_of_another_shard_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let to = node(&dir, "to");
    let part = ShardPart {
        index: 0,
        last: true,
        entities: vec![
            EntityRecord {
                id: "a1".into(),
                meta: Some((1, 6)),
                ..EntityRecord::default()
            },
            EntityRecord {
                id: "b1".into(),
                ..EntityRecord::default()
            },
        ],
        remembered: Vec::new(),
    };
    assert!(to.install(scope(1), 7, part).await.is_err());
    let a1 = EntityAddress::new("t", "counter", "a1");
    assert_eq!(
        to.meta(&a1).unwrap().version,
        None,
        "nothing of the part landed"
    );
}

#[tokio::test]
async fn a_shard_starts_its_lineage_from_its_own_rows_or_from_empty_never_from_stale_ones() {
    let dir = tempfile::tempdir().unwrap();
    let state = node(&dir, "node");
    let (a1, b1) = (
        EntityAddress::new("t", "counter", "a1"),
        EntityAddress::new("t", "counter", "b1"),
    );
    write_entity(&state, "a1", 1).await;
    write_entity(&state, "b1", 2).await;
    // Rows written before any record: kept, and the lineage recorded.
    state.begin_lineage(scope(1), 4).await.unwrap();
    assert_eq!(state.get(&a1, "value").unwrap(), Some(vec![1]));
    // A restart at the same generation keeps them.
    state.begin_lineage(scope(1), 4).await.unwrap();
    assert_eq!(state.get(&a1, "value").unwrap(), Some(vec![1]));
    // A later generation starts afresh: the shard's rows go, the other shard's stay.
    state.begin_lineage(scope(1), 9).await.unwrap();
    assert_eq!(state.get(&a1, "value").unwrap(), None);
    assert_eq!(state.get(&b1, "value").unwrap(), Some(vec![2]));
    assert!(state.outbox(&a1, 10).unwrap().is_empty());
    // Parts of a move installed here at generation 12 are that lineage's: kept when it
    // begins; an older generation named afterwards changes nothing.
    let part = ShardPart {
        index: 0,
        last: true,
        entities: vec![EntityRecord {
            id: "a7".into(),
            state: vec![StateRow {
                key: "value".into(),
                value: vec![7],
            }],
            ..EntityRecord::default()
        }],
        remembered: Vec::new(),
    };
    state.install(scope(1), 12, part).await.unwrap();
    state.begin_lineage(scope(1), 12).await.unwrap();
    state.begin_lineage(scope(1), 10).await.unwrap();
    let a7 = EntityAddress::new("t", "counter", "a7");
    assert_eq!(state.get(&a7, "value").unwrap(), Some(vec![7]));
}

/// A value of `len` bytes that differs from key to key and along its length.
fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|at| (at / 7 + seed * 31) as u8).collect()
}

/// A1 of shard 1 with 40 MiB over 160 keys, one 10 MiB value (more than a part), tells,
/// reminders and a client key; small entities around it in both shards.
async fn write_large_entity(state: &LocalState) {
    for batch in 0..10 {
        let mut writes = WriteSet::new(EntityAddress::new("t", "counter", "a1"));
        for key in batch * 16..(batch + 1) * 16 {
            writes.put(format!("k{key:03}"), pattern(key, 256 << 10));
        }
        writes.set_version(3);
        state.commit(writes).await.unwrap();
    }
    let mut writes = WriteSet::new(EntityAddress::new("t", "counter", "a1"));
    writes.put("big", pattern(999, 10 << 20));
    state.commit(writes).await.unwrap();
    write_entity(state, "a1", 5).await;
    for id in ["a0", "a2", "b1"] {
        write_entity(state, id, 1).await;
    }
}

/// Cuts the shard's export, checking each part as it comes, and installs it into `to` at once
/// (so no more than one part is held); answers how many parts there were.
async fn stream(from: &LocalState, to: &LocalState, generation: u64) -> usize {
    let mut export = from.export_snapshot(&scope(1)).unwrap();
    let mut count = 0;
    while let Some(part) = export.next() {
        let part = part.unwrap();
        assert_eq!(part.index as usize, count);
        let bytes = part.bytes();
        assert!(bytes <= SHARD_PART_BYTES_MAX, "part {count}: {bytes} bytes");
        assert!(bytes <= TRANSFER_BYTES_IN_FLIGHT_MAX);
        let encoded = rmp_serde::to_vec_named(&part).unwrap().len();
        assert!(
            encoded <= bytes,
            "part {count}: {encoded} bytes encoded, counted {bytes}"
        );
        assert!(
            export.buffered_bytes() <= 4096,
            "the export holds its cursor only"
        );
        to.install(scope(1), generation, part).await.unwrap();
        count += 1;
    }
    count
}

#[tokio::test]
async fn an_entity_larger_than_a_part_streams_in_bounded_parts_and_installs_identically() {
    let dir = tempfile::tempdir().unwrap();
    let (from, to) = (node(&dir, "from"), node(&dir, "to"));
    write_large_entity(&from).await;
    let count = stream(&from, &to, 7).await;
    assert!(count >= 13, "50 MiB in parts of 4 MiB: {count}");

    let a1 = EntityAddress::new("t", "counter", "a1");
    assert_eq!(
        to.get(&a1, "big").unwrap(),
        Some(pattern(999, 10 << 20)),
        "the value sent in chunks is whole"
    );
    assert_eq!(to.get(&a1, "k123").unwrap(), Some(pattern(123, 256 << 10)));
    assert_eq!(to.meta(&a1).unwrap(), from.meta(&a1).unwrap());
    // Every row of the shard, compared part by part (both exports cut the same rows alike).
    assert_eq!(export_all(&to, 1), export_all(&from, 1));
    assert!(
        export_all(&to, 0)
            .iter()
            .all(|part| part.entities.is_empty())
    );
}

#[tokio::test]
async fn an_interrupted_install_resumed_or_started_over_gives_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (from, to, again) = (node(&dir, "from"), node(&dir, "to"), node(&dir, "again"));
    write_large_entity(&from).await;
    let sent = export_all(&from, 1);
    assert!(sent.len() > 6);

    // Parts 0..5 installed, the answer to part 4 lost: part 4 comes again, then the rest.
    for part in &sent[..5] {
        to.install(scope(1), 7, part.clone()).await.unwrap();
    }
    // The installed parts' rows are there (not served: the move is not complete).
    let a1 = EntityAddress::new("t", "counter", "a1");
    assert!(to.get(&a1, "k000").unwrap().is_some());
    for part in &sent[4..] {
        to.install(scope(1), 7, part.clone()).await.unwrap();
    }
    assert_eq!(export_all(&to, 1), sent);

    // The sender restarts mid-transfer and starts over from a new snapshot: same rows.
    for part in &sent[..5] {
        again.install(scope(1), 7, part.clone()).await.unwrap();
    }
    stream(&from, &again, 7).await;
    assert_eq!(export_all(&again, 1), sent);
    // Every part again after the last: nothing changes.
    for part in sent.iter().rev() {
        again.install(scope(1), 7, part.clone()).await.unwrap();
    }
    assert_eq!(export_all(&again, 1), sent);
}

#[tokio::test]
async fn a_shard_whose_move_did_not_complete_is_served_empty_never_in_part() {
    let dir = tempfile::tempdir().unwrap();
    let (from, to) = (node(&dir, "from"), node(&dir, "to"));
    write_large_entity(&from).await;
    let sent = export_all(&from, 1);
    for part in &sent[..3] {
        to.install(scope(1), 7, part.clone()).await.unwrap();
    }
    // A later move's parts still arriving are kept when an older generation begins...
    to.begin_lineage(scope(1), 6).await.unwrap();
    let a1 = EntityAddress::new("t", "counter", "a1");
    assert!(to.get(&a1, "k000").unwrap().is_some());
    // ...but serving at the move's own generation without its last part starts from empty.
    to.begin_lineage(scope(1), 7).await.unwrap();
    assert_eq!(to.get(&a1, "k000").unwrap(), None);
    assert!(
        export_all(&to, 1)
            .iter()
            .all(|part| part.entities.is_empty())
    );
    // A part of that move after its part 0 was dropped is refused.
    assert!(to.install(scope(1), 7, sent[3].clone()).await.is_err());
}

#[tokio::test]
async fn a_chunk_outside_its_value_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let to = node(&dir, "to");
    for (offset, len, total) in [(0, 0, 10), (8, 4, 10), (u64::MAX, 2, 10)] {
        let part = ShardPart {
            index: 0,
            last: true,
            entities: vec![EntityRecord {
                id: "a1".into(),
                chunks: vec![ValueChunk {
                    key: "big".into(),
                    offset,
                    total,
                    bytes: vec![1; len],
                }],
                ..EntityRecord::default()
            }],
            remembered: Vec::new(),
        };
        assert!(
            to.install(scope(1), 7, part).await.is_err(),
            "{offset}+{len} of {total}"
        );
    }
}
