//! The tables' exact state sizes through puts, overwrites and deletes, the migration of a
//! legacy version table, and remembered ids by shard across a reopen.

use super::*;

fn store() -> (tempfile::TempDir, StateStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = StateStore::open(&dir.path().join("db.redb")).unwrap();
    (dir, store)
}

#[test]
fn state_bytes_are_exact_through_puts_overwrites_and_deletes() {
    let (_dir, store) = store();
    let entity = EntityAddress::new("t", "c", "e");
    let mut writes = WriteSet::new(entity.clone());
    writes.put("a", vec![0; 10]);
    writes.put("bb", vec![0; 5]);
    writes.set_version(3);
    store.commit_one(&writes).unwrap();
    assert_eq!(
        store.meta(&entity).unwrap(),
        EntityMeta {
            version: Some(3),
            state_bytes: 11 + 7,
            stamp: 0,
        }
    );
    let mut writes = WriteSet::new(entity.clone());
    writes.put("a", vec![0; 2]);
    writes.delete("bb");
    writes.delete("never-written");
    store.commit_one(&writes).unwrap();
    let meta = store.meta(&entity).unwrap();
    assert_eq!(meta.state_bytes, 3, "only a=[0;2] is left");
    assert_eq!(meta.version, Some(3), "a commit without a version keeps it");
    assert_eq!(
        store.entries(&entity, 10).unwrap(),
        vec![("a".into(), vec![0, 0])]
    );
}

#[test]
fn state_bytes_count_past_ten_thousand_keys() {
    let (_dir, store) = store();
    let entity = EntityAddress::new("t", "c", "big");
    let mut writes = WriteSet::new(entity.clone());
    for index in 0..12_000 {
        writes.put(format!("k{index:05}"), vec![1]);
    }
    store.commit_one(&writes).unwrap();
    assert_eq!(store.meta(&entity).unwrap().state_bytes, 12_000 * 7);
    assert_eq!(store.entries(&entity, 100).unwrap().len(), 100);
}

#[test]
fn a_legacy_version_table_is_migrated_with_exact_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db.redb");
    {
        let database = Database::create(&path).unwrap();
        let transaction = database.begin_write().unwrap();
        {
            let mut state = transaction.open_table(ENTITY_STATE).unwrap();
            state
                .insert(("t", "c", "e", "value"), [1u8, 2].as_slice())
                .unwrap();
            let mut versions = transaction.open_table(LEGACY_ENTITY_VERSION).unwrap();
            versions.insert(("t", "c", "e"), 4).unwrap();
        }
        transaction.commit().unwrap();
    }
    let store = StateStore::open(&path).unwrap();
    let entity = EntityAddress::new("t", "c", "e");
    assert_eq!(
        store.meta(&entity).unwrap(),
        EntityMeta {
            version: Some(4),
            state_bytes: 7,
            stamp: 0,
        }
    );
    drop(store);
    // A second open finds nothing left to migrate.
    let store = StateStore::open(&path).unwrap();
    assert_eq!(store.meta(&entity).unwrap().version, Some(4));
}

#[test]
fn remembered_ids_list_by_shard_and_survive_reopen() {
    use crate::remember::RememberedId;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("node.redb");
    let counter = TypeKey::new("acme", "counter");
    let other = TypeKey::new("acme", "counterx");
    let id = |type_key: &TypeKey, shard, id: &str| RememberedId {
        type_key: type_key.clone(),
        shard,
        id: id.into(),
    };
    let apply = |store: &StateStore, ops: &[RememberOp]| {
        let transaction = store.database().begin_write().unwrap();
        apply_remember_ops(&transaction, ops.iter()).unwrap();
        transaction.commit().unwrap();
    };
    {
        let store = StateStore::open(&path).unwrap();
        apply(
            &store,
            &[
                RememberOp::Started(id(&counter, 3, "b")),
                RememberOp::Started(id(&counter, 3, "a")),
                RememberOp::Started(id(&counter, 7, "c")),
                RememberOp::Started(id(&other, 5, "z")),
                RememberOp::Started(id(&counter, u32::MAX, "m")),
                RememberOp::Forgotten(id(&counter, 7, "c")),
                RememberOp::Started(id(&counter, 7, "d")),
            ],
        );
    }
    let store = StateStore::open(&path).unwrap();
    assert_eq!(
        store.remembered_shards(&counter).unwrap(),
        vec![3, 7, u32::MAX]
    );
    assert_eq!(store.remembered_shards(&other).unwrap(), vec![5]);
    assert_eq!(store.remembered_ids(&counter, 3).unwrap(), vec!["a", "b"]);
    assert_eq!(store.remembered_ids(&counter, 7).unwrap(), vec!["d"]);
    assert!(store.remembered_ids(&counter, 4).unwrap().is_empty());
    // Within one batch the operations on one id apply in the order given.
    apply(
        &store,
        &[
            RememberOp::Forgotten(id(&counter, 4, "x")),
            RememberOp::Started(id(&counter, 4, "x")),
            RememberOp::Started(id(&counter, 4, "a")),
            RememberOp::Forgotten(id(&counter, 4, "a")),
        ],
    );
    assert_eq!(store.remembered_ids(&counter, 4).unwrap(), vec!["x"]);
}
