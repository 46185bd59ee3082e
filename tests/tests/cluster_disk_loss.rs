//! A voter's disk is lost: it is killed, the operator declares its state lost
//! (`down`, then `remove --state-lost`), and it starts again under its old id (voters are
//! configuration) on an empty data directory, as `docs/cluster.md` says to. Its metadata
//! replica recovers from the other voters before it votes (`Replica::start_empty`); once it
//! has, it is one of the two voters the catalog needs when another voter is killed, and it
//! holds everything committed before its disk was lost. The shards it held start new lineages
//! (new generations). Each node is this test binary re-run as a child
//! (`tessera_tests::processes`).

use serde_json::json;
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const VOTERS: [&str; 3] = ["n1", "n2", "n3"];

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by a_voter_whose_disk_was_lost_rejoins_under_its_id_and_forgets_nothing"]
fn disk_loss_child_node() {
    run_child_if_asked();
}

fn commit_number(cluster: &Cluster, index: usize) -> Option<u64> {
    cluster_status(cluster, index)?["commit"].as_u64()
}

/// The generations the committed shard table gives `node`, as node `index` sees them.
fn generations_of(cluster: &Cluster, index: usize, node: &str) -> Option<Vec<u64>> {
    let reply = get(&format!("{}/v1/cluster/shards", cluster.url(index)), ADMIN)?;
    let shards = reply.json();
    let mut generations: Vec<u64> = shards["shards"]
        .as_array()?
        .iter()
        .filter(|shard| shard["node"] == node)
        .filter_map(|shard| shard["generation"].as_u64())
        .collect();
    generations.sort_unstable();
    Some(generations)
}

#[test]
fn a_voter_whose_disk_was_lost_rejoins_under_its_id_and_forgets_nothing() {
    let cluster = Cluster::new(&VOTERS, VOTERS.len(), "disk_loss_child_node");
    cluster.start_until_up(VOTERS.len());
    let primary = eventually("a primary", &cluster, || {
        cluster_status(&cluster, 0)?["primary"]
            .as_str()
            .map(str::to_string)
    });
    let primary = cluster.index_of(&primary);
    let lost = (primary + 1) % VOTERS.len();
    let survivor = (primary + 2) % VOTERS.len();
    let token = eventually("a tenant", &cluster, || {
        create_tenant(&cluster, primary, "acme")
    });
    deploy_counter(&cluster, primary, &token, "counter", "");
    for index in 0..VOTERS.len() {
        wait_bound(&cluster, index, &token, "counter", 1);
    }
    for id in 0..12 {
        let reply = ask_counter(&cluster, primary, &token, &format!("c{id}"), 1);
        assert_eq!(reply.status, 200, "c{id}: {}", reply.body);
    }
    let held_before = eventually("the lost voter's shards", &cluster, || {
        generations_of(&cluster, survivor, VOTERS[lost]).filter(|held| !held.is_empty())
    });
    let committed_before = eventually("the commit number", &cluster, || {
        commit_number(&cluster, survivor)
    });

    cluster.kill(lost);
    declare_lost(&cluster, survivor, VOTERS[lost]);
    cluster.lose_disk(lost);
    cluster.start(lost);
    eventually(
        "the lost voter recovered the catalog and is up",
        &cluster,
        || {
            let status = cluster_status(&cluster, lost)?;
            let caught_up = status["commit"].as_u64()? >= committed_before;
            (caught_up && members_up(&status) == VOTERS.len()).then_some(())
        },
    );
    // Whatever it serves of its old shards is a new lineage, not the lost one continued empty.
    let held_after = generations_of(&cluster, survivor, VOTERS[lost]).unwrap_or_default();
    assert!(
        held_after
            .iter()
            .all(|generation| !held_before.contains(generation)),
        "the old generations {held_before:?} came back: {held_after:?}"
    );

    // Now the recovered voter is needed: with the primary gone, the catalog commits only with
    // its vote, and what it holds is everything committed before its disk was lost.
    cluster.kill(primary);
    let other = eventually(
        "a tenant created by the survivor and the recovered voter",
        &cluster,
        || create_tenant(&cluster, survivor, "globex"),
    );
    for index in [survivor, lost] {
        let reply = get(&format!("{}/v1/types", cluster.url(index)), &token).expect("answers");
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(
            reply.body.contains("\"counter\""),
            "node {index} knows the type deployed before the loss: {}",
            reply.body
        );
    }
    let reply = get(&format!("{}/v1/types", cluster.url(lost)), &other).expect("answers");
    assert_eq!(
        reply.status, 200,
        "the new tenant's token works on the recovered voter"
    );

    // The killed primary comes back on its disk; every counter is served again, through the
    // recovered voter: those it held start empty (their state was on its disk), the others
    // keep theirs.
    cluster.start(primary);
    for id in 0..12 {
        let counter = format!("{}/v1/entities/counter/c{id}/ask", cluster.url(lost));
        let reply = eventually(&format!("counter c{id} served"), &cluster, || {
            post_json(&counter, &token, &json!({"Add": 5})).filter(|reply| reply.status == 200)
        });
        let value = reply.json();
        assert!(
            value == json!(5) || value == json!(6),
            "c{id} answered {value}"
        );
    }
}
