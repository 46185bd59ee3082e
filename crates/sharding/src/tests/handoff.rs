//! Moves: a graceful handoff (stop, drain in order, announce), and rebalance rounds — dead
//! owners uncapped, spread capped — with every move committed to the catalog first.

use super::*;
use crate::{CoordinatorCommand, RebalanceReason};

#[tokio::test(start_paused = true)]
async fn handoff_stops_the_losing_owner_and_drains_its_buffer_in_order() {
    let gate = Arc::new(Semaphore::new(0));
    let cluster = cluster(2, test_config(), Some(Arc::clone(&gate))).await;
    let ids = one_id_per_shard(16);
    for id in ids.values() {
        let reply = cluster.regions[0].ask(counter().entity(id.clone()), b"warm".to_vec(), None);
        assert!(reply.await.is_ok());
    }
    let table = cluster.coordinator.allocation_table().await.unwrap();
    let id = ids
        .values()
        .find(|id| table[&key_of(id, 16)].node == "node-0")
        .expect("node-0 owns some shards")
        .clone();
    let key = key_of(&id, 16);
    let address = counter().entity(id.clone());
    let (losing, winning) = (&cluster.fakes[0], &cluster.fakes[1]);
    assert_eq!(losing.live_in_shard(&counter(), key.shard), 1);
    let before = table[&key].generation;

    cluster
        .coordinator
        .command(CoordinatorCommand::MoveShard {
            key: key.clone(),
            to: "node-1".into(),
        })
        .await
        .unwrap();
    losing.stop_called.notified().await;
    // The handoff is under way and held at the gate: these are buffered by node-0, in order,
    // whichever region they are sent through.
    for sequence in 0..10u8 {
        let via = &cluster.regions[usize::from(sequence % 2)];
        via.tell(address.clone(), vec![sequence]).await.unwrap();
    }
    assert!(
        winning.deliveries_to(&address).is_empty(),
        "nothing reaches node-1 before stop"
    );
    gate.add_permits(1);
    winning
        .wait_for("buffered messages at the new owner", |s| {
            s.deliveries.iter().filter(|(to, _)| to == &address).count() == 10
        })
        .await;

    let moved: Vec<Vec<u8>> = winning.deliveries_to(&address);
    let from_node0: Vec<u8> = moved.iter().map(|p| p[0]).filter(|s| s % 2 == 0).collect();
    let from_node1: Vec<u8> = moved.iter().map(|p| p[0]).filter(|s| s % 2 == 1).collect();
    assert_eq!(from_node0, vec![0, 2, 4, 6, 8]);
    assert_eq!(from_node1, vec![1, 3, 5, 7, 9]);
    assert_eq!(losing.live_in_shard(&counter(), key.shard), 0);
    assert_eq!(losing.deliveries_to(&address), vec![b"warm".to_vec()]);
    let table = cluster.coordinator.allocation_table().await.unwrap();
    assert_eq!(table[&key].node, "node-1");
    assert!(table[&key].generation > before);
    let rounds = cluster.coordinator.rebalance_rounds().await.unwrap();
    assert!(
        rounds
            .iter()
            .any(|round| round.movements.iter().any(|m| m.key == key))
    );
    // After the handoff both regions route straight to the new owner.
    assert_eq!(
        cluster.regions[0]
            .ask(address.clone(), b"after".to_vec(), None)
            .await,
        Ok(b"after".to_vec())
    );
    assert_eq!(winning.deliveries_to(&address).len(), 11);
}

#[tokio::test(start_paused = true)]
async fn dead_owner_moves_are_uncapped_and_spread_moves_capped() {
    let config = ShardingConfig {
        rebalance_per_round: 2,
        ..test_config()
    };
    let mut cluster = cluster(2, config, None).await;
    for id in one_id_per_shard(16).values() {
        cluster.regions[0]
            .tell(counter().entity(id.clone()), vec![0])
            .await
            .unwrap();
    }
    // A tell returns once buffered; the allocations it started commit on their own.
    let table = eventually(&cluster.coordinator, |table| table.len() == 16).await;
    let on_node1 = table.values().filter(|a| a.node == "node-1").count();
    assert_eq!(on_node1, 8, "least-shards placement splits evenly");

    cluster.membership.set_unreachable("node-1", true);
    let table = eventually(&cluster.coordinator, |table| {
        table.values().all(|a| a.node == "node-0")
    })
    .await;
    assert_eq!(table.len(), 16);
    let rounds = cluster.coordinator.rebalance_rounds().await.unwrap();
    let dead: Vec<_> = rounds
        .iter()
        .filter(|r| r.reason == RebalanceReason::DeadOwner)
        .collect();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0].movements.len(),
        8,
        "all orphaned shards move in one round, above the cap"
    );

    let settings = TypeSettings::new(16);
    let (region, fake) = start_region(
        "node-2",
        &cluster.config,
        &cluster.switchboard,
        None,
        None,
        settings,
    )
    .await;
    cluster.regions.push(region);
    cluster.fakes.push(fake);
    cluster.membership.join("node-2", Vec::<String>::new());
    let table = eventually(&cluster.coordinator, |table| {
        table.values().filter(|a| a.node == "node-2").count() == 8
    })
    .await;
    let rounds = cluster.coordinator.rebalance_rounds().await.unwrap();
    let spread: Vec<_> = rounds
        .iter()
        .filter(|r| r.reason == RebalanceReason::GracefulSpread)
        .collect();
    assert_eq!(spread.len(), 4);
    assert!(
        spread.iter().all(|r| r.movements.len() == 2),
        "spread capped at 2 per round"
    );
    assert!(
        cluster
            .coordinator
            .moving_shards()
            .await
            .unwrap()
            .is_empty()
    );
    for (key, allocation) in &table {
        if allocation.node == "node-2" {
            let live = cluster.fakes[0].live_in_shard(&key.type_key, key.shard);
            assert_eq!(
                live, 0,
                "shard {key} moved to node-2 but still live on node-0"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_new_coordinator_continues_the_committed_table() {
    let catalog = tempfile::tempdir().unwrap();
    let switchboard = Arc::new(Switchboard::new());
    let config = test_config();
    let (region, _fake) = start_region(
        "node-0",
        &config,
        &switchboard,
        None,
        None,
        TypeSettings::new(16),
    )
    .await;
    let membership = Membership::new();
    membership.join("node-0", Vec::<String>::new());
    let plane = test_plane(&catalog);
    let first = Coordinator::start(
        config.clone(),
        membership.subscribe(),
        switchboard.clone(),
        plane.clone(),
    )
    .unwrap();
    for id in one_id_per_shard(16).values().take(4) {
        region
            .tell(counter().entity(id.clone()), vec![0])
            .await
            .unwrap();
    }
    let before = eventually(&first, |table| table.len() == 4).await;
    drop(first);
    // A takeover (a restart here; a new metadata primary in a cluster) starts from what was
    // committed: nothing rebuilt, no generation reused.
    let second =
        Coordinator::start(config, membership.subscribe(), switchboard.clone(), plane).unwrap();
    assert_eq!(second.allocation_table().await.unwrap(), before);
    let newest = before.values().map(|a| a.generation).max().unwrap();
    let fresh = one_id_per_shard(16)
        .into_values()
        .find(|id| !before.contains_key(&key_of(id, 16)))
        .unwrap();
    region
        .tell(counter().entity(fresh.clone()), vec![0])
        .await
        .unwrap();
    let after = eventually(&second, |table| table.len() == 5).await;
    assert!(after[&key_of(&fresh, 16)].generation > newest);
}

/// Owners that hold their shards' state: a cut-off owner keeps its shards (answered
/// `shard_unavailable`), and a removed one loses them only after its lease has run out.
#[tokio::test(start_paused = true)]
async fn a_held_shard_waits_for_its_owner_and_a_removed_owner_for_its_lease() {
    use crate::lease::LeaseConfig;
    use crate::{MemberStatus, ShardMoves};
    use tessera_contract::ErrorKind;
    let lease = LeaseConfig {
        duration_ms: 400,
        renew_every_ms: 100,
        drift_ppm: 1_000,
        margin_ms: 100,
    };
    let config = ShardingConfig {
        moves: ShardMoves::OwnerHoldsState(lease),
        ..test_config()
    };
    let cluster = cluster(2, config, None).await;
    // Node-0 alone asks for these, so only node-0 (and the coordinator) knows their home.
    let ids = one_id_per_shard(16);
    for id in ids.values() {
        let reply = cluster.regions[0].ask(counter().entity(id.clone()), b"warm".to_vec(), None);
        assert!(reply.await.is_ok());
    }
    let table = cluster.coordinator.allocation_table().await.unwrap();
    let id = ids
        .values()
        .find(|id| table[&key_of(id, 16)].node == "node-0")
        .expect("node-0 owns some shards")
        .clone();
    let address = counter().entity(id.clone());

    // Cut off: not moved, and nobody else serves it.
    cluster.membership.set_unreachable("node-0", true);
    let refused = cluster.regions[1]
        .ask(address.clone(), b"x".to_vec(), None)
        .await
        .unwrap_err();
    assert_eq!(refused.kind, ErrorKind::ShardUnavailable, "{refused}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let table = cluster.coordinator.allocation_table().await.unwrap();
    assert_eq!(table[&key_of(&id, 16)].node, "node-0", "held, not moved");

    // Removed by an operator: its state is declared lost, but its lease may still run, so
    // the shard waits `reassign_wait_ms` before it goes to node-1.
    cluster
        .membership
        .set_status("node-0", Vec::<String>::new(), MemberStatus::Removed);
    let early = cluster.regions[1]
        .ask(address.clone(), b"x".to_vec(), None)
        .await
        .unwrap_err();
    assert_eq!(early.kind, ErrorKind::ShardUnavailable, "{early}");
    let moved = eventually(&cluster.coordinator, |table| {
        table[&key_of(&id, 16)].node == "node-1"
    })
    .await;
    assert_eq!(moved[&key_of(&id, 16)].node, "node-1");
    let reply = cluster.regions[1]
        .ask(address.clone(), b"y".to_vec(), None)
        .await;
    assert_eq!(reply.unwrap(), b"y");
    let rounds = cluster.coordinator.rebalance_rounds().await.unwrap();
    assert!(
        rounds
            .iter()
            .any(|round| round.reason == RebalanceReason::DeadOwner),
        "{rounds:?}"
    );
}
