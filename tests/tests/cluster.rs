//! Three `tessera node` processes on loopback form a cluster over mutual TLS and keep one
//! catalog on the metadata plane: a tenant created through one node works with its token on
//! another, a plugin deployed through one runs on another, an entity has one activation
//! whichever node it is asked through, a fourth node without a vote joins through the seeds,
//! serves and leaves gracefully on SIGTERM, a peer speaking garbage is cut off while the cluster
//! serves, `kill -9` of the metadata primary loses no committed metadata, a new primary
//! commits and the survivors see the dead node unreachable, and the killed node, restarted,
//! catches up by state transfer.
//!
//! Each node is this test binary re-run as a child (`tessera_tests::processes`): the child
//! runs the real command line (`tessera node --cluster-listen ...`) until it is killed.

use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

/// The metadata plane's voters.
const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
/// Every node the test runs: the voters, then a member that joins later without a vote.
const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
const JOINER: usize = 3;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by cluster_of_three_processes as its child processes"]
fn child_node() {
    run_child_if_asked();
}

/// Sends bytes that are not a TLS handshake to node `index`'s cluster port and reports
/// whether the node closed the connection.
fn garbage_is_cut_off(cluster: &Cluster, index: usize) -> bool {
    let Ok(mut stream) = TcpStream::connect(cluster.members[index].cluster) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let _ = stream.write_all(&garbage);
    let mut buffer = [0u8; 1024];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return true, // closed
            Ok(_) => continue,    // an alert, then the close
            Err(error) => {
                return matches!(
                    error.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                );
            }
        }
    }
}

#[test]
fn cluster_of_three_processes() {
    let cluster = Cluster::new(&NODES, VOTERS.len(), "child_node");
    cluster.start_until_up(VOTERS.len());

    // A tenant created through node 1 works with its token on node 3 (once node 3 has
    // applied the command: reads trail the primary by the commands in flight).
    let token = create_tenant(&cluster, 0, "acme").expect("tenant through node 1");
    // A linearizable read through node 3 sees the write at once; a local one may trail.
    let url = |query: &str| format!("{}/v1/tenants/acme?consistency={query}", cluster.url(2));
    let reply = get(&url("linearizable"), ADMIN).expect("node 3 answers");
    assert_eq!(reply.status, 200, "linearizable read: {}", reply.body);
    let reply = get(&url("sometimes"), ADMIN).expect("node 3 answers");
    assert_eq!(reply.status, 400, "an unknown consistency: {}", reply.body);
    eventually("the tenant's token on node 3", &cluster, || {
        let reply = get(&format!("{}/v1/types", cluster.url(2)), &token)?;
        (reply.status == 200).then_some(())
    });

    // A plugin deployed through node 2 runs on node 3.
    deploy_counter(&cluster, 1, &token, "counter", "");
    for index in 0..VOTERS.len() {
        wait_bound(&cluster, index, &token, "counter", 1);
    }
    let reply = ask_counter(&cluster, 2, &token, "first", 5);
    assert_eq!(reply.status, 200, "ask through node 3: {}", reply.body);
    assert_eq!(reply.json(), json!(5));

    // One activation per entity, whichever node a message enters through: each counter is
    // added to through every node in turn and counts every addition once.
    const COUNTERS: u64 = 24;
    for round in 0..VOTERS.len() as u64 {
        for counter in 0..COUNTERS {
            let index = ((counter + round) % VOTERS.len() as u64) as usize;
            let reply = ask_counter(&cluster, index, &token, &format!("c{counter}"), 1);
            assert_eq!(
                reply.status, 200,
                "c{counter} via node {index}: {}",
                reply.body
            );
            assert_eq!(
                reply.json(),
                json!(round + 1),
                "c{counter} via node {index}"
            );
        }
    }
    let status = cluster_status(&cluster, 2).expect("status");
    let owners = status["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter(|member| member["shards"].as_u64().unwrap_or(0) > 0)
        .count();
    assert!(owners > 1, "the shards spread over the nodes: {status}");

    // A fourth node, not a voter, joins through the seeds: it follows the catalog (the
    // tenant's token and the deployed type work through it), reaches every entity with its
    // one activation, and is given shards of its own.
    cluster.start(JOINER);
    for index in [0, JOINER] {
        eventually("four members up", &cluster, || {
            let status = cluster_status(&cluster, index)?;
            (members_up(&status) == NODES.len()).then_some(())
        });
    }
    let status = cluster_status(&cluster, 0).expect("status");
    let joiner = status["members"]
        .as_array()
        .and_then(|members| {
            members
                .iter()
                .find(|member| member["node"] == NODES[JOINER])
        })
        .cloned()
        .expect("the joiner is a member");
    assert_eq!(joiner["roles"], json!(["edge"]), "its advertised roles");
    wait_bound(&cluster, JOINER, &token, "counter", 1);
    for counter in 0..COUNTERS {
        let reply = ask_counter(&cluster, JOINER, &token, &format!("c{counter}"), 1);
        assert_eq!(
            reply.status, 200,
            "c{counter} via the joiner: {}",
            reply.body
        );
        assert_eq!(reply.json(), json!(VOTERS.len() as u64 + 1), "c{counter}");
    }
    for counter in 0..COUNTERS {
        for (index, expected) in [(0, 1), (JOINER, 2)] {
            let reply = ask_counter(&cluster, index, &token, &format!("j{counter}"), 1);
            assert_eq!(
                reply.status, 200,
                "j{counter} via node {index}: {}",
                reply.body
            );
            assert_eq!(reply.json(), json!(expected), "j{counter} via node {index}");
        }
    }
    let joined = cluster_status(&cluster, 0).expect("status");
    let joiner_shards = joined["members"]
        .as_array()
        .expect("members")
        .iter()
        .find(|member| member["node"] == NODES[JOINER])
        .and_then(|member| member["shards"].as_u64())
        .expect("the joiner is a member");
    assert!(joiner_shards > 0, "the joiner owns shards: {joined}");

    // It leaves gracefully on SIGTERM: Leaving, Exiting, Removed, then the process exits.
    let exit = cluster.terminate(JOINER);
    assert!(exit.success(), "the joiner exits cleanly: {exit:?}");
    eventually("the joiner removed", &cluster, || {
        let status = cluster_status(&cluster, 0)?;
        let members = status["members"].as_array()?;
        (!members.iter().any(|member| member["node"] == NODES[JOINER])).then_some(())
    });

    // A peer speaking garbage is cut off and counted, and the cluster keeps serving.
    assert!(
        garbage_is_cut_off(&cluster, 0),
        "node 1 closes a garbage peer"
    );
    eventually("the garbage peer counted", &cluster, || {
        (metric_sum(&cluster, 0, "tessera_peer_refused_total") >= 1.0).then_some(())
    });
    let reply = ask_counter(&cluster, 0, &token, "first", 1);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json(), json!(6));

    // kill -9 of the metadata primary: a new primary is elected, the committed tenant is
    // still there, and a new catalog write commits through a survivor.
    let primary = status["primary"].as_str().expect("a primary").to_string();
    let killed = cluster.index_of(&primary);
    let commit_before = status["commit"].as_u64().expect("commit");
    cluster.kill(killed);
    let survivor = (killed + 1) % VOTERS.len();
    let second = eventually("a write after the primary's death", &cluster, || {
        create_tenant(&cluster, survivor, "globex")
    });
    let after = cluster_status(&cluster, survivor).expect("status after failover");
    assert_ne!(after["primary"], json!(primary), "a new primary: {after}");
    assert!(after["commit"].as_u64().expect("commit") > commit_before);
    let reply = get(&format!("{}/v1/tenants/acme", cluster.url(survivor)), ADMIN)
        .expect("survivor answers");
    assert_eq!(
        reply.status, 200,
        "the committed tenant survives: {}",
        reply.body
    );
    let new_primary = after["primary"]
        .as_str()
        .expect("a new primary")
        .to_string();
    let new_primary = cluster.index_of(&new_primary);
    for index in [survivor, new_primary] {
        eventually("the killed node seen as unreachable", &cluster, || {
            let status = cluster_status(&cluster, index)?;
            (reachable(&status, &primary) == Some(false)).then_some(())
        });
    }

    // The dead node's shards are not served — never a wrong or reset value — and the rest
    // are: every counter answers its next value or an error, through a survivor.
    let before: u64 = VOTERS.len() as u64 + 1; // three rounds through the voters, one via n4
    let mut not_served = Vec::new();
    for counter in 0..COUNTERS {
        let reply = ask_counter(&cluster, survivor, &token, &format!("c{counter}"), 1);
        if reply.status == 200 {
            assert_eq!(
                reply.json(),
                json!(before + 1),
                "c{counter} through a survivor"
            );
        } else {
            assert!(
                [503, 504].contains(&reply.status),
                "c{counter}: {} {}",
                reply.status,
                reply.body
            );
            if reply.status == 503 {
                assert_eq!(
                    reply.json()["error"]["code"],
                    "shard_unavailable",
                    "c{counter}: {}",
                    reply.body
                );
            }
            not_served.push(counter);
        }
    }
    assert!(
        !not_served.is_empty(),
        "the killed primary owned some of the counters' shards"
    );
    // The coordinator runs on the new primary: new shards are allocated, to live nodes.
    for fresh in 0..8 {
        let reply = ask_counter(&cluster, survivor, &token, &format!("fresh{fresh}"), 1);
        assert_eq!(reply.status, 200, "fresh{fresh}: {}", reply.body);
        assert_eq!(reply.json(), json!(1), "fresh{fresh}");
    }

    // An up member cannot be removed (it is only unreachable: its shards wait for it, with
    // their state), and an unknown one is a 404.
    let act = |node: &str, action: &str| {
        let url = format!(
            "{}/v1/cluster/members/{node}/{action}",
            cluster.url(survivor)
        );
        request("POST", &url, ADMIN, None).expect("survivor answers")
    };
    let reply = act(&primary, "remove");
    assert_eq!(
        reply.status, 400,
        "a removal must say the state is lost: {}",
        reply.body
    );
    assert_eq!(reply.json()["error"]["code"], "state_lost_not_confirmed");
    let reply = act(&primary, "remove?state_lost=true");
    assert_eq!(reply.status, 409, "removing an up member: {}", reply.body);
    assert_eq!(act("nobody", "down").status, 404);

    // More catalog writes than the survivors' log keeps (about two checkpoint intervals).
    for round in 0..4 * CHECKPOINT_INTERVAL_OPS {
        let url = format!("{}/v1/tenants/globex/quotas", cluster.url(survivor));
        let reply = request(
            "PUT",
            &url,
            ADMIN,
            Some((
                "application/json",
                json!({"messages_burst": 1_000 + round})
                    .to_string()
                    .into_bytes(),
            )),
        )
        .expect("survivor answers");
        assert_eq!(reply.status, 200, "quota write {round}: {}", reply.body);
    }

    // The killed node, restarted on its data directory, catches up by state transfer (the
    // ops it missed are gone from every log): it sees the writes made while it was dead, and
    // its token works there.
    cluster.start(killed);
    let target = cluster_status(&cluster, survivor).expect("status")["commit"]
        .as_u64()
        .expect("commit");
    eventually("the restarted node caught up", &cluster, || {
        let status = cluster_status(&cluster, killed)?;
        (status["commit"].as_u64()? >= target).then_some(())
    });
    eventually("the restarted node reachable again", &cluster, || {
        let status = cluster_status(&cluster, survivor)?;
        (reachable(&status, &primary) == Some(true)).then_some(())
    });
    // Every member reports its commit number; once all have applied everything, none lags.
    eventually("every member's progress, with no lag", &cluster, || {
        let status = cluster_status(&cluster, survivor)?;
        let members = status["members"].as_array()?;
        let caught_up = members.len() == VOTERS.len()
            && members.iter().all(|member| {
                member["commit"].as_u64() >= Some(target) && member["lag"].as_u64() == Some(0)
            });
        caught_up.then_some(())
    });
    assert!(
        metric_sum(&cluster, killed, "tessera_metadata_states_installed_total") >= 1.0,
        "the restarted node installed a checkpoint"
    );
    let reply = get(&format!("{}/v1/tenants/globex", cluster.url(killed)), ADMIN)
        .expect("restarted node answers");
    assert_eq!(
        reply.json()["quotas"]["messages_burst"],
        json!(1_000 + 4 * CHECKPOINT_INTERVAL_OPS - 1),
        "the last write made while it was dead"
    );
    let reply =
        get(&format!("{}/v1/types", cluster.url(killed)), &second).expect("restarted node answers");
    assert_eq!(
        reply.status, 200,
        "the new tenant's token on the restarted node"
    );
    wait_bound(&cluster, killed, &token, "counter", 1);
    let reply = ask_counter(&cluster, killed, &token, "first", 1);
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json(), json!(7), "the counter kept its value");
    // The dead node's counters are back with their state: a refused add did not apply.
    for counter in not_served {
        let reply = ask_counter(&cluster, survivor, &token, &format!("c{counter}"), 1);
        assert_eq!(
            reply.status, 200,
            "c{counter} after the restart: {}",
            reply.body
        );
        assert_eq!(reply.json(), json!(before + 1), "c{counter} kept its value");
    }
}
