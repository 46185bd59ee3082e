//! The catalog state machine seen through its commands.

use super::*;
use crate::TypeOptions;
use redb::Database;
use std::sync::Arc;
use tessera_contract::TypeKey;

fn store() -> (tempfile::TempDir, MetadataStore) {
    let dir = tempfile::tempdir().unwrap();
    let database = Arc::new(Database::create(dir.path().join("m.redb")).unwrap());
    (dir, MetadataStore::open(database).unwrap())
}

fn create(store: &MetadataStore, name: &str) -> Result<Applied, MetadataError> {
    store.apply(Command::CreateTenant {
        name: name.into(),
        token_sha256: format!("hash-{name}"),
        quotas: Quotas::default(),
        created_ms: 1,
    })
}

fn deploy(
    store: &MetadataStore,
    tenant: &str,
    entity_type: &str,
    sha256: &str,
    plugin: Option<Vec<u8>>,
) -> Result<Applied, MetadataError> {
    store.apply(Command::DeployVersion {
        tenant: tenant.into(),
        entity_type: entity_type.into(),
        sha256: sha256.into(),
        plugin,
        size_bytes: 3,
        options: TypeOptions::default(),
        deployed_ms: 2,
    })
}

#[test]
fn versions_count_from_one_and_rollback_switches_the_active_one() {
    let (_dir, store) = store();
    create(&store, "acme").unwrap();
    deploy(&store, "acme", "counter", "p1", Some(vec![1])).unwrap();
    let Applied::Type(record) = deploy(&store, "acme", "counter", "p2", Some(vec![2])).unwrap()
    else {
        panic!("a deploy applies as a type change")
    };
    assert_eq!(record.active_version, 2);
    let versions: Vec<u32> = record.versions.iter().map(|v| v.version).collect();
    assert_eq!(versions, vec![1, 2]);
    store
        .apply(Command::SetActiveVersion {
            tenant: "acme".into(),
            entity_type: "counter".into(),
            version: 1,
        })
        .unwrap();
    let record = store.entity_type("acme", "counter").unwrap().unwrap();
    assert_eq!(record.active().unwrap().sha256, "p1");
}

#[test]
fn refused_commands_change_nothing() {
    let (_dir, store) = store();
    create(&store, "acme").unwrap();
    assert_eq!(
        create(&store, "acme"),
        Err(MetadataError::TenantExists("acme".into()))
    );
    assert!(matches!(
        create(&store, "bad name"),
        Err(MetadataError::InvalidName(_))
    ));
    assert_eq!(
        deploy(&store, "acme", "counter", "missing", None),
        Err(MetadataError::NoPlugin("missing".into()))
    );
    assert_eq!(
        deploy(&store, "ghost", "counter", "p", Some(vec![1])),
        Err(MetadataError::NoTenant("ghost".into()))
    );
    let no_version = store.apply(Command::SetActiveVersion {
        tenant: "acme".into(),
        entity_type: "counter".into(),
        version: 9,
    });
    assert!(matches!(no_version, Err(MetadataError::NoType(_, _))));
    assert_eq!(store.tenants().unwrap().len(), 1);
    assert!(store.entity_types(None).unwrap().is_empty());
    assert_eq!(
        store.plugin_count().unwrap(),
        0,
        "a refused deploy stores no bytes"
    );
}

#[test]
fn a_deploy_past_the_version_limit_leaves_no_bytes_behind() {
    let (_dir, store) = store();
    create(&store, "acme").unwrap();
    for version in 0..VERSIONS_PER_TYPE_MAX {
        let plugin = (version == 0).then(|| vec![1]);
        deploy(&store, "acme", "counter", "same", plugin).unwrap();
    }
    let refused = deploy(&store, "acme", "counter", "other", Some(vec![2]));
    assert_eq!(
        refused,
        Err(MetadataError::TooManyVersions("counter".into()))
    );
    assert!(!store.has_plugin("other").unwrap());
    assert_eq!(store.plugin_count().unwrap(), 1);
}

#[test]
fn deleting_types_frees_plugin_bytes_no_version_uses() {
    let (_dir, store) = store();
    create(&store, "acme").unwrap();
    deploy(&store, "acme", "a", "shared", Some(vec![1])).unwrap();
    deploy(&store, "acme", "b", "shared", None).unwrap();
    deploy(&store, "acme", "b", "only-b", Some(vec![2])).unwrap();
    let delete = |name: &str| {
        store.apply(Command::DeleteType {
            tenant: "acme".into(),
            entity_type: name.into(),
        })
    };
    delete("b").unwrap();
    assert!(store.has_plugin("shared").unwrap(), "type a still uses it");
    assert!(!store.has_plugin("only-b").unwrap());
    delete("a").unwrap();
    assert_eq!(store.plugin_count().unwrap(), 0);
    assert!(matches!(delete("a"), Err(MetadataError::NoType(_, _))));
}

#[test]
fn shard_assignments_take_growing_generations_and_persist() {
    let (_dir, store) = store();
    let key = |shard| ShardKey::new(TypeKey::new("acme", "counter"), shard);
    let Applied::ShardsAssigned(first) = store
        .apply(Command::AssignShards {
            assignments: vec![(key(1), "n1".into()), (key(2), "n2".into())],
        })
        .unwrap()
    else {
        panic!("assignments apply as assigned shards")
    };
    assert_eq!(first[0].1.generation, 1);
    assert_eq!(first[1].1.generation, 2);
    store
        .apply(Command::AssignShards {
            assignments: vec![(key(1), "n2".into())],
        })
        .unwrap();
    let table = store.shard_table().unwrap();
    assert_eq!(
        table[&key(1)],
        Allocation {
            node: "n2".into(),
            generation: 3
        }
    );
    assert_eq!(table[&key(2)].node, "n2");
}
