//! The coordinator places the partition plane's replicas: every partition on distinct up
//! members with even preferred primaries, committed to the catalog, and placed again without
//! a member that leaves (only the leaver's replicas move); with the plane's partitions at 0 it
//! places nothing.

use super::*;
use crate::CoordinatorCommand;
use crate::PartitionConfig;
use std::collections::BTreeSet;
use tessera_metadata::{Command, PartitionReplicas};
use tokio::time::Instant;

pub(super) async fn join_catalog(plane: &Arc<dyn MetadataPlane>, node: &str) {
    plane
        .submit(Command::JoinMember {
            node: node.into(),
            cluster_address: format!("{node}:7000"),
            api_address: format!("{node}:7070"),
            roles: BTreeSet::new(),
            joined_ms: 1,
        })
        .await
        .expect("a member joins the catalog");
}

pub(super) async fn placed_until(
    plane: &Arc<dyn MetadataPlane>,
    what: &str,
    done: impl Fn(&BTreeMap<u32, PartitionReplicas>) -> bool,
) -> BTreeMap<u32, PartitionReplicas> {
    let poll = async {
        loop {
            let placed = plane.store().partitions().expect("the table reads");
            if done(&placed) {
                return placed;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT_LIMIT, poll)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

#[tokio::test(start_paused = true)]
async fn the_coordinator_places_every_partition_and_places_again_without_a_leaver() {
    let config = ShardingConfig {
        partitions: PartitionConfig {
            count: Some(12),
            ..PartitionConfig::default()
        },
        ..test_config()
    };
    let directory = tempfile::tempdir().unwrap();
    let plane = test_plane(&directory);
    let membership = Membership::new();
    for node in ["n1", "n2", "n3", "n4"] {
        join_catalog(&plane, node).await;
        membership.join(node, Vec::<String>::new());
    }
    let _coordinator = Coordinator::start(
        config,
        membership.subscribe(),
        Arc::new(Switchboard::new()),
        plane.clone(),
    )
    .unwrap();
    let placed = placed_until(&plane, "12 partitions of 3 replicas", |placed| {
        placed.len() == 12 && placed.values().all(|placed| placed.replicas.len() == 3)
    })
    .await;
    let mut primaries: BTreeMap<&str, usize> = BTreeMap::new();
    for placed in placed.values() {
        *primaries.entry(placed.replicas[0].as_str()).or_default() += 1;
    }
    assert_eq!(
        primaries.values().copied().collect::<Vec<_>>(),
        [3, 3, 3, 3]
    );

    membership.leave("n2");
    let again = placed_until(&plane, "n2's replicas placed elsewhere", |placed| {
        placed
            .values()
            .all(|placed| !placed.replicas.contains(&"n2".to_string()))
    })
    .await;
    for (partition, replicas) in &again {
        assert_eq!(replicas.replicas.len(), 3, "partition {partition}");
        let before = &placed[partition];
        if !before.replicas.contains(&"n2".to_string()) {
            // Its preferred primary may change (no data moves), its replicas do not.
            let set = |replicas: &[String]| replicas.iter().cloned().collect::<BTreeSet<_>>();
            assert_eq!(
                set(&replicas.replicas),
                set(&before.replicas),
                "partition {partition}"
            );
        }
    }
}

/// Lets several of the coordinator's rounds pass (they run on its tick).
async fn let_rounds_pass(coordinator: &CoordinatorHandle) {
    for _ in 0..10 {
        coordinator
            .allocation_table()
            .await
            .expect("the coordinator runs");
        tokio::time::sleep(test_config().coordinator_tick).await;
    }
}

#[tokio::test(start_paused = true)]
async fn with_no_partitions_configured_nothing_is_placed() {
    let directory = tempfile::tempdir().unwrap();
    let plane = test_plane(&directory);
    let membership = Membership::new();
    join_catalog(&plane, "n1").await;
    membership.join("n1", Vec::<String>::new());
    let coordinator = Coordinator::start(
        test_config(),
        membership.subscribe(),
        Arc::new(Switchboard::new()),
        plane.clone(),
    )
    .unwrap();
    let_rounds_pass(&coordinator).await;
    assert!(plane.store().partitions().expect("reads").is_empty());
}

/// A first placement waits for as many eligible members as the replication factor asks, or
/// as there are voters if fewer: a cluster of one voter places at once, on itself, and its
/// partitions gain their other replicas (a move each) as members join.
#[tokio::test(start_paused = true)]
async fn a_first_placement_waits_for_its_replicas_or_every_voter() {
    let coordinator_for =
        |voters: Option<usize>, plane: &Arc<dyn MetadataPlane>, membership: &Membership| {
            let config = ShardingConfig {
                partitions: PartitionConfig {
                    count: Some(4),
                    voters,
                    ..PartitionConfig::default()
                },
                ..test_config()
            };
            Coordinator::start(
                config,
                membership.subscribe(),
                Arc::new(Switchboard::new()),
                plane.clone(),
            )
            .unwrap()
        };

    // Three voters, two of them up: nothing is placed until the third is.
    let directory = tempfile::tempdir().unwrap();
    let plane = test_plane(&directory);
    let membership = Membership::new();
    for node in ["n1", "n2"] {
        join_catalog(&plane, node).await;
        membership.join(node, Vec::<String>::new());
    }
    let coordinator = coordinator_for(Some(3), &plane, &membership);
    let_rounds_pass(&coordinator).await;
    assert!(plane.store().partitions().expect("reads").is_empty());
    join_catalog(&plane, "n3").await;
    membership.join("n3", Vec::<String>::new());
    placed_until(&plane, "4 partitions of 3 replicas", |placed| {
        placed.len() == 4 && placed.values().all(|placed| placed.replicas.len() == 3)
    })
    .await;
    drop(coordinator);

    // One voter: placed on it at once, then grown to three replicas as two members join.
    let directory = tempfile::tempdir().unwrap();
    let plane = test_plane(&directory);
    let membership = Membership::new();
    join_catalog(&plane, "n1").await;
    membership.join("n1", Vec::<String>::new());
    let _coordinator = coordinator_for(Some(1), &plane, &membership);
    placed_until(&plane, "4 partitions on the one voter", |placed| {
        placed.len() == 4 && placed.values().all(|placed| placed.replicas == ["n1"])
    })
    .await;
    // Both join between two rounds, so each partition moves once, to all three.
    for node in ["n2", "n3"] {
        join_catalog(&plane, node).await;
    }
    for node in ["n2", "n3"] {
        membership.join(node, Vec::<String>::new());
    }
    let grown = placed_until(&plane, "every partition moving to 3 replicas", |placed| {
        placed.values().all(|placed| placed.replicas.len() == 3)
    })
    .await;
    for (partition, placed) in &grown {
        assert_eq!(placed.epoch, 1, "partition {partition}: one move");
        assert_eq!(
            placed.previous,
            ["n1"],
            "partition {partition}: it leaves n1 alone"
        );
    }
}

/// What each node says it leads: `(partition, epoch, view)`s per node.
pub(super) type Leads = Arc<std::sync::Mutex<BTreeMap<String, Vec<(u32, u64, u64)>>>>;

/// Reports, every [`PRIMARY_REPORT_INTERVAL`](crate::PRIMARY_REPORT_INTERVAL) until aborted, what each of `leads` says it
/// leads: live nodes, as far as the coordinator can tell.
pub(super) fn keep_reporting(
    switchboard: &Arc<Switchboard>,
    leads: Leads,
) -> tokio::task::JoinHandle<()> {
    let switchboard = switchboard.clone();
    tokio::spawn(async move {
        loop {
            let reports = leads.lock().unwrap().clone();
            for (node, led) in reports {
                let _ = switchboard
                    .send_to_coordinator(CoordinatorCommand::PartitionPrimaries { node, led });
            }
            tokio::time::sleep(crate::PRIMARY_REPORT_INTERVAL).await;
        }
    })
}

/// Asks `coordinator` to allocate each of `keys`, as node `n1` would.
pub(super) async fn allocate_all(coordinator: &CoordinatorHandle, keys: &[ShardKey]) {
    for key in keys {
        let allocate = CoordinatorCommand::Allocate {
            key: key.clone(),
            requester: "n1".into(),
        };
        coordinator.command(allocate).await.unwrap();
    }
}

pub(super) async fn table_until(
    coordinator: &CoordinatorHandle,
    what: &str,
    done: impl Fn(&AllocationTable) -> bool,
) -> AllocationTable {
    let poll = async {
        loop {
            let table = coordinator
                .allocation_table()
                .await
                .expect("the coordinator runs");
            if done(&table) {
                return table;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT_LIMIT, poll)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// With the plane serving, a partition's shards follow its group's primary as nodes report
/// it; when a primary falls silent (killed: the failure detector still calls it up) and
/// another replica reports leading in a later view, the shards go to it at once — no handoff
/// to the silent node — within the report silence, not the failure detector's verdict. A node
/// that keeps reporting hands its shards off gracefully instead.
#[tokio::test(start_paused = true)]
async fn partitioned_shards_follow_their_primary_and_leave_a_silent_one_without_a_handoff() {
    let config = serving_config(2);
    let directory = tempfile::tempdir().unwrap();
    let plane = test_plane(&directory);
    let membership = Membership::new();
    for node in ["n1", "n2", "n3"] {
        join_catalog(&plane, node).await;
        membership.join(node, Vec::<String>::new());
    }
    let switchboard = Arc::new(Switchboard::new());
    let coordinator = Coordinator::start(
        config,
        membership.subscribe(),
        switchboard.clone(),
        plane.clone(),
    )
    .unwrap();
    placed_until(&plane, "two partitions of three", |placed| {
        placed.len() == 2
    })
    .await;
    let leads: Leads = Arc::new(std::sync::Mutex::new(BTreeMap::from([
        ("n1".to_string(), vec![]),
        ("n2".to_string(), vec![(0, 0, 1)]),
        ("n3".to_string(), vec![(1, 0, 1)]),
    ])));
    let reporting = keep_reporting(&switchboard, leads.clone());
    let partition_of = |key: &ShardKey| key.shard % 2;
    let keys: Vec<ShardKey> = (0..8)
        .map(|shard| ShardKey::new(TypeKey::new("acme", "counter"), shard))
        .collect();
    allocate_all(&coordinator, &keys).await;
    let leader = |partition: u32, leads: &BTreeMap<String, Vec<(u32, u64, u64)>>| {
        leads
            .iter()
            .find(|(_, led)| led.iter().any(|(p, ..)| *p == partition))
            .map(|(node, _)| node.clone())
    };
    let follows = |table: &AllocationTable, leads: &BTreeMap<String, Vec<(u32, u64, u64)>>| {
        keys.iter().all(|key| {
            table.get(key).map(|a| Some(a.node.clone())) == Some(leader(partition_of(key), leads))
        })
    };
    let now_leading = leads.lock().unwrap().clone();
    table_until(
        &coordinator,
        "every shard on its partition's primary",
        |table| follows(table, &now_leading),
    )
    .await;
    assert!(
        coordinator.moving_shards().await.unwrap().is_empty(),
        "placed, not moved"
    );

    // n2 dies: it stops reporting, but the membership still says it is up. n1 is elected
    // partition 0's primary in view 2.
    {
        let mut leads = leads.lock().unwrap();
        leads.remove("n2");
        leads.insert("n1".into(), vec![(0, 0, 2)]);
    }
    let now_leading = leads.lock().unwrap().clone();
    let before = Instant::now();
    table_until(&coordinator, "partition 0's shards on n1", |table| {
        follows(table, &now_leading)
    })
    .await;
    // Its move may start as a handoff (n2 was heard from a moment ago); it settles without
    // n2 once n2 is silent, as no handoff from it would ever end.
    let settled = async {
        while !coordinator.moving_shards().await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT_LIMIT, settled)
        .await
        .expect("the silent owner's shards settle on the new primary");
    assert!(
        before.elapsed() <= crate::PRIMARY_REPORT_SILENCE + Duration::from_millis(500),
        "settled {:?} after the primary changed",
        before.elapsed()
    );

    // n3, alive and reporting, loses partition 1 to n1: its shards are handed off, and the
    // handoff waits for n3 (no region answers here), past the silence.
    leads
        .lock()
        .unwrap()
        .insert("n1".into(), vec![(0, 0, 2), (1, 0, 2)]);
    leads.lock().unwrap().insert("n3".into(), vec![]);
    let of_partition_1 = |moving: &std::collections::BTreeSet<ShardKey>| {
        keys.iter()
            .filter(|key| partition_of(key) == 1)
            .all(|key| moving.contains(key))
    };
    let handed_off = async {
        while !of_partition_1(&coordinator.moving_shards().await.unwrap()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT_LIMIT, handed_off)
        .await
        .expect("a live owner's shards are handed off to the new primary");
    tokio::time::sleep(crate::PRIMARY_REPORT_SILENCE * 3).await;
    assert!(
        of_partition_1(&coordinator.moving_shards().await.unwrap()),
        "a live owner is waited for"
    );
    reporting.abort();
}

/// A move starts a partition's next epoch and names the replicas before; the partition moves
/// again only once that move settled — its new group heard serving (a primary's report at
/// the new epoch), after which the coordinator forgets the replicas before. Until then a
/// second change of members leaves it where it is.
#[tokio::test(start_paused = true)]
async fn a_partition_moves_again_only_once_its_last_move_settled() {
    let config = serving_config(4);
    let directory = tempfile::tempdir().unwrap();
    let plane = test_plane(&directory);
    let membership = Membership::new();
    for node in ["n1", "n2", "n3", "n4"] {
        join_catalog(&plane, node).await;
        membership.join(node, Vec::<String>::new());
    }
    let switchboard = Arc::new(Switchboard::new());
    let coordinator = Coordinator::start(
        config.clone(),
        membership.subscribe(),
        switchboard.clone(),
        plane.clone(),
    )
    .unwrap();
    let has = |placed: &PartitionReplicas, node: &str| placed.replicas.iter().any(|r| r == node);
    let first = placed_until(&plane, "four partitions of three", |placed| {
        placed.len() == 4 && placed.values().all(|placed| placed.replicas.len() == 3)
    })
    .await;
    assert!(first.values().all(|placed| placed.epoch == 0));

    membership.leave("n4");
    let moved = placed_until(&plane, "n4's replicas placed elsewhere", |placed| {
        placed.values().all(|placed| !has(placed, "n4"))
    })
    .await;
    let pending: Vec<u32> = moved
        .iter()
        .filter(|(_, placed)| !placed.previous.is_empty())
        .map(|(partition, _)| *partition)
        .collect();
    for partition in &pending {
        let placed = &moved[partition];
        assert_eq!(placed.epoch, 1, "partition {partition}");
        assert!(placed.previous.iter().any(|node| node == "n4"));
        assert!(has(&first[partition], "n4"));
    }
    assert!(!pending.is_empty());

    // n3 leaves while those moves have not settled: they keep n3 for now.
    membership.leave("n3");
    for _ in 0..20 {
        coordinator.allocation_table().await.expect("runs");
        tokio::time::sleep(config.coordinator_tick).await;
    }
    let waiting = plane.store().partitions().expect("reads");
    for partition in &pending {
        assert_eq!(
            waiting[partition], moved[partition],
            "partition {partition} waits"
        );
    }
    // Their new groups serve (n1 leads each, in epoch 1): the moves settle, then they move on.
    let leads: Leads = Arc::new(std::sync::Mutex::new(BTreeMap::from([(
        "n1".to_string(),
        (0..4).map(|partition| (partition, 1, 0)).collect(),
    )])));
    let reporting = keep_reporting(&switchboard, leads);
    let settled = placed_until(&plane, "n3's replicas placed elsewhere", |placed| {
        placed.values().all(|placed| !has(placed, "n3"))
    })
    .await;
    for partition in &pending {
        assert_eq!(settled[partition].epoch, 2, "partition {partition}");
    }
    reporting.abort();
}

/// A coordinator's configuration with the partition plane serving `count` partitions of three
/// replicas (owners hold state under leases, as nodes run it).
pub(super) fn serving_config(count: u32) -> ShardingConfig {
    let lease = crate::lease::LeaseConfig {
        duration_ms: 60_000,
        renew_every_ms: 1_000,
        drift_ppm: 1_000,
        margin_ms: 100,
    };
    ShardingConfig {
        moves: crate::ShardMoves::OwnerHoldsState(lease),
        partitions: PartitionConfig {
            count: Some(count),
            ..PartitionConfig::default()
        },
        ..test_config()
    }
}
