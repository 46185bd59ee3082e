//! Placement rounds: every partition gets its replicas on distinct eligible members, replicas
//! and preferred primaries end up even, a member that leaves moves only its own replicas, a
//! member that joins takes replicas only onto itself, and an even placement stays as it is.

use super::*;

fn nodes(count: usize) -> BTreeSet<NodeId> {
    (1..=count).map(|index| format!("n{index}")).collect()
}

fn round(
    partitions: u32,
    factor: usize,
    eligible: &BTreeSet<NodeId>,
    current: &Placement,
) -> Placement {
    place(&PlacementInput {
        partition_count: partitions,
        replication_factor: factor,
        eligible,
        holding: &BTreeSet::new(),
        current,
        spread_moves_max: usize::MAX,
    })
}

fn spread_of(
    placement: &Placement,
    eligible: &BTreeSet<NodeId>,
    first_only: bool,
) -> (usize, usize) {
    let mut counts: BTreeMap<&NodeId, usize> = eligible.iter().map(|node| (node, 0)).collect();
    for replicas in placement.values() {
        let held = if first_only {
            &replicas[..1]
        } else {
            &replicas[..]
        };
        for node in held {
            *counts
                .get_mut(node)
                .expect("only eligible members hold replicas") += 1;
        }
    }
    let most = counts.values().copied().max().unwrap_or(0);
    let least = counts.values().copied().min().unwrap_or(0);
    (most, least)
}

/// Replicas (partition, node) in `after` that `before` did not have.
fn added(before: &Placement, after: &Placement) -> Vec<(PartitionId, NodeId)> {
    after
        .iter()
        .flat_map(|(partition, replicas)| {
            replicas
                .iter()
                .filter(|node| !before.get(partition).is_some_and(|old| old.contains(node)))
                .map(|node| (*partition, node.clone()))
        })
        .collect()
}

fn assert_valid(
    placement: &Placement,
    partitions: u32,
    factor: usize,
    eligible: &BTreeSet<NodeId>,
) {
    assert_eq!(placement.len(), partitions as usize);
    for (partition, replicas) in placement {
        assert_eq!(
            replicas.len(),
            factor.min(eligible.len()),
            "partition {partition}"
        );
        let distinct: BTreeSet<&NodeId> = replicas.iter().collect();
        assert_eq!(
            distinct.len(),
            replicas.len(),
            "partition {partition}: {replicas:?}"
        );
        assert!(replicas.iter().all(|node| eligible.contains(node)));
    }
}

#[test]
fn a_first_placement_is_even_in_replicas_and_primaries() {
    for members in 1..=7 {
        for partitions in [1, 4, 16, 64] {
            for factor in [1, 3, 5] {
                let eligible = nodes(members);
                let placement = round(partitions, factor, &eligible, &Placement::new());
                assert_valid(&placement, partitions, factor, &eligible);
                let (most, least) = spread_of(&placement, &eligible, false);
                assert!(
                    most <= least + 1,
                    "{members} members, {partitions}x{factor}: {most} vs {least}"
                );
                let (most, least) = spread_of(&placement, &eligible, true);
                assert!(
                    most <= least + 1 || partitions < members as u32,
                    "primaries, {members} members, {partitions}x{factor}: {most} vs {least}"
                );
                assert_eq!(
                    round(partitions, factor, &eligible, &placement),
                    placement,
                    "stable"
                );
            }
        }
    }
}

#[test]
fn a_member_that_leaves_moves_only_its_own_replicas() {
    let eligible = nodes(5);
    let before = round(32, 3, &eligible, &Placement::new());
    let mut remaining = eligible.clone();
    remaining.remove("n3");
    let after = round(32, 3, &remaining, &before);
    assert_valid(&after, 32, 3, &remaining);
    let held_by_n3 = before
        .values()
        .flatten()
        .filter(|node| *node == "n3")
        .count();
    assert_eq!(
        added(&before, &after).len(),
        held_by_n3,
        "only n3's replicas were placed anew"
    );
    let (most, least) = spread_of(&after, &remaining, false);
    assert!(most <= least + 1, "{most} vs {least}");
}

#[test]
fn a_member_that_joins_takes_replicas_only_onto_itself_over_capped_rounds() {
    let eligible = nodes(3);
    let mut placement = round(24, 3, &eligible, &Placement::new());
    let grown = nodes(4);
    let mut rounds = 0;
    loop {
        let next = place(&PlacementInput {
            partition_count: 24,
            replication_factor: 3,
            eligible: &grown,
            holding: &BTreeSet::new(),
            current: &placement,
            spread_moves_max: 4,
        });
        let new = added(&placement, &next);
        assert!(new.len() <= 4, "capped at 4 moves a round: {new:?}");
        assert!(new.iter().all(|(_, node)| node == "n4"), "{new:?}");
        if next == placement {
            break;
        }
        placement = next;
        rounds += 1;
        assert!(rounds <= 10, "the spread converges");
    }
    assert_valid(&placement, 24, 3, &grown);
    assert_eq!(spread_of(&placement, &grown, false), (18, 18));
    let (most, least) = spread_of(&placement, &grown, true);
    assert!(most <= least + 1, "primaries {most} vs {least}");
}

#[test]
fn fewer_members_than_the_factor_get_one_replica_each_and_more_are_added_later() {
    let one = nodes(1);
    let single = round(8, 3, &one, &Placement::new());
    assert!(
        single
            .values()
            .all(|replicas| replicas == &["n1".to_string()])
    );
    let three = nodes(3);
    let grown = round(8, 3, &three, &single);
    assert_valid(&grown, 8, 3, &three);
    assert!(
        grown
            .values()
            .all(|replicas| replicas.contains(&"n1".to_string()))
    );
}

#[test]
fn a_member_down_or_cut_off_keeps_its_replicas() {
    let eligible = nodes(3);
    let before = round(6, 3, &eligible, &Placement::new());
    let cut_off: BTreeSet<NodeId> = ["n3".to_string()].into();
    let others: BTreeSet<NodeId> = ["n1".to_string(), "n2".to_string()].into();
    let input = |eligible, holding| PlacementInput {
        partition_count: 6,
        replication_factor: 3,
        eligible,
        holding,
        current: &before,
        spread_moves_max: usize::MAX,
    };
    // Seen from the majority, and from the cut-off node when it sees only itself: without
    // `holding`, every partition would lose n3's replica, or keep n3's alone.
    for (eligible, holding) in [(&others, &cut_off), (&cut_off, &others)] {
        let after = place(&input(eligible, holding));
        for (partition, replicas) in &after {
            let set = |replicas: &[NodeId]| replicas.iter().cloned().collect::<BTreeSet<_>>();
            assert_eq!(
                set(replicas),
                set(&before[partition]),
                "partition {partition}"
            );
        }
    }
}

#[test]
fn no_eligible_member_changes_nothing() {
    let eligible = nodes(3);
    let placement = round(8, 3, &eligible, &Placement::new());
    assert_eq!(round(8, 3, &BTreeSet::new(), &placement), placement);
}

#[test]
fn random_joins_and_leaves_keep_the_placement_valid_even_and_minimal() {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    let mut eligible = nodes(3);
    let mut placement = round(32, 3, &eligible, &Placement::new());
    let mut next_node = 4;
    for step in 0..300 {
        let before = placement.clone();
        let changed = if eligible.len() > 1 && (eligible.len() >= 7 || next(2) == 0) {
            let leaving = eligible
                .iter()
                .nth(next(eligible.len() as u64) as usize)
                .cloned();
            let leaving = leaving.expect("a member to remove");
            eligible.remove(&leaving);
            leaving
        } else {
            let joining = format!("n{next_node}");
            next_node += 1;
            eligible.insert(joining.clone());
            joining
        };
        // What the change itself needs, with no move to even out the spread.
        let needed = place(&PlacementInput {
            partition_count: 32,
            replication_factor: 3,
            eligible: &eligible,
            holding: &BTreeSet::new(),
            current: &before,
            spread_moves_max: 0,
        });
        assert_valid(&needed, 32, 3, &eligible);
        let new = added(&before, &needed);
        let wanted = eligible.len().min(3);
        let missing: usize = before
            .values()
            .map(|replicas| {
                let kept = replicas
                    .iter()
                    .filter(|node| eligible.contains(*node))
                    .count();
                wanted.saturating_sub(kept)
            })
            .sum();
        assert_eq!(
            new.len(),
            missing,
            "step {step}: only missing replicas are placed"
        );
        for (partition, replicas) in &before {
            if !replicas.contains(&changed) && replicas.len() == wanted {
                // Reordered at most (a preferred primary changes; no replica moves).
                let as_set =
                    |replicas: &Vec<NodeId>| replicas.iter().cloned().collect::<BTreeSet<_>>();
                assert_eq!(
                    as_set(&needed[partition]),
                    as_set(replicas),
                    "step {step}: {partition}"
                );
            }
        }
        placement = round(32, 3, &eligible, &needed);
        assert_valid(&placement, 32, 3, &eligible);
        let (most, least) = spread_of(&placement, &eligible, false);
        assert!(most <= least + 1, "step {step}: {most} vs {least}");
        if eligible.contains(&changed) {
            let spread = added(&needed, &placement);
            assert!(
                spread.iter().all(|(_, node)| *node == changed),
                "step {step}: {spread:?}"
            );
        }
    }
}
