//! A graceful leave that cannot hand its shards off never throws their state away: a
//! non-voting member that is the only one allowed to own shards (the role constraint) leaves on
//! SIGTERM; no other member may take them, so the handoffs cannot finish. After
//! `cluster.leave_timeout_ms` it exits still `leaving`, owning its shards; the operator calls
//! the leave off (`POST /v1/cluster/members/{node}/up`), the node restarts on its data
//! directory and every counter still has its value. Each node is this test binary re-run as a
//! child (`tessera_tests::processes`).

use serde_json::json;
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
const VOTERS: usize = 3;
/// The non-voting member: the harness starts it with role `edge`, the only role that may own
/// shards here.
const LEAVER: usize = 3;
const COUNTERS: u64 = 8;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by a_leave_that_cannot_hand_off_keeps_the_member_and_its_state as its child processes"]
fn leave_child_node() {
    run_child_if_asked();
}

fn member_of(status: &serde_json::Value, node: &str) -> Option<serde_json::Value> {
    status["members"]
        .as_array()?
        .iter()
        .find(|member| member["node"] == node)
        .cloned()
}

#[test]
fn a_leave_that_cannot_hand_off_keeps_the_member_and_its_state() {
    let cluster = Cluster::new(&NODES, VOTERS, "leave_child_node").with_config(
        "role_constraint = \"edge\"",
        "roles = [\"voter\"]\nleave_timeout_ms = 2000",
    );
    for index in 0..NODES.len() {
        cluster.start(index);
    }
    eventually("four members up", &cluster, || {
        let status = cluster_status(&cluster, 0)?;
        (members_up(&status) == NODES.len()).then_some(())
    });
    let token = eventually("a tenant", &cluster, || create_tenant(&cluster, 0, "acme"));
    deploy_counter(&cluster, 0, &token, "counter", "");
    wait_bound(&cluster, 0, &token, "counter", 1);
    wait_bound(&cluster, LEAVER, &token, "counter", 1);
    for counter in 0..COUNTERS {
        let reply = ask_counter(&cluster, 0, &token, &format!("c-{counter}"), counter + 1);
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let owned = member_of(&cluster_status(&cluster, 0).expect("status"), "n4")
        .expect("n4 is a member")["shards"]
        .as_u64()
        .unwrap_or(0);
    assert!(owned > 0, "the only member with role edge owns the shards");

    // SIGTERM: the leave cannot hand anything off, and stops short.
    cluster.terminate(LEAVER);
    let status = cluster_status(&cluster, 0).expect("status");
    let leaver = member_of(&status, "n4").expect("n4 is still a member");
    assert_eq!(leaver["state"], "leaving", "{leaver}");
    assert_eq!(leaver["shards"].as_u64(), Some(owned), "{leaver}");
    assert!(
        cluster.log(LEAVER).contains("the leave stops short"),
        "the node said why it stayed"
    );

    // The operator calls the leave off; the node comes back with every value.
    let up = post_json(
        &format!("{}/v1/cluster/members/n4/up", cluster.url(0)),
        ADMIN,
        &json!({}),
    )
    .expect("answered");
    assert_eq!(up.status, 200, "{}", up.body);
    cluster.start(LEAVER);
    for counter in 0..COUNTERS {
        let url = format!("{}/v1/entities/counter/c-{counter}/ask", cluster.url(0));
        let value = eventually(&format!("c-{counter} served again"), &cluster, || {
            let reply = post_json(&url, &token, &json!("Get"))?;
            (reply.status == 200).then(|| reply.json().as_u64())?
        });
        assert_eq!(value, counter + 1, "c-{counter} kept its state");
    }
}
