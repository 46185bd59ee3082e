//! The coordinator places the partition plane's replicas: every partition on distinct up
//! members with even preferred primaries, committed to the catalog, and placed again without
//! a member that leaves (only the leaver's replicas move); with the plane's partitions at 0 it
//! places nothing.

use super::*;
use crate::PartitionConfig;
use std::collections::BTreeSet;
use tessera_metadata::{Command, PartitionReplicas};

async fn join_catalog(plane: &Arc<dyn MetadataPlane>, node: &str) {
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

async fn placed_until(
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
            count: 12,
            replication_factor: 3,
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
    // Rounds run on the coordinator's tick: let several pass.
    for _ in 0..10 {
        coordinator
            .allocation_table()
            .await
            .expect("the coordinator runs");
        tokio::time::sleep(test_config().coordinator_tick).await;
    }
    assert!(plane.store().partitions().expect("reads").is_empty());
}
