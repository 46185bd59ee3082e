//! A type's replication: recorded by its first deploy, fixed after, carried by checkpoints;
//! its family's partition ids.

use super::*;
use crate::{
    Applied, CatalogMachine, Command, PARTITION_REPLICAS_MAX, PARTITIONS_MAX, Quotas, TypeOptions,
};
use std::sync::Arc;
use tessera_consensus::state_machine::StateMachine;

fn store() -> MetadataStore {
    let backend = redb::backends::InMemoryBackend::new();
    let database = redb::Database::builder()
        .create_with_backend(backend)
        .expect("an in-memory database");
    MetadataStore::open(Arc::new(database)).expect("catalog tables")
}

fn tenant(store: &MetadataStore, name: &str, factor: Option<u8>) {
    let quotas = Quotas {
        replication_factor: factor,
        ..Quotas::default()
    };
    store
        .apply(Command::CreateTenant {
            name: name.into(),
            token_sha256: format!("hash-{name}"),
            quotas,
            created_ms: 1,
        })
        .expect("a tenant");
}

fn deploy(
    store: &MetadataStore,
    tenant: &str,
    entity_type: &str,
    factor: Option<u8>,
) -> Result<Applied, MetadataError> {
    store.apply(deploy_command(tenant, entity_type, factor))
}

fn deploy_command(tenant: &str, entity_type: &str, factor: Option<u8>) -> Command {
    Command::DeployVersion {
        tenant: tenant.into(),
        entity_type: entity_type.into(),
        sha256: format!("{entity_type}-plugin"),
        size_bytes: 3,
        options: TypeOptions {
            replication_factor: factor,
            ..TypeOptions::default()
        },
        deployed_ms: 2,
    }
}

fn versions(store: &MetadataStore, tenant: &str, entity_type: &str) -> usize {
    store
        .entity_type(tenant, entity_type)
        .expect("read")
        .map_or(0, |record| record.versions.len())
}

#[test]
fn the_first_deploy_records_the_factor_and_a_later_version_keeps_it() {
    let store = store();
    tenant(&store, "acme", None);
    deploy(&store, "acme", "five", Some(5)).expect("deployed");
    deploy(&store, "acme", "plain", None).expect("deployed");
    assert_eq!(
        store.type_replication("acme", "five").unwrap(),
        Some(Replication::Own(5))
    );
    assert_eq!(
        store.type_replication("acme", "plain").unwrap(),
        Some(Replication::Cluster)
    );
    // A version that says nothing keeps the type's factor; one that repeats it is taken.
    deploy(&store, "acme", "five", None).expect("a second version");
    deploy(&store, "acme", "five", Some(5)).expect("a third version");
    assert_eq!(versions(&store, "acme", "five"), 3);
    assert_eq!(
        store.type_replication("acme", "five").unwrap(),
        Some(Replication::Own(5))
    );
    let own: Vec<(String, u8)> = store
        .own_replications()
        .unwrap()
        .into_iter()
        .map(|(key, factor)| (key.to_string(), factor))
        .collect();
    assert_eq!(own, vec![("acme/five".to_string(), 5)]);
}

#[test]
fn a_version_asking_for_another_factor_is_refused_and_changes_nothing() {
    let store = store();
    tenant(&store, "acme", None);
    deploy(&store, "acme", "five", Some(5)).expect("deployed");
    deploy(&store, "acme", "plain", None).expect("deployed");
    for (entity_type, asked) in [("five", 3), ("plain", 3)] {
        let error = deploy(&store, "acme", entity_type, Some(asked)).unwrap_err();
        assert!(
            matches!(&error, MetadataError::InvalidOptions(message) if message.contains("fixed")),
            "{error}"
        );
        assert_eq!(versions(&store, "acme", entity_type), 1);
    }
    // Deleted, the type's entities' state stays where its factor put it: a new deploy under
    // the name keeps the factor too.
    store
        .apply(Command::DeleteType {
            tenant: "acme".into(),
            entity_type: "five".into(),
        })
        .expect("deleted");
    assert!(deploy(&store, "acme", "five", Some(1)).is_err());
    assert_eq!(versions(&store, "acme", "five"), 0);
    deploy(&store, "acme", "five", None).expect("deployed again");
    assert_eq!(
        store.type_replication("acme", "five").unwrap(),
        Some(Replication::Own(5))
    );
}

#[test]
fn a_factor_out_of_bounds_is_refused_for_a_type_and_a_tenant() {
    let store = store();
    tenant(&store, "acme", None);
    let too_many = PARTITION_REPLICAS_MAX as u8 + 1;
    for factor in [0, too_many] {
        assert!(matches!(
            deploy(&store, "acme", "counter", Some(factor)),
            Err(MetadataError::InvalidOptions(_))
        ));
        let quotas = Quotas {
            replication_factor: Some(factor),
            ..Quotas::default()
        };
        assert!(matches!(
            store.apply(Command::UpdateQuotas {
                name: "acme".into(),
                quotas,
            }),
            Err(MetadataError::InvalidQuotas(_))
        ));
    }
    assert!(store.entity_type("acme", "counter").unwrap().is_none());
    assert_eq!(store.type_replication("acme", "counter").unwrap(), None);
    assert_eq!(
        store.tenant("acme").unwrap().unwrap().quotas,
        Quotas::default()
    );
}

#[test]
fn a_tenant_default_applies_to_types_first_deployed_after_it() {
    let store = store();
    tenant(&store, "acme", Some(1));
    deploy(&store, "acme", "before", None).expect("deployed");
    deploy(&store, "acme", "own", Some(5)).expect("deployed");
    let quotas = Quotas {
        replication_factor: Some(3),
        ..Quotas::default()
    };
    store
        .apply(Command::UpdateQuotas {
            name: "acme".into(),
            quotas,
        })
        .expect("quotas");
    deploy(&store, "acme", "after", None).expect("deployed");
    deploy(&store, "acme", "before", None).expect("a second version");
    let factor = |entity_type| store.type_replication("acme", entity_type).unwrap();
    assert_eq!(factor("before"), Some(Replication::Own(1)));
    assert_eq!(factor("own"), Some(Replication::Own(5)));
    assert_eq!(factor("after"), Some(Replication::Own(3)));
}

#[test]
fn a_checkpoint_carries_each_types_replication() {
    let mut source = CatalogMachine::new(store());
    let mut target = CatalogMachine::new(store());
    let create = Command::CreateTenant {
        name: "acme".into(),
        token_sha256: "aa".into(),
        quotas: Quotas::default(),
        created_ms: 1,
    };
    for command in [
        create,
        deploy_command("acme", "five", Some(5)),
        deploy_command("acme", "plain", None),
    ] {
        source.apply(&CatalogMachine::encode_command(&command));
    }
    target.restore(&source.snapshot()).expect("a good snapshot");
    assert_eq!(target.snapshot(), source.snapshot());
    assert_eq!(
        target.store().type_replication("acme", "five").unwrap(),
        Some(Replication::Own(5))
    );
    assert_eq!(
        target.store().type_replication("acme", "plain").unwrap(),
        Some(Replication::Cluster)
    );
    // The type keeps its factor on the restored replica too.
    let refused = target.apply(&CatalogMachine::encode_command(&deploy_command(
        "acme",
        "five",
        Some(3),
    )));
    assert!(CatalogMachine::decode_result(&refused).is_err());
}

#[test]
fn every_family_maps_its_shards_into_its_own_ids() {
    let count = PARTITION_COUNT_MAX;
    let families = std::iter::once(Replication::Cluster)
        .chain((1..=PARTITION_REPLICAS_MAX as u8).map(Replication::Own));
    let mut seen = std::collections::BTreeSet::new();
    for family in families {
        for shard in [0, 1, count - 1, count, 4 * count + 7, u32::MAX] {
            let partition = family.partition(shard, count);
            assert!(partition < PARTITIONS_MAX, "{family:?} {shard}");
            assert_eq!(partition % count, shard % count);
            assert_eq!(Replication::of_partition(partition, count), Some(family));
            seen.insert(partition);
        }
    }
    // Families are disjoint: 8 families × count ids, all under the bound.
    assert_eq!(
        Replication::of_partition(PARTITIONS_MAX, count),
        None,
        "no family past the bound"
    );
    assert!(seen.iter().all(|partition| *partition < PARTITIONS_MAX));
    assert_eq!(
        Replication::Own(3).partition(5, 0),
        0,
        "no partitions: none"
    );
    assert_eq!(Replication::of_partition(3, 0), None);
}
