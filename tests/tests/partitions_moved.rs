//! Moving partitions between nodes: three voters serve six partitions of three replicas and
//! counters asked through every node; a fourth node joins and is given replicas — each moved
//! partition's next epoch started on its new replica set, the epoch it leaves sealed, the new
//! group filled from a sealed copy and opened, the move settled — while the counters go on,
//! every answer checked against the acknowledged values. The fourth node then leaves on
//! SIGTERM: its replicas move back to the voters before it is removed. No add fails on the way,
//! every counter then reads its last acknowledged value through every node, and the moved
//! groups serve on the nodes they moved to. Each node is this test binary re-run as a child
//! (`tessera_tests::processes`).

use serde_json::Value as Json;
use tessera_tests::cluster::*;
use tessera_tests::partition_plane::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
const VOTERS: [usize; 3] = [0, 1, 2];
const JOINER: usize = 3;
const COUNTERS: usize = 12;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by the tests of this file as their child processes"]
fn partitions_moved_child_node() {
    run_child_if_asked();
}

/// A placed partition as a node shows it: `(replicas, epoch, moving_from)`.
type Placed = (Vec<String>, u64, Vec<String>);

/// Each placed partition as node `index` shows it.
fn placement(cluster: &Cluster, index: usize) -> Option<Vec<Placed>> {
    let status = cluster_status(cluster, index)?;
    let nodes = |value: &Json| -> Vec<String> {
        value
            .as_array()
            .map(|nodes| {
                nodes
                    .iter()
                    .filter_map(|node| node.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let placed: Vec<_> = status["partitions"]
        .as_array()?
        .iter()
        .map(|placed| {
            (
                nodes(&placed["replicas"]),
                placed["epoch"].as_u64().unwrap_or(0),
                nodes(&placed["moving_from"]),
            )
        })
        .collect();
    (placed.len() == PARTITIONS).then_some(placed)
}

/// Whether every group node `index` runs serves, with a primary it is in contact with.
fn serving_here(cluster: &Cluster, index: usize) -> Option<usize> {
    let groups = groups_here(cluster, index)?;
    let serving = groups.iter().all(|here| {
        here["phase"] == "serving"
            && here["status"]["primary"].is_string()
            && here["status"]["contact_age_ms"]
                .as_u64()
                .is_some_and(|age| age < 1_000)
    });
    serving.then_some(groups.len())
}

/// The three voters started (n4 not yet) with every partition's group serving, the counter
/// deployed, and a ledger of the counters after two rounds of adds through every voter.
fn voters_serving() -> (Cluster, String, Ledger) {
    let cluster = Cluster::new(&NODES, VOTERS.len(), "partitions_moved_child_node")
        .with_partitions(PARTITIONS);
    cluster.start_until_up(VOTERS.len());
    for index in VOTERS {
        eventually("every partition's group has a primary", &cluster, || {
            groups_ready(&cluster, index)
        });
    }
    let token = eventually("a tenant", &cluster, || create_tenant(&cluster, 0, "acme"));
    deploy_counter(&cluster, 0, &token, "counter", "");
    for index in VOTERS {
        wait_bound(&cluster, index, &token, "counter", 1);
    }
    let mut ledger = Ledger::read_through(&cluster, 0, &token, COUNTERS);
    add_rounds(&cluster, &token, &mut ledger, &VOTERS, 0..2);
    (cluster, token, ledger)
}

#[test]
fn a_joining_node_takes_replicas_and_gives_them_back_when_it_leaves_losing_no_add() {
    let (cluster, token, mut ledger) = voters_serving();
    let before = placement(&cluster, 0).expect("placed");
    assert!(before.iter().all(|(_, epoch, _)| *epoch == 0), "{before:?}");

    // n4 joins: partitions move replicas onto it, each to its next epoch, while adds go on.
    cluster.start(JOINER);
    let mut round = 2;
    let joined = eventually("n4 holds settled replicas that serve", &cluster, || {
        add_rounds(&cluster, &token, &mut ledger, &VOTERS, round..round + 1);
        round += 1;
        let placed = placement(&cluster, 0)?;
        let on_joiner = placed
            .iter()
            .filter(|(replicas, ..)| replicas.iter().any(|node| node == NODES[JOINER]))
            .count();
        let settled = placed.iter().all(|(_, _, moving)| moving.is_empty());
        (on_joiner >= 2 && settled).then_some(())?;
        (serving_here(&cluster, JOINER)? == on_joiner).then_some(placed)
    });
    eprintln!(
        "after n4 joined: {joined:?}; adds refused, unknown: {:?}",
        ledger.failed()
    );
    for (replicas, epoch, _) in &joined {
        if replicas.iter().any(|node| node == NODES[JOINER]) {
            assert!(*epoch >= 1, "a replica on n4 is a moved epoch: {joined:?}");
        }
    }
    // Served through n4 too: its replicas hold what was acknowledged before they existed.
    let all = [0, 1, 2, JOINER];
    add_rounds(&cluster, &token, &mut ledger, &all, round..round + 2);
    round += 2;

    // n4 leaves on SIGTERM: its replicas move back before it is removed.
    let (left, exit) = std::thread::scope(|scope| {
        let leaver = scope.spawn(|| cluster.terminate(JOINER));
        let left = eventually("n4's replicas moved away and settled", &cluster, || {
            add_rounds(&cluster, &token, &mut ledger, &VOTERS, round..round + 1);
            round += 1;
            let placed = placement(&cluster, 0)?;
            let gone = placed.iter().all(|(replicas, _, moving)| {
                moving.is_empty() && replicas.iter().all(|node| node != NODES[JOINER])
            });
            gone.then_some(placed)
        });
        (left, leaver.join().expect("the leaver's wait"))
    });
    eprintln!(
        "after n4 left: {left:?}; adds refused, unknown: {:?}",
        ledger.failed()
    );
    assert!(exit.success(), "n4 left gracefully: {exit:?}");
    for index in VOTERS {
        eventually("every group on the voters serves", &cluster, || {
            serving_here(&cluster, index).filter(|groups| *groups == PARTITIONS)
        });
        // Once every move settled and the old groups are dropped, none is counted as moving.
        eventually("no group here in a move", &cluster, || {
            let moving = metric_sum(&cluster, index, "tessera_partition_groups_moving ");
            let groups = metric_sum(&cluster, index, "tessera_partition_groups ");
            (moving == 0.0 && groups == PARTITIONS as f64).then_some(())
        });
    }
    for id in ledger.ids() {
        for index in VOTERS {
            let value = eventually(&format!("{id} read through node {index}"), &cluster, || {
                read_through(&cluster, index, &token, &id)
            });
            ledger.check_read(&id, value, NODES[index]);
        }
    }
    add_rounds(&cluster, &token, &mut ledger, &VOTERS, round..round + 1);
    // No ask failed while the partitions moved: commits followed them from the sealed groups,
    // and activations waited for the new copies (`docs/partitions.md`, "Moves").
    assert_eq!(ledger.failed(), (0, 0), "adds refused, of unknown outcome");
}

/// A member killed with its disk and removed: each partition it held a replica of moves to the
/// three voters — a new replica on a voter that had none of it, filled from a survivor's sealed
/// copy while the old group, one member short, still sealed with its majority — and every
/// acknowledged add is there.
#[test]
fn a_removed_nodes_replicas_are_rebuilt_on_the_others_with_every_acknowledged_add() {
    let cluster = Cluster::new(&NODES, VOTERS.len(), "partitions_moved_child_node")
        .with_partitions(PARTITIONS);
    cluster.start_until_up(NODES.len());
    let token = eventually("a tenant", &cluster, || create_tenant(&cluster, 0, "acme"));
    deploy_counter(&cluster, 0, &token, "counter", "");
    for index in 0..NODES.len() {
        wait_bound(&cluster, index, &token, "counter", 1);
    }
    let spread = eventually("n4 holds settled replicas that serve", &cluster, || {
        let placed = placement(&cluster, 0)?;
        let on_victim = placed
            .iter()
            .filter(|(replicas, ..)| replicas.iter().any(|node| node == NODES[JOINER]))
            .count();
        let settled = placed.iter().all(|(_, _, moving)| moving.is_empty());
        (on_victim >= 2 && settled).then_some(())?;
        for index in 0..NODES.len() {
            serving_here(&cluster, index)?;
        }
        Some(placed)
    });
    let mut ledger = Ledger::read_through(&cluster, 0, &token, COUNTERS);
    let all = [0, 1, 2, JOINER];
    add_rounds(&cluster, &token, &mut ledger, &all, 0..3);

    cluster.kill(JOINER);
    cluster.lose_disk(JOINER);
    declare_lost(&cluster, 0, NODES[JOINER]);
    let rebuilt = eventually(
        "n4's replicas placed on the voters, settled",
        &cluster,
        || {
            let placed = placement(&cluster, 0)?;
            let done = placed.iter().all(|(replicas, _, moving)| {
                moving.is_empty()
                    && replicas.len() == VOTERS.len()
                    && replicas.iter().all(|node| node != NODES[JOINER])
            });
            done.then_some(placed)
        },
    );
    eprintln!("before: {spread:?}\nafter n4's removal: {rebuilt:?}");
    for (before, after) in spread.iter().zip(&rebuilt) {
        if before.0.iter().any(|node| node == NODES[JOINER]) {
            assert!(
                after.1 > before.1,
                "a partition n4 held moved: {before:?} → {after:?}"
            );
        }
    }
    for index in VOTERS {
        eventually(
            "every partition's group serves on every voter",
            &cluster,
            || serving_here(&cluster, index).filter(|groups| *groups == PARTITIONS),
        );
    }
    for id in ledger.ids() {
        for index in VOTERS {
            let value = eventually(&format!("{id} read through node {index}"), &cluster, || {
                read_through(&cluster, index, &token, &id)
            });
            ledger.check_read(&id, value, NODES[index]);
        }
    }
    add_rounds(&cluster, &token, &mut ledger, &VOTERS, 3..5);
}

/// A voter killed (`kill -9`) while partitions move onto a joining node — the one that leads a
/// move — and started again later. The moves whose new group has it as a replica wait: a
/// group starting for the first time forms only once every replica answered, and a move seals
/// its old group only once every replica of the new one is in its view; meanwhile the old
/// groups serve, and the partitions' shards stay with their replicas. Every acknowledged add is
/// there through it all, and once the voter is back every move settles and its replicas catch
/// up.
#[test]
fn a_voter_killed_while_partitions_move_loses_no_acknowledged_add() {
    let (cluster, token, mut ledger) = voters_serving();

    // n4 joins; as soon as a move is under way, its leader — the first replica of both epochs
    // in the new group's voter order — is killed.
    cluster.start(JOINER);
    let victim = eventually("a move under way", &cluster, || {
        let placed = placement(&cluster, 0)?;
        let (partition, (replicas, _, previous)) = placed
            .iter()
            .enumerate()
            .find(|(_, (_, _, previous))| !previous.is_empty())?;
        let voters = tessera_metadata::group_voters(partition as u32, replicas);
        let leader = voters.iter().find(|node| previous.contains(node))?;
        Some(cluster.index_of(leader))
    });
    cluster.kill(victim);
    // Every counter is still served while the voter is dead.
    let alive: Vec<usize> = (0..NODES.len()).filter(|index| *index != victim).collect();
    add_rounds(&cluster, &token, &mut ledger, &alive, 2..6);
    eprintln!(
        "with {} dead: {:?}; adds refused, unknown: {:?}",
        NODES[victim],
        placement(&cluster, alive[0]),
        ledger.failed()
    );

    cluster.start(victim);
    let mut round = 6;
    let settled = eventually(
        "every move settled once the voter is back",
        &cluster,
        || {
            add_rounds(&cluster, &token, &mut ledger, &alive, round..round + 1);
            round += 1;
            let placed = placement(&cluster, alive[0])?;
            placed
                .iter()
                .all(|(_, _, moving)| moving.is_empty())
                .then_some(placed)
        },
    );
    eprintln!("settled: {settled:?}");
    for index in 0..NODES.len() {
        eventually("every group here serves", &cluster, || {
            serving_here(&cluster, index)
        });
    }
    for id in ledger.ids() {
        for (index, node) in NODES.iter().enumerate() {
            let value = eventually(&format!("{id} read through node {index}"), &cluster, || {
                read_through(&cluster, index, &token, &id)
            });
            ledger.check_read(&id, value, node);
        }
    }
    add_rounds(&cluster, &token, &mut ledger, &VOTERS, round..round + 1);
}
