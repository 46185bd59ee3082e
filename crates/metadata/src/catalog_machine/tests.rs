//! The catalog machine is deterministic, restores exactly what it snapshots, and refuses bad
//! operations and snapshots without changing anything.

use super::*;
use crate::{MemberState, Quotas, ShardAssignment, TypeOptions};
use std::sync::Arc;
use tessera_contract::{ShardKey, TypeKey};

fn machine() -> CatalogMachine {
    let backend = redb::backends::InMemoryBackend::new();
    let database = redb::Database::builder()
        .create_with_backend(backend)
        .expect("an in-memory database");
    CatalogMachine::new(MetadataStore::open(Arc::new(database)).expect("catalog tables"))
}

/// A sequence touching every table, with refusals mixed in.
fn commands() -> Vec<Command> {
    let plugin = b"\0asm not really a component".to_vec();
    vec![
        Command::CreateTenant {
            name: "acme".into(),
            token_sha256: "aa".into(),
            quotas: Quotas::default(),
            created_ms: 1,
        },
        // Refused: exists.
        Command::CreateTenant {
            name: "acme".into(),
            token_sha256: "bb".into(),
            quotas: Quotas::default(),
            created_ms: 2,
        },
        Command::DeployVersion {
            tenant: "acme".into(),
            entity_type: "counter".into(),
            sha256: "p1".into(),
            size_bytes: plugin.len() as u64,
            options: TypeOptions::default(),
            deployed_ms: 3,
        },
        // Refused: over the tenant's plugin_bytes_max.
        Command::DeployVersion {
            tenant: "acme".into(),
            entity_type: "counter".into(),
            sha256: "p2".into(),
            size_bytes: u64::MAX,
            options: TypeOptions::default(),
            deployed_ms: 4,
        },
        Command::JoinMember {
            node: "n1".into(),
            cluster_address: "127.0.0.1:1".into(),
            api_address: "127.0.0.1:2".into(),
            roles: Default::default(),
            joined_ms: 5,
        },
        Command::SetMemberState {
            node: "n1".into(),
            state: MemberState::Up,
            updated_ms: 6,
        },
        Command::SeatCoordinator { epoch: 2 },
        Command::AssignShards {
            epoch: 2,
            assignments: vec![ShardAssignment {
                key: ShardKey::new(TypeKey::new("acme", "counter"), 3),
                expected: None,
                to: "n1".into(),
            }],
        },
    ]
}

#[test]
fn replicas_applying_the_same_commands_answer_alike_and_snapshot_identically() {
    let (mut one, mut two) = (machine(), machine());
    for command in commands() {
        let operation = CatalogMachine::encode_command(&command);
        let (first, second) = (one.apply(&operation), two.apply(&operation));
        assert_eq!(first, second, "the same answer for {command:?}");
    }
    assert_eq!(one.snapshot(), two.snapshot());
    assert_eq!(one.take_applied().len(), 6, "two of eight were refused");
    assert!(one.take_applied().is_empty(), "taken once");
}

#[test]
fn a_refused_command_answers_its_error() {
    let mut catalog = machine();
    let update = Command::UpdateQuotas {
        name: "ghost".into(),
        quotas: Quotas::default(),
    };
    let answer = catalog.apply(&CatalogMachine::encode_command(&update));
    assert_eq!(
        CatalogMachine::decode_result(&answer),
        Err(MetadataError::NoTenant("ghost".into()))
    );
}

#[test]
fn a_restored_snapshot_replaces_every_table() {
    let mut source = machine();
    for command in commands() {
        source.apply(&CatalogMachine::encode_command(&command));
    }
    let mut target = machine();
    // Rows the snapshot does not have must go.
    target.apply(&CatalogMachine::encode_command(&Command::CreateTenant {
        name: "stale".into(),
        token_sha256: "ss".into(),
        quotas: Quotas::default(),
        created_ms: 9,
    }));
    target.take_applied();
    target.restore(&source.snapshot()).expect("a good snapshot");
    assert_eq!(target.snapshot(), source.snapshot());
    assert!(target.store().tenant("stale").expect("read").is_none());
    assert!(
        target
            .store()
            .tenant_by_token_hash("ss")
            .expect("read")
            .is_none()
    );
    assert_eq!(target.store().members().expect("read").len(), 1);
    assert_eq!(target.store().shard_table().expect("read").len(), 1);
    assert!(target.store().plugin_used("p1").expect("read"));
    assert_eq!(target.take_applied(), vec![Applied::Restored]);
    // Applying on after a restore continues from the same counters on both.
    let next = CatalogMachine::encode_command(&Command::AssignShards {
        epoch: 2,
        assignments: vec![ShardAssignment {
            key: ShardKey::new(TypeKey::new("acme", "counter"), 4),
            expected: None,
            to: "n1".into(),
        }],
    });
    assert_eq!(target.apply(&next), source.apply(&next));
    assert_eq!(target.snapshot(), source.snapshot());
}

#[test]
fn a_checkpoint_holds_no_plugin_bytes_however_large_the_plugins() {
    let mut machine = machine();
    let quotas = Quotas {
        plugin_bytes_max: 64 << 20,
        plugin_bytes_total_max: 1 << 30,
        ..Quotas::default()
    };
    machine.apply(&CatalogMachine::encode_command(&Command::CreateTenant {
        name: "acme".into(),
        token_sha256: "aa".into(),
        quotas,
        created_ms: 1,
    }));
    for version in 0..16u32 {
        let answer = machine.apply(&CatalogMachine::encode_command(&Command::DeployVersion {
            tenant: "acme".into(),
            entity_type: "big".into(),
            sha256: format!("{version:064x}"),
            size_bytes: 64 << 20,
            options: TypeOptions::default(),
            deployed_ms: 2,
        }));
        assert!(CatalogMachine::decode_result(&answer).is_ok());
    }
    // A gigabyte of plugins; the checkpoint holds their names and sizes only.
    let snapshot = machine.snapshot();
    assert!(snapshot.len() < 16 << 10, "{} bytes", snapshot.len());
    let decoded: CatalogSnapshot = rmp_serde::from_slice(&snapshot).expect("a snapshot");
    assert!(decoded.plugins.is_empty());
}

#[test]
fn a_checkpoint_of_an_old_release_with_plugin_bytes_moves_them_to_the_blob_store() {
    let source = machine();
    let bytes = b"old plugin".to_vec();
    let name = crate::blob_name(&bytes);
    let mut snapshot: CatalogSnapshot =
        rmp_serde::from_slice(&source.snapshot()).expect("a snapshot");
    snapshot.plugins = vec![(name.clone(), serde_bytes::ByteBuf::from(bytes.clone()))];
    let mut target = machine();
    let database = target.store().database.clone();
    target
        .restore(&rmp_serde::to_vec(&snapshot).expect("encodes"))
        .expect("restores");
    let blobs = crate::BlobStore::open(database).expect("blob tables");
    assert_eq!(blobs.get(&name).expect("read"), Some(bytes));
    let again: CatalogSnapshot = rmp_serde::from_slice(&target.snapshot()).expect("a snapshot");
    assert!(again.plugins.is_empty(), "never written again");
}

#[test]
fn garbage_is_refused_and_changes_nothing() {
    let mut catalog = machine();
    for command in commands() {
        catalog.apply(&CatalogMachine::encode_command(&command));
    }
    let before = catalog.snapshot();
    let answer = catalog.apply(&[0xc1, 0x00, 0xff]);
    assert!(matches!(
        CatalogMachine::decode_result(&answer),
        Err(MetadataError::Malformed(_))
    ));
    assert!(catalog.restore(&[0x93, 0x01]).is_err());
    assert!(catalog.restore(b"not a snapshot").is_err());
    assert_eq!(catalog.snapshot(), before);
    assert!(catalog.fault().is_none(), "bad input is not a fault");
}

#[test]
fn unobserved_applied_commands_are_bounded() {
    let mut catalog = machine();
    let join = |index: usize| Command::JoinMember {
        node: format!("n{index}"),
        cluster_address: String::new(),
        api_address: String::new(),
        roles: Default::default(),
        joined_ms: 0,
    };
    for index in 0..UNOBSERVED_APPLIED_MAX + 3 {
        catalog.apply(&CatalogMachine::encode_command(&join(index)));
    }
    let applied = catalog.take_applied();
    assert_eq!(applied.len(), UNOBSERVED_APPLIED_MAX);
    assert_eq!(catalog.unobserved_dropped(), 3);
    assert!(matches!(&applied[0], Applied::Member(member) if member.node == "n3"));
}

#[test]
fn opening_a_catalog_of_an_old_release_moves_its_plugin_bytes_to_the_blob_store() {
    let database = Arc::new(
        redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .expect("an in-memory database"),
    );
    let bytes = b"old plugin".to_vec();
    let name = crate::blob_name(&bytes);
    let legacy: TableDefinition<&str, &[u8]> = TableDefinition::new("plugins");
    let transaction = database.begin_write().expect("a transaction");
    {
        let mut plugins = transaction.open_table(legacy).expect("the old table");
        plugins
            .insert(name.as_str(), bytes.as_slice())
            .expect("a row");
        plugins
            .insert("not-its-hash", b"other".as_slice())
            .expect("a row");
    }
    transaction.commit().expect("committed");
    MetadataStore::open(database.clone()).expect("an old catalog opens");
    let blobs = crate::BlobStore::open(database.clone()).expect("blob tables");
    assert_eq!(blobs.get(&name).expect("read"), Some(bytes));
    assert_eq!(
        blobs.list().expect("read").len(),
        1,
        "bad bytes are not kept"
    );
    let read = database.begin_read().expect("a read");
    assert!(read.open_table(legacy).is_err(), "the old table is gone");
}
