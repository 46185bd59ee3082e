//! The partition plane's placement in a cluster of three `tessera node` processes with
//! `sharding.partitions.count` set: the coordinator, on the metadata primary, commits a
//! placement through the replicated catalog, every node shows the same one in `/v1/cluster`
//! (every partition on three distinct members, each member the preferred primary of as many
//! partitions as the others). Each node runs a voter of every partition placed on it: every
//! group elects a primary its replicas agree on, and a group whose primary's node is killed
//! elects another among the rest; restarted, the node's replicas rejoin. A cluster whose
//! configs leave the count to its default runs the plane: its entity state survives `kill -9`.
//!
//! Each node is this test binary re-run as a child (`tessera_tests::processes`).

use std::collections::BTreeMap;
use tessera_tests::cluster::*;
use tessera_tests::partition_plane::placed_partitions;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
const PARTITIONS: usize = 6;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by the tests of this file as their child processes"]
fn partitions_child_node() {
    run_child_if_asked();
}

/// `(partition, replicas)` as node `index` shows them, once every partition is placed.
fn placement(cluster: &Cluster, index: usize) -> Option<BTreeMap<u64, Vec<String>>> {
    let placed = placed_partitions(cluster, index)?;
    let complete = placed.len() == PARTITIONS
        && placed
            .values()
            .all(|replicas: &Vec<String>| replicas.len() == NODES.len());
    complete.then_some(placed)
}

#[test]
fn every_node_shows_the_coordinators_placement() {
    let cluster =
        Cluster::new(&NODES, NODES.len(), "partitions_child_node").with_partitions(PARTITIONS);
    cluster.start_until_up(NODES.len());
    let first = eventually("every partition placed on three members", &cluster, || {
        placement(&cluster, 0)
    });
    for replicas in first.values() {
        let mut distinct = replicas.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), NODES.len(), "{replicas:?}");
    }
    let mut preferred: BTreeMap<&str, usize> = BTreeMap::new();
    for replicas in first.values() {
        *preferred.entry(replicas[0].as_str()).or_default() += 1;
    }
    assert_eq!(
        preferred.values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "preferred primaries spread evenly: {preferred:?}"
    );
    for index in 1..NODES.len() {
        let seen = eventually("the same placement on every node", &cluster, || {
            placement(&cluster, index).filter(|placed| *placed == first)
        });
        assert_eq!(seen, first);
    }
}

/// What node `index` says of the partition groups it runs: `partition -> (primary, view)`,
/// once it runs `PARTITIONS` of them, each with a primary it has heard from within a second.
fn groups_here(cluster: &Cluster, index: usize) -> Option<BTreeMap<u64, (String, u64)>> {
    let url = format!("{}/v1/cluster/partitions", cluster.url(index));
    let answer = get(&url, ADMIN)?.json();
    let groups: BTreeMap<u64, (String, u64)> = answer["partitions"]
        .as_array()?
        .iter()
        .filter_map(|here| {
            let status = &here["status"];
            let in_contact = status["contact_age_ms"].as_u64()? < 1_000;
            let primary = status["primary"].as_str()?.to_string();
            in_contact.then_some((
                here["partition"].as_u64()?,
                (primary, status["view"].as_u64()?),
            ))
        })
        .collect();
    (groups.len() == PARTITIONS).then_some(groups)
}

/// Whether node `index` reports, for each group it leads, a lag for each of the three
/// replicas (idle groups: nothing left to acknowledge), and none for the groups it does not.
fn reports_lag_where_it_leads(cluster: &Cluster, index: usize) -> bool {
    let url = format!("{}/v1/cluster/partitions", cluster.url(index));
    let Some(answer) = get(&url, ADMIN) else {
        return false;
    };
    let answer = answer.json();
    let Some(groups) = answer["partitions"].as_array() else {
        return false;
    };
    groups.len() == PARTITIONS
        && groups.iter().all(|here| {
            let status = &here["status"];
            let leads = status["primary"].as_str() == Some(NODES[index]);
            let lag: Vec<Option<u64>> = status["lag"]
                .as_array()
                .map(|lag| lag.iter().map(serde_json::Value::as_u64).collect())
                .unwrap_or_default();
            if leads {
                lag == [Some(0); 3]
            } else {
                lag.is_empty()
            }
        })
}

/// Waits until the nodes of `indexes` run every partition's group under the same primary and
/// view, none of them `dead`; that agreement.
fn agreed(
    cluster: &Cluster,
    indexes: &[usize],
    dead: Option<&str>,
) -> BTreeMap<u64, (String, u64)> {
    eventually(
        "the replicas agree on every partition's primary",
        cluster,
        || {
            let seen: Vec<_> = indexes
                .iter()
                .map(|index| groups_here(cluster, *index))
                .collect::<Option<_>>()?;
            let alive = seen[0]
                .values()
                .all(|(primary, _)| Some(primary.as_str()) != dead);
            (alive && seen.windows(2).all(|pair| pair[0] == pair[1])).then(|| seen[0].clone())
        },
    )
}

#[test]
fn every_partition_group_elects_a_primary_and_replaces_it_when_its_node_dies() {
    let cluster =
        Cluster::new(&NODES, NODES.len(), "partitions_child_node").with_partitions(PARTITIONS);
    cluster.start_until_up(NODES.len());
    eventually("every partition placed on three members", &cluster, || {
        placement(&cluster, 0)
    });
    let before = agreed(&cluster, &[0, 1, 2], None);
    // `/v1/cluster` shows each placed partition's group as the answering node's replica sees
    // it (read again until it matches the agreement: a view change may come between reads).
    eventually("/v1/cluster shows every group's primary", &cluster, || {
        let status = cluster_status(&cluster, 0)?;
        let shown: BTreeMap<u64, (String, u64)> = status["partitions"]
            .as_array()?
            .iter()
            .map(|placed| {
                let group = &placed["group"];
                let primary = group["primary"].as_str()?.to_string();
                Some((
                    placed["partition"].as_u64()?,
                    (primary, group["view"].as_u64()?),
                ))
            })
            .collect::<Option<_>>()?;
        (shown == agreed(&cluster, &[0, 1, 2], None)).then_some(())
    });
    eventually("primaries report their replicas' lag", &cluster, || {
        (0..NODES.len())
            .all(|index| reports_lag_where_it_leads(&cluster, index))
            .then_some(())
    });
    for command in [["partition", "status"], ["cluster", "status"]] {
        let cli = tessera_host::cli::run_from(
            ["tessera", command[0], command[1], "--url"]
                .into_iter()
                .map(str::to_string)
                .chain([cluster.url(0), "--token".into(), ADMIN.into()]),
        );
        assert_eq!(cli, std::process::ExitCode::SUCCESS, "tessera {command:?}");
    }
    // The metrics count the groups each node runs and leads (read again until they match the
    // replicas' agreement: a view change may come between two reads).
    eventually(
        "the metrics count the groups each node leads",
        &cluster,
        || {
            let now = (0..NODES.len())
                .map(|index| groups_here(&cluster, index))
                .collect::<Option<Vec<_>>>()?;
            let agreement = now
                .windows(2)
                .all(|pair| pair[0] == pair[1])
                .then(|| &now[0])?;
            NODES
                .iter()
                .enumerate()
                .all(|(index, node)| {
                    let leads = agreement
                        .values()
                        .filter(|(primary, _)| primary == node)
                        .count();
                    metric_sum(&cluster, index, "tessera_partition_groups ") == PARTITIONS as f64
                        && metric_sum(&cluster, index, "tessera_partition_groups_leading ")
                            == leads as f64
                })
                .then_some(())
        },
    );
    // The node that is primary of the most partitions dies with kill -9.
    let mut led: BTreeMap<&str, usize> = BTreeMap::new();
    for (primary, _) in before.values() {
        *led.entry(primary.as_str()).or_default() += 1;
    }
    let (victim, _) = led
        .iter()
        .max_by_key(|(_, count)| **count)
        .expect("some primary");
    let victim = cluster.index_of(victim);
    cluster.kill(victim);
    let survivors: Vec<usize> = (0..NODES.len()).filter(|index| *index != victim).collect();
    let after = agreed(&cluster, &survivors, Some(NODES[victim]));
    for (partition, (primary, view)) in &after {
        assert_ne!(primary, NODES[victim], "partition {partition}: {after:?}");
        let (was, old_view) = &before[partition];
        if was == NODES[victim] {
            assert!(
                view > old_view,
                "partition {partition} changed view: {after:?}"
            );
        }
    }
    // Back on its journals, the dead node's replicas rejoin their groups.
    cluster.start(victim);
    agreed(&cluster, &[0, 1, 2], None);
}

/// A cluster whose nodes' configs leave the partition count to its default replicates entity
/// state: the coordinator places `PARTITIONS_CLUSTER_DEFAULT` partitions of three replicas,
/// counters added to through every node keep every acknowledged add, and `kill -9` of the
/// node serving the first of them loses none: each reads its last acknowledged value through
/// a survivor (with the plane off it would wait for the dead owner). Restarted on its own disk
/// after more adds, the killed node's replicas roll their databases back to their last
/// checkpoints and catch up: with another node killed, the counters read their acknowledged
/// values through it, whose replicas now lead some of their groups.
#[test]
fn a_cluster_left_to_its_defaults_replicates_entity_state() {
    use tessera_sharding::PARTITIONS_CLUSTER_DEFAULT;
    use tessera_tests::partition_plane::{Ledger, add_rounds, counters_served_by, read_through};
    let cluster =
        Cluster::new(&NODES, NODES.len(), "partitions_child_node").with_default_partitions();
    cluster.start_until_up(NODES.len());
    let defaults = PARTITIONS_CLUSTER_DEFAULT as usize;
    for index in 0..NODES.len() {
        eventually(
            "the default partitions placed on three members",
            &cluster,
            || {
                let status = cluster_status(&cluster, index)?;
                let partitions = status["partitions"].as_array()?;
                let whole = partitions.len() == defaults
                    && partitions.iter().all(|partition| {
                        partition["replicas"].as_array().map(Vec::len) == Some(NODES.len())
                    });
                whole.then_some(())
            },
        );
    }
    let token = eventually("a tenant", &cluster, || create_tenant(&cluster, 0, "acme"));
    deploy_counter(&cluster, 0, &token, "counter", "");
    for index in 0..NODES.len() {
        wait_bound(&cluster, index, &token, "counter", 1);
    }
    let mut ledger = Ledger::read_through(&cluster, 0, &token, 6);
    // Ten adds a counter: past the harness's checkpoint interval in every counter's partition,
    // so the killed node restarts from checkpoints, not from the empty state.
    add_rounds(&cluster, &token, &mut ledger, &[0, 1, 2], 0..10);

    let ids = ledger.ids();
    let served = eventually("the counters' owners", &cluster, || {
        counters_served_by(&cluster, 0, &ids)
    });
    let victim = NODES
        .iter()
        .position(|node| *node == served[&ids[0]])
        .expect("a node serves the first counter");
    cluster.kill(victim);
    let killed = std::time::Instant::now();
    let survivors: Vec<usize> = (0..NODES.len()).filter(|index| *index != victim).collect();
    for id in &ids {
        let through = survivors[0];
        let value = eventually(&format!("{id} read through a survivor"), &cluster, || {
            read_through(&cluster, through, &token, id)
        });
        // Panics unless it is the last acknowledged value (plus adds of unknown outcome).
        ledger.check_read(id, value, NODES[through]);
    }
    eprintln!(
        "{} of {} counters' owners killed ({}); every value read within {:?}",
        served
            .values()
            .filter(|node| *node == NODES[victim])
            .count(),
        ids.len(),
        NODES[victim],
        killed.elapsed()
    );

    add_rounds(&cluster, &token, &mut ledger, &survivors, 10..13);
    cluster.start(victim);
    eventually("the restarted node serves", &cluster, || {
        read_through(&cluster, victim, &token, &ids[0])
    });
    let second = survivors[1];
    cluster.kill(second);
    for id in &ids {
        let value = eventually(
            &format!("{id} read through the restarted node"),
            &cluster,
            || read_through(&cluster, victim, &token, id),
        );
        ledger.check_read(id, value, NODES[victim]);
    }
    eventually("a group led by the restarted node", &cluster, || {
        let url = format!("{}/v1/cluster/partitions", cluster.url(victim));
        let answer = get(&url, ADMIN)?.json();
        answer["partitions"]
            .as_array()?
            .iter()
            .any(|here| here["status"]["primary"].as_str() == Some(NODES[victim]))
            .then_some(())
    });
}
