//! The dashboard in a real headless Chromium (Debian's `chromium`), against a single node and
//! against a cluster of three `tessera node` processes: without a token the page shows only
//! its login form; logged in (the admin token handed over once in the URL's fragment) it shows
//! the members, the types and their entities and the partition map that the API reports, and a
//! screenshot of it is written. Without a browser the tests say so and pass: `.ci/run` installs
//! one.
//!
//! The cluster's nodes are this test binary re-run as children (`tessera_tests::processes`).

use serde_json::json;
use std::path::{Path, PathBuf};
use tessera_tests::browser::{Capture, find_chromium, headless};
use tessera_tests::cluster::*;
use tessera_tests::processes::run_child_if_asked;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Counters created before the page is loaded.
const COUNTERS: usize = 12;
const WINDOW: (u32, u32) = (1280, 1500);
/// Partitions of the three-node cluster's partition plane, whose placement the page maps.
const PARTITIONS: usize = 6;
/// Set to where the screenshot of the three-node dashboard should go (by default, beside the
/// test build); `docs/dashboard.png` is one.
const SCREENSHOT_ENV: &str = "TESSERA_DASHBOARD_SCREENSHOT";

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by the_dashboard_of_three_nodes_in_chromium as its child processes"]
fn dashboard_child_node() {
    run_child_if_asked();
}

/// The browser, or `None` after saying clearly why the test does not run.
fn chromium_or_skip(test: &str) -> Option<PathBuf> {
    let found = find_chromium();
    if found.is_none() {
        eprintln!(
            "SKIPPED {test}: no headless browser: install Debian's `chromium` package \
             (`apt-get install -y chromium`; .ci/run does when it runs as root) or set \
             TESSERA_CHROMIUM to a Chromium binary"
        );
    }
    found
}

/// The value of `attribute` on the page's `<body>`.
fn body_attribute(dom: &str, attribute: &str) -> Option<String> {
    let body = &dom[dom.find("<body")?..];
    let tag = &body[..body.find('>')?];
    let start = tag.find(&format!("{attribute}=\""))? + attribute.len() + 2;
    Some(tag[start..].split('"').next()?.to_string())
}

/// The text of the cell with `class` in the types table's row of `tenant`'s `entity_type`.
fn type_cell(dom: &str, tenant: &str, entity_type: &str, class: &str) -> Option<String> {
    let row = &dom[dom.find(&format!(
        "<tr data-tenant=\"{tenant}\" data-type=\"{entity_type}\">"
    ))?..];
    let row = &row[..row.find("</tr>")?];
    let cell = &row[row.find(&format!("class=\"{class}\">"))? + class.len() + 9..];
    Some(cell[..cell.find('<')?].to_string())
}

/// Loads `/ui` without a token: the login form, nothing else.
fn assert_login_only(chromium: &Path, base: &str) {
    let dom = headless(chromium, &format!("{base}/ui"), Capture::Dom, WINDOW);
    assert_eq!(
        body_attribute(&dom, "data-view").as_deref(),
        Some("login"),
        "{dom}"
    );
    assert_eq!(body_attribute(&dom, "data-ready"), None, "{dom}");
    assert!(dom.contains("<main id=\"dashboard\" hidden"), "{dom}");
    assert!(!dom.contains("<main id=\"login\" hidden"), "{dom}");
    assert!(!dom.contains("data-node="), "no member is shown: {dom}");
    assert!(!dom.contains("data-tenant="), "no type is shown: {dom}");
}

/// Loads `/ui` logged in and checks it against `/v1/cluster` and `/v1/overview`: the member
/// count, every type, and the counters' live entities (`COUNTERS`).
fn assert_dashboard_matches_the_api(chromium: &Path, base: &str) {
    let cluster = get(&format!("{base}/v1/cluster"), ADMIN)
        .expect("cluster")
        .json();
    let overview = get(&format!("{base}/v1/overview"), ADMIN)
        .expect("overview")
        .json();
    let members = cluster["members"].as_array().expect("members").len();
    let types = overview["types"].as_array().expect("types");
    let url = format!("{base}/ui#token={ADMIN}");
    let dom = headless(chromium, &url, Capture::Dom, WINDOW);
    assert_eq!(
        body_attribute(&dom, "data-ready").as_deref(),
        Some("true"),
        "{dom}"
    );
    assert_eq!(
        body_attribute(&dom, "data-view").as_deref(),
        Some("dashboard")
    );
    assert_eq!(
        body_attribute(&dom, "data-members"),
        Some(members.to_string())
    );
    assert_eq!(
        body_attribute(&dom, "data-types"),
        Some(types.len().to_string())
    );
    for member in cluster["members"].as_array().expect("members") {
        let node = member["node"].as_str().expect("a node id");
        assert!(
            dom.contains(&format!("<tr data-node=\"{node}\">")),
            "{node}: {dom}"
        );
    }
    for ty in types {
        let (tenant, name) = (ty["tenant"].as_str().unwrap(), ty["type"].as_str().unwrap());
        let live = type_cell(&dom, tenant, name, "num live");
        assert_eq!(
            live,
            Some(ty["live_entities"].to_string()),
            "{tenant}/{name}"
        );
    }
    assert_eq!(
        type_cell(&dom, "acme", "counter", "num live"),
        Some(COUNTERS.to_string())
    );
    let partitions = cluster["partitions"].as_array().expect("partitions");
    assert_eq!(
        body_attribute(&dom, "data-partitions"),
        Some(partitions.len().to_string())
    );
    for placement in partitions {
        let partition = &placement["partition"];
        let replicas: Vec<String> = placement["replicas"]
            .as_array()
            .expect("replicas")
            .iter()
            .enumerate()
            .map(|(index, node)| {
                let node = node.as_str().expect("a node id");
                if index == 0 {
                    format!("{node} ★")
                } else {
                    node.to_string()
                }
            })
            .collect();
        let row = format!("<tr data-partition=\"{partition}\">");
        let shown = dom
            .split_once(&row)
            .and_then(|(_, rest)| rest.split_once("<td class=\"replicas\">"))
            .and_then(|(_, rest)| rest.split_once("</td>"))
            .map(|(replicas, _)| replicas.to_string());
        assert_eq!(
            shown,
            Some(replicas.join(", ")),
            "partition {partition}: {dom}"
        );
    }
    assert!(
        !dom.contains(ADMIN),
        "the token is not written into the page"
    );
}

/// Creates tenant `acme` with `counter` deployed through `base` and `COUNTERS` counters; the
/// tenant's token.
fn populate(base: &str) -> String {
    let tenant = post_json(
        &format!("{base}/v1/tenants"),
        ADMIN,
        &json!({"name": "acme"}),
    )
    .expect("tenant");
    assert_eq!(tenant.status, 201, "{}", tenant.body);
    let token = tenant.json()["token"].as_str().expect("token").to_string();
    let plugin = std::fs::read(tessera_tests::COUNTER).expect("the counter plugin");
    let url = format!("{base}/v1/types/counter/versions");
    let deployed = request("POST", &url, &token, Some(("application/wasm", plugin)));
    assert_eq!(deployed.map(|reply| reply.status), Some(201));
    for n in 0..COUNTERS {
        let url = format!("{base}/v1/entities/counter/c{n}/ask");
        // Through one node of a cluster the type may still be binding elsewhere: retry.
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let reply = post_json(&url, &token, &json!({"Add": n})).expect("ask");
            if reply.status == 200 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "c{n}: {}", reply.body);
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    token
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_of_one_node_in_chromium() {
    let Some(chromium) = chromium_or_skip("the_dashboard_of_one_node_in_chromium") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = tessera_tests::node_config(dir.path(), ADMIN, 100);
    let node = tessera_host::node::Node::open(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(tessera_host::api::serve(
        node.clone(),
        listener,
        async move {
            let _ = stopped.await;
        },
    ));
    tokio::task::spawn_blocking(move || {
        let _tenant = populate(&base);
        assert_login_only(&chromium, &base);
        assert_dashboard_matches_the_api(&chromium, &base);
    })
    .await
    .unwrap();
    let _ = stop.send(());
    served.await.unwrap().unwrap();
    node.shutdown().await;
}

#[test]
fn the_dashboard_of_three_nodes_in_chromium() {
    let Some(chromium) = chromium_or_skip("the_dashboard_of_three_nodes_in_chromium") else {
        return;
    };
    let cluster =
        Cluster::new(&NODES, NODES.len(), "dashboard_child_node").with_partitions(PARTITIONS);
    cluster.start_until_up(NODES.len());
    eventually("every partition placed on three members", &cluster, || {
        let status = cluster_status(&cluster, 1)?;
        let partitions = status["partitions"].as_array()?;
        let placed = partitions.len() == PARTITIONS
            && partitions.iter().all(|placement| {
                placement["replicas"].as_array().map(Vec::len) == Some(NODES.len())
            });
        placed.then_some(())
    });
    let tenant_token = populate(&cluster.url(0));
    // Through another node than the one written through: its overview gathers all three.
    let base = cluster.url(1);
    eventually("every member's counters in the overview", &cluster, || {
        let overview = get(&format!("{base}/v1/overview"), ADMIN)?.json();
        (overview["nodes"].as_array()?.len() == NODES.len()).then_some(())
    });
    assert_login_only(&chromium, &base);
    assert_dashboard_matches_the_api(&chromium, &base);

    let screenshot = std::env::var_os(SCREENSHOT_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png"));
    let _ = std::fs::remove_file(&screenshot);
    // Traffic while the picture is taken, so its rate charts have something to show.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = std::thread::spawn({
        let (stop, url) = (stop.clone(), cluster.url(0));
        let token = tenant_token.clone();
        move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let counter = format!("{url}/v1/entities/counter/c{}/ask", n % COUNTERS);
                let message = if n % 7 == 0 {
                    json!("NoSuchMessage")
                } else {
                    json!({"Add": 1})
                };
                let _ = post_json(&counter, &token, &message);
                n += 1;
            }
        }
    });
    let url = format!("{base}/ui#token={ADMIN}");
    headless(
        &chromium,
        &url,
        Capture::Screenshot(&screenshot),
        (1280, 1050),
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().expect("the load thread");
    let png = std::fs::read(&screenshot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    assert!(
        png.len() > 20_000,
        "a page, not a blank: {} bytes",
        png.len()
    );
    eprintln!("the dashboard's screenshot: {}", screenshot.display());
}
