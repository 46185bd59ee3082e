//! Types of a replication factor of their own: the coordinator places their factor's family
//! of partitions at that factor — on the first allocation of such a type, without waiting for
//! a round — and a shard of each type goes to a replica of its partition in its type's family.

use super::partitions::{allocate_all, join_catalog, placed_until, serving_config, table_until};
use super::*;
use tessera_metadata::{Command, Quotas, TypeOptions};

async fn deploy(plane: &Arc<dyn MetadataPlane>, entity_type: &str, factor: Option<u8>) {
    plane
        .submit(Command::DeployVersion {
            tenant: "acme".into(),
            entity_type: entity_type.into(),
            sha256: "p".into(),
            size_bytes: 1,
            options: TypeOptions {
                replication_factor: factor,
                ..TypeOptions::default()
            },
            deployed_ms: 1,
        })
        .await
        .expect("deployed");
}

/// A catalog with three members up and tenant `acme` (keep the directory while it is used).
async fn three_members_and_a_tenant() -> (tempfile::TempDir, Arc<dyn MetadataPlane>, Membership) {
    let directory = tempfile::tempdir().unwrap();
    let plane = test_plane(&directory);
    let membership = Membership::new();
    for node in ["n1", "n2", "n3"] {
        join_catalog(&plane, node).await;
        membership.join(node, Vec::<String>::new());
    }
    plane
        .submit(Command::CreateTenant {
            name: "acme".into(),
            token_sha256: "aa".into(),
            quotas: Quotas::default(),
            created_ms: 0,
        })
        .await
        .expect("a tenant");
    (directory, plane, membership)
}

#[tokio::test(start_paused = true)]
async fn each_family_is_placed_at_its_own_factor() {
    let count = 4;
    let (_directory, plane, membership) = three_members_and_a_tenant().await;
    deploy(&plane, "counter", None).await;
    let coordinator = Coordinator::start(
        serving_config(count),
        membership.subscribe(),
        Arc::new(Switchboard::new()),
        plane.clone(),
    )
    .unwrap();
    placed_until(&plane, "the cluster's family", |placed| {
        placed.len() == count as usize && placed.values().all(|p| p.replicas.len() == 3)
    })
    .await;

    // A type of factor 1: its first allocation places its family, one replica each, spread.
    deploy(&plane, "single", Some(1)).await;
    let keys: Vec<ShardKey> = (0..8)
        .flat_map(|shard| {
            ["counter", "single"]
                .map(|entity_type| ShardKey::new(TypeKey::new("acme", entity_type), shard))
        })
        .collect();
    allocate_all(&coordinator, &keys).await;
    let table = table_until(&coordinator, "every shard allocated", |table| {
        keys.iter().all(|key| table.contains_key(key))
    })
    .await;
    let placed = plane.store().partitions().expect("reads");
    assert_eq!(placed.len(), 2 * count as usize, "{placed:?}");
    let mut singles: BTreeMap<&str, usize> = BTreeMap::new();
    for (partition, replicas) in &placed {
        if *partition < count {
            assert_eq!(replicas.replicas.len(), 3, "partition {partition}");
        } else {
            assert!(*partition < 2 * count, "factor 1's family: {partition}");
            assert_eq!(replicas.replicas.len(), 1, "partition {partition}");
            *singles.entry(replicas.replicas[0].as_str()).or_default() += 1;
        }
    }
    let mut spread: Vec<usize> = singles.values().copied().collect();
    spread.sort_unstable();
    assert_eq!(spread, [1, 1, 2], "factor 1's replicas spread: {placed:?}");
    for key in &keys {
        let first = if key.type_key.entity_type == "single" {
            count
        } else {
            0
        };
        let partition = first + key.shard % count;
        assert!(
            placed[&partition].replicas.contains(&table[key].node),
            "{key} on {} outside partition {partition}: {:?}",
            table[key].node,
            placed[&partition]
        );
    }
}

/// A primary reported for a partition of a factor some type keeps is believed: that type's
/// shards follow it, as the cluster's family's follow theirs.
#[tokio::test(start_paused = true)]
async fn shards_of_a_family_follow_its_reported_primary() {
    let count = 2;
    let (_directory, plane, membership) = three_members_and_a_tenant().await;
    deploy(&plane, "pair", Some(2)).await;
    let switchboard = Arc::new(Switchboard::new());
    let coordinator = Coordinator::start(
        serving_config(count),
        membership.subscribe(),
        switchboard.clone(),
        plane.clone(),
    )
    .unwrap();
    let keys: Vec<ShardKey> = (0..4)
        .map(|shard| ShardKey::new(TypeKey::new("acme", "pair"), shard))
        .collect();
    allocate_all(&coordinator, &keys).await;
    let placed = placed_until(&plane, "factor 2's family", |placed| {
        (4..6).all(|partition| {
            placed
                .get(&partition)
                .is_some_and(|p| p.replicas.len() == 2)
        })
    })
    .await;
    // Each of the family's partitions led by its replica that is not the preferred primary.
    let leader = |partition: u32| placed[&partition].replicas[1].clone();
    let mut led: BTreeMap<String, Vec<(u32, u64, u64)>> = ["n1", "n2", "n3"]
        .map(|node| (node.to_string(), vec![]))
        .into();
    for partition in 4..6 {
        led.entry(leader(partition))
            .or_default()
            .push((partition, 0, 1));
    }
    let leads: super::partitions::Leads = Arc::new(std::sync::Mutex::new(led));
    let reporting = super::partitions::keep_reporting(&switchboard, leads);
    table_until(
        &coordinator,
        "every shard on its partition's reported primary",
        |table| {
            keys.iter().all(|key| {
                table.get(key).map(|a| a.node.clone()) == Some(leader(4 + key.shard % count))
            })
        },
    )
    .await;
    reporting.abort();
}
