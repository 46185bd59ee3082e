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

    let parts = from.export(&scope(1)).unwrap();
    assert_eq!(parts.len(), 1);
    assert!(parts[0].last);
    assert_eq!(parts[0].entities.len(), 2, "a1 and a2, not b1");
    assert_eq!(parts[0].remembered, vec!["a1", "a2"]);
    for part in parts.clone() {
        to.install(scope(1), 7, part).await.unwrap();
    }
    from.discard(scope(1)).await.unwrap();
    // A sender that lost its rows and sends the same move again changes nothing here.
    let empty = from.export(&scope(1)).unwrap();
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
    assert_eq!(to.due_reminders(u64::MAX, 10).unwrap().len(), 2);
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
    assert_eq!(from.due_reminders(u64::MAX, 10).unwrap().len(), 1);
    assert!(from.list_ids(&type_key, 1).unwrap().is_empty());
    let b1 = EntityAddress::new("t", "counter", "b1");
    assert_eq!(from.get(&b1, "value").unwrap(), Some(vec![3]));
    assert_eq!(from.pending_messages().unwrap(), (1, 1));
    // Exporting again from the new owner gives the same parts.
    assert_eq!(to.export(&scope(1)).unwrap(), parts);
}

fn from_meta(version: u32, state_bytes: u64) -> crate::EntityMeta {
    crate::EntityMeta {
        version: Some(version),
        state_bytes,
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
    let parts = from.export(&scope(1)).unwrap();
    assert!(parts.len() >= 3, "10 MiB in parts of at most 4 MiB");
    for (index, part) in parts.iter().enumerate() {
        assert_eq!(part.index as usize, index);
        assert_eq!(part.last, index + 1 == parts.len());
        assert!(part.bytes() <= SHARD_PART_BYTES_MAX + (1 << 20));
    }
    let total: usize = parts.iter().map(|part| part.entities.len()).sum();
    assert_eq!(total, 10);
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
