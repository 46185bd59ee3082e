//! The partition table: placements are taken from the seated coordinator at the generation it
//! read, refused (changing nothing) otherwise or when invalid, and travel in snapshots.

use super::*;
use crate::{Command, MetadataStore};
use std::sync::Arc;

fn store() -> MetadataStore {
    let backend = redb::backends::InMemoryBackend::new();
    let database = redb::Database::builder()
        .create_with_backend(backend)
        .expect("an in-memory database");
    let store = MetadataStore::open(Arc::new(database)).expect("the catalog opens");
    for node in ["n1", "n2", "n3"] {
        store
            .apply(Command::JoinMember {
                node: node.into(),
                cluster_address: format!("{node}:7000"),
                api_address: format!("{node}:7070"),
                roles: BTreeSet::new(),
                joined_ms: 1,
            })
            .expect("joins");
    }
    store
        .apply(Command::SeatCoordinator { epoch: 2 })
        .expect("seated");
    store
}

fn placement(partition: u32, expected: Option<u64>, replicas: &[&str]) -> PartitionPlacement {
    PartitionPlacement {
        partition,
        expected,
        replicas: replicas.iter().map(|node| node.to_string()).collect(),
        settled: false,
    }
}

fn place(
    store: &MetadataStore,
    epoch: u64,
    placements: Vec<PartitionPlacement>,
) -> Result<Applied, MetadataError> {
    store.apply(Command::PlacePartitions { epoch, placements })
}

#[test]
fn the_seated_coordinator_places_partitions_at_the_generation_it_read() {
    let store = store();
    let applied = place(
        &store,
        2,
        vec![
            placement(0, None, &["n1", "n2", "n3"]),
            placement(1, None, &["n2", "n3", "n1"]),
        ],
    )
    .expect("placed");
    let Applied::PartitionsPlaced(placed) = applied else {
        panic!("placing answers the placements: {applied:?}");
    };
    let first = placed[0].1.generation;
    assert_eq!(placed[1].1.generation, first + 1);
    let table = store.partitions().expect("read");
    assert_eq!(table[&1].replicas, ["n2", "n3", "n1"]);
    // A later round reads generation `first` for partition 0 and moves its primary.
    place(
        &store,
        2,
        vec![placement(0, Some(first), &["n2", "n1", "n3"])],
    )
    .expect("moved");
    assert_eq!(store.partitions().expect("read")[&0].replicas[0], "n2");
}

#[test]
fn a_stale_coordinator_or_generation_is_refused_and_changes_nothing() {
    let store = store();
    place(&store, 2, vec![placement(0, None, &["n1"])]).expect("placed");
    let before = store.partitions().expect("read");
    let stale_epoch = place(
        &store,
        1,
        vec![placement(0, before[&0].generation.into(), &["n2"])],
    );
    assert!(matches!(
        stale_epoch,
        Err(MetadataError::StaleCoordinator { .. })
    ));
    // The second placement read an old generation: the whole command is refused.
    let stale_generation = place(
        &store,
        2,
        vec![placement(1, None, &["n3"]), placement(0, None, &["n2"])],
    );
    assert!(matches!(
        stale_generation,
        Err(MetadataError::PartitionMoved { partition: 0, .. })
    ));
    assert_eq!(store.partitions().expect("read"), before);
}

#[test]
fn an_invalid_placement_is_refused_and_changes_nothing() {
    let store = store();
    let invalid = [
        placement(0, None, &[]),
        placement(0, None, &["n1", "n1"]),
        placement(0, None, &["n1", "stranger"]),
        placement(PARTITIONS_MAX, None, &["n1"]),
        placement(0, None, &["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"]),
    ];
    for bad in invalid {
        let refused = place(&store, 2, vec![bad.clone()]);
        assert!(
            matches!(refused, Err(MetadataError::InvalidPlacement(_))),
            "{bad:?}: {refused:?}"
        );
    }
    assert!(store.partitions().expect("read").is_empty());
}

#[test]
fn placed_partitions_travel_in_the_catalog_snapshot() {
    use crate::CatalogMachine;
    use tessera_consensus::state_machine::StateMachine;
    let primary = CatalogMachine::new(store());
    primary
        .store()
        .apply(Command::PlacePartitions {
            epoch: 2,
            placements: vec![placement(3, None, &["n3", "n1"])],
        })
        .expect("placed");
    let mut backup = CatalogMachine::new(store());
    backup.restore(&primary.snapshot()).expect("restores");
    assert_eq!(
        backup.store().partitions().expect("read"),
        primary.store().partitions().expect("read")
    );
    assert_eq!(backup.snapshot(), primary.snapshot());
}

#[test]
fn a_placement_that_changes_the_replica_set_starts_its_next_epoch_and_names_the_one_before() {
    use crate::CatalogMachine;
    use tessera_consensus::state_machine::StateMachine;
    let primary = CatalogMachine::new(store());
    let store = primary.store();
    place(store, 2, vec![placement(0, None, &["n1", "n2"])]).expect("placed");
    let first = store.partitions().expect("read")[&0].clone();
    assert_eq!((first.epoch, first.previous.len()), (0, 0));
    // A new order is the same set: the same epoch, the same group.
    place(
        store,
        2,
        vec![placement(0, Some(first.generation), &["n2", "n1"])],
    )
    .expect("placed");
    let reordered = store.partitions().expect("read")[&0].clone();
    assert_eq!((reordered.epoch, reordered.previous.len()), (0, 0));
    // A replica replaced: the next epoch, taking its state from the set before.
    let moved = placement(0, Some(reordered.generation), &["n2", "n3"]);
    place(store, 2, vec![moved]).expect("placed");
    let after = store.partitions().expect("read")[&0].clone();
    assert_eq!(after.epoch, 1);
    assert_eq!(after.previous, ["n2", "n1"]);
    // Settling is only for the same set, and refused otherwise (changing nothing).
    let wrong = PartitionPlacement {
        settled: true,
        ..placement(0, Some(after.generation), &["n1", "n3"])
    };
    assert!(matches!(
        place(store, 2, vec![wrong]),
        Err(MetadataError::InvalidPlacement(_))
    ));
    assert_eq!(store.partitions().expect("read")[&0], after);
    assert_eq!(
        store
            .committed()
            .and_then(|committed| committed.partition(0))
            .expect("read")
            .expect("placed"),
        after
    );
    // The epoch and the set before travel in the snapshot (checked before and after the
    // move settles: then the set before is forgotten, the epoch kept).
    let mut backup = CatalogMachine::new(super::tests::store());
    backup.restore(&primary.snapshot()).expect("restores");
    assert_eq!(backup.store().partitions().expect("read")[&0], after);
    assert_eq!(backup.snapshot(), primary.snapshot());
    let settled = PartitionPlacement {
        settled: true,
        ..placement(0, Some(after.generation), &["n3", "n2"])
    };
    place(store, 2, vec![settled]).expect("settled");
    let done = store.partitions().expect("read")[&0].clone();
    assert_eq!((done.epoch, done.previous.len()), (1, 0));
    assert_eq!(done.replicas, ["n3", "n2"]);
}

#[test]
fn a_row_written_before_moves_existed_reads_as_epoch_zero() {
    let replicas = vec!["n1".to_string(), "n2".to_string()];
    let legacy = rmp_serde::to_vec(&replicas).expect("encodes");
    let read = decode_row(0, &legacy).expect("decodes");
    assert_eq!(
        (read.replicas, read.epoch, read.previous.len()),
        (replicas, 0, 0)
    );
    assert!(decode_row(0, &[0xc1]).is_err(), "garbage is an error");
}

#[test]
fn every_order_of_a_replica_set_gives_its_group_the_same_voters() {
    let nodes = |names: &[&str]| {
        names
            .iter()
            .map(|name| name.to_string())
            .collect::<Vec<_>>()
    };
    // As placed first, with n3 dropped while it was down, and placed back first.
    let first = nodes(&["n2", "n1", "n3"]);
    let placed_back = nodes(&["n3", "n2", "n1"]);
    for partition in 0..6 {
        assert_eq!(
            group_voters(partition, &first),
            group_voters(partition, &placed_back),
            "partition {partition}"
        );
    }
    // The first view's primaries (voter 0) spread over the members.
    let leads: BTreeSet<NodeId> = (0..3)
        .map(|partition| group_voters(partition, &first)[0].clone())
        .collect();
    assert_eq!(leads, nodes(&["n1", "n2", "n3"]).into_iter().collect());
}
