//! The catalog state machine seen through its commands.

use super::*;
use crate::{ShardAssignment, ShardMove, TypeOptions};
use redb::Database;
use std::sync::Arc;
use tessera_contract::TypeKey;
use tessera_contract::{Allocation, ShardKey};

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
) -> Result<Applied, MetadataError> {
    deploy_sized(store, tenant, entity_type, sha256, 3)
}

fn deploy_sized(
    store: &MetadataStore,
    tenant: &str,
    entity_type: &str,
    sha256: &str,
    size_bytes: u64,
) -> Result<Applied, MetadataError> {
    store.apply(Command::DeployVersion {
        tenant: tenant.into(),
        entity_type: entity_type.into(),
        sha256: sha256.into(),
        size_bytes,
        options: TypeOptions::default(),
        deployed_ms: 2,
    })
}

#[test]
fn versions_count_from_one_and_rollback_switches_the_active_one() {
    let (_dir, store) = store();
    create(&store, "acme").unwrap();
    deploy(&store, "acme", "counter", "p1").unwrap();
    let Applied::Type(record) = deploy(&store, "acme", "counter", "p2").unwrap() else {
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
        deploy(&store, "ghost", "counter", "p"),
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
}

#[test]
fn a_deploy_is_a_hash_and_a_size_and_applies_without_bytes() {
    let (_dir, store) = store();
    create(&store, "acme").unwrap();
    let Applied::Type(record) = deploy_sized(&store, "acme", "counter", "p1", 1234).unwrap() else {
        panic!("a deploy applies as a type change")
    };
    let version = record.active().unwrap();
    assert_eq!((version.sha256.as_str(), version.size_bytes), ("p1", 1234));
    assert!(store.plugin_used("p1").unwrap());
    assert_eq!(store.tenant_plugin_bytes("acme").unwrap(), 1234);
}

#[test]
fn plugin_quotas_refuse_a_deploy_and_change_nothing() {
    let (_dir, store) = store();
    let quotas = Quotas {
        plugin_bytes_max: 100,
        plugin_bytes_total_max: 250,
        ..Quotas::default()
    };
    store
        .apply(Command::CreateTenant {
            name: "acme".into(),
            token_sha256: "t".into(),
            quotas,
            created_ms: 1,
        })
        .unwrap();
    deploy_sized(&store, "acme", "a", "p1", 100).unwrap();
    deploy_sized(&store, "acme", "b", "p2", 100).unwrap();
    let before = (
        store.entity_types(None).unwrap(),
        store.applied_commands().unwrap(),
    );
    let too_large = deploy_sized(&store, "acme", "c", "p3", 101);
    assert!(matches!(too_large, Err(MetadataError::QuotaExceeded(_))));
    let past_total = deploy_sized(&store, "acme", "a", "p4", 51);
    assert!(
        matches!(&past_total, Err(MetadataError::QuotaExceeded(why)) if why.contains("plugin_bytes_total_max")),
        "{past_total:?}"
    );
    assert_eq!(
        (
            store.entity_types(None).unwrap(),
            store.applied_commands().unwrap()
        ),
        before,
        "a refused deploy changes nothing"
    );
    assert!(!store.plugin_used("p3").unwrap() && !store.plugin_used("p4").unwrap());
    deploy_sized(&store, "acme", "a", "p5", 50).unwrap();
    store
        .apply(Command::DeleteType {
            tenant: "acme".into(),
            entity_type: "b".into(),
        })
        .unwrap();
    deploy_sized(&store, "acme", "c", "p6", 100).expect("deleting a type frees its bytes");
}

#[test]
fn a_deploy_past_the_version_limit_is_refused_and_names_no_plugin() {
    let (_dir, store) = store();
    create(&store, "acme").unwrap();
    for _ in 0..VERSIONS_PER_TYPE_MAX {
        deploy(&store, "acme", "counter", "same").unwrap();
    }
    let refused = deploy(&store, "acme", "counter", "other");
    assert_eq!(
        refused,
        Err(MetadataError::TooManyVersions("counter".into()))
    );
    assert!(!store.plugin_used("other").unwrap());
}

#[test]
fn deleting_types_ends_the_use_of_plugins_no_version_uses() {
    let (_dir, store) = store();
    create(&store, "acme").unwrap();
    deploy(&store, "acme", "a", "shared").unwrap();
    deploy(&store, "acme", "b", "shared").unwrap();
    deploy(&store, "acme", "b", "only-b").unwrap();
    let delete = |name: &str| {
        store.apply(Command::DeleteType {
            tenant: "acme".into(),
            entity_type: name.into(),
        })
    };
    delete("b").unwrap();
    assert!(store.plugin_used("shared").unwrap(), "type a still uses it");
    assert!(!store.plugin_used("only-b").unwrap());
    delete("a").unwrap();
    assert!(!store.plugin_used("shared").unwrap());
    assert!(matches!(delete("a"), Err(MetadataError::NoType(_, _))));
}

fn assign(key: ShardKey, expected: Option<u64>, to: &str) -> ShardAssignment {
    ShardAssignment {
        key,
        expected,
        to: to.into(),
    }
}

#[test]
fn shard_assignments_take_growing_generations_and_persist() {
    let (_dir, store) = store();
    let key = |shard| ShardKey::new(TypeKey::new("acme", "counter"), shard);
    let Applied::ShardsAssigned(first) = store
        .apply(Command::AssignShards {
            epoch: 0,
            assignments: vec![assign(key(1), None, "n1"), assign(key(2), None, "n2")],
        })
        .unwrap()
    else {
        panic!("assignments apply as assigned shards")
    };
    assert_eq!(first[0].1.generation, 1);
    assert_eq!(first[1].1.generation, 2);
    store
        .apply(Command::AssignShards {
            epoch: 0,
            assignments: vec![assign(key(1), Some(1), "n2")],
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

#[test]
fn a_deposed_coordinator_changes_no_shard() {
    let (_dir, store) = store();
    let key = |shard| ShardKey::new(TypeKey::new("acme", "counter"), shard);
    store.apply(Command::SeatCoordinator { epoch: 4 }).unwrap();
    store
        .apply(Command::AssignShards {
            epoch: 4,
            assignments: vec![assign(key(1), None, "n1")],
        })
        .unwrap();
    // The coordinator of view 7 takes the seat; view 4's goes on deciding.
    assert_eq!(
        store.apply(Command::SeatCoordinator { epoch: 7 }).unwrap(),
        Applied::CoordinatorSeated { epoch: 7 }
    );
    let before = store.shard_table().unwrap();
    let deposed = [
        Command::AssignShards {
            epoch: 4,
            assignments: vec![assign(key(2), None, "n2")],
        },
        Command::AssignShards {
            epoch: 4,
            assignments: vec![assign(key(1), Some(1), "n2")],
        },
        Command::MoveShards {
            epoch: 4,
            moves: vec![ShardMove {
                key: key(1),
                from: "n1".into(),
                expected: 1,
                to: "n3".into(),
            }],
        },
    ];
    for command in deposed {
        assert_eq!(
            store.apply(command),
            Err(MetadataError::StaleCoordinator {
                epoch: 4,
                seated: 7
            })
        );
    }
    assert_eq!(
        store.apply(Command::SeatCoordinator { epoch: 4 }),
        Err(MetadataError::StaleCoordinator {
            epoch: 4,
            seated: 7
        }),
        "a deposed coordinator cannot take the seat back"
    );
    assert_eq!(store.shard_table().unwrap(), before);
    assert_eq!(store.coordinator_epoch().unwrap(), 7);
}

#[test]
fn a_decision_on_a_generation_the_shard_no_longer_has_is_refused_whole() {
    let (_dir, store) = store();
    let key = |shard| ShardKey::new(TypeKey::new("acme", "counter"), shard);
    store
        .apply(Command::AssignShards {
            epoch: 0,
            assignments: vec![assign(key(1), None, "n1")],
        })
        .unwrap();
    let before = store.shard_table().unwrap();
    // A second first allocation of shard 1, batched with a good one: nothing is written.
    let refused = store.apply(Command::AssignShards {
        epoch: 0,
        assignments: vec![assign(key(2), None, "n2"), assign(key(1), None, "n2")],
    });
    assert!(
        matches!(
            refused,
            Err(MetadataError::ShardMoved {
                expected: None,
                current: Some(1),
                ..
            })
        ),
        "{refused:?}"
    );
    let moved = store.apply(Command::MoveShards {
        epoch: 0,
        moves: vec![ShardMove {
            key: key(1),
            from: "n1".into(),
            expected: 9,
            to: "n2".into(),
        }],
    });
    assert!(
        matches!(moved, Err(MetadataError::ShardMoved { .. })),
        "{moved:?}"
    );
    assert_eq!(store.shard_table().unwrap(), before);
    assert!(store.shard_handoffs().unwrap().is_empty());
}

/// A removed member's state is declared lost: its shards get new generations (still naming it
/// until a coordinator gives them away), so a node restarted under the same id on an empty disk
/// starts a new lineage instead of continuing the lost one empty. Other shards keep theirs.
#[test]
fn removing_a_member_gives_the_shards_it_held_new_generations() {
    let (_dir, store) = store();
    let join = |node: &str| Command::JoinMember {
        node: node.into(),
        cluster_address: format!("{node}:7946"),
        api_address: format!("{node}:8080"),
        roles: ["shard".to_string()].into(),
        joined_ms: 10,
    };
    let set = |node: &str, state| Command::SetMemberState {
        node: node.into(),
        state,
        updated_ms: 20,
    };
    store.apply(join("n1")).unwrap();
    store.apply(join("n3")).unwrap();
    let key = |shard| ShardKey::new(TypeKey::new("acme", "counter"), shard);
    store
        .apply(Command::AssignShards {
            epoch: 0,
            assignments: vec![
                assign(key(1), None, "n3"),
                assign(key(2), None, "n1"),
                assign(key(3), None, "n3"),
            ],
        })
        .unwrap();
    let before = store.shard_table().unwrap();
    store.apply(set("n3", MemberState::Up)).unwrap();
    store.apply(set("n3", MemberState::Down)).unwrap();
    assert_eq!(
        store.shard_table().unwrap(),
        before,
        "down keeps the lineage"
    );
    store.apply(set("n3", MemberState::Removed)).unwrap();
    let after = store.shard_table().unwrap();
    assert_eq!(
        after.get(&key(2)),
        before.get(&key(2)),
        "n1's shard is untouched"
    );
    for shard in [1, 3] {
        let (old, new) = (&before[&key(shard)], &after[&key(shard)]);
        assert_eq!(new.node, "n3");
        assert!(
            new.generation > old.generation && new.generation > before[&key(2)].generation,
            "shard {shard}: {old:?} -> {new:?}"
        );
    }
    // A coordinator that read the old generation is refused and reads again.
    let stale = store.apply(Command::AssignShards {
        epoch: 0,
        assignments: vec![assign(key(1), Some(before[&key(1)].generation), "n1")],
    });
    assert!(
        matches!(stale, Err(MetadataError::ShardMoved { .. })),
        "{stale:?}"
    );
}
