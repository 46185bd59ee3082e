//! A cluster of `tessera node` processes for the process tests: certificates, start, SIGTERM,
//! `kill -9`, and the HTTP calls the tests make against it. Each node is the calling test
//! binary re-run as a child ([`crate::processes`]), which runs the real command line.

use crate::processes::{free_address, spawn_node};
use serde_json::{Value as Json, json};
use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The admin token every node of a test cluster is started with.
pub const ADMIN: &str = "admin-token-for-the-cluster-tests";
/// How long anything a test waits for may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(90);
/// Catalog commands between checkpoints: small, so the log is a short window.
pub const CHECKPOINT_INTERVAL_OPS: u64 = 8;

/// One node of the cluster.
pub struct Member {
    /// Its id.
    pub id: &'static str,
    /// Its HTTP address.
    pub http: SocketAddr,
    /// Its cluster (transport) address.
    pub cluster: SocketAddr,
    child: std::sync::Mutex<Option<Child>>,
}

/// Node processes on loopback: which are voters, which join later through one seed.
pub struct Cluster {
    dir: tempfile::TempDir,
    /// Every node, started or not.
    pub members: Vec<Member>,
    voters: Vec<&'static str>,
    /// Nodes that are not voters: they join through the second voter, with role `edge`.
    joiners: Vec<usize>,
    /// The test (in the calling binary) that runs a child node.
    child_test: &'static str,
    /// Lines added to every node's `[sharding]` and `[cluster]` sections
    /// ([`Cluster::with_config`]).
    extra: (String, String),
    /// Whole tables appended to every node's config file ([`Cluster::with_tables`]).
    extra_tables: String,
    /// Every node's `sharding.partitions.count`: 0 (the plane off, owners holding their
    /// shards' state) unless the test asks for the plane ([`Cluster::with_partitions`]) or for
    /// the default ([`Cluster::with_default_partitions`]).
    partitions: Option<u32>,
    /// Environment variables every node is started with ([`Cluster::with_env`]).
    env: Vec<(String, String)>,
    /// The cluster address peers dial, where it is not the node's own
    /// ([`Cluster::with_advertised`]).
    advertised: std::collections::BTreeMap<usize, SocketAddr>,
}

impl Cluster {
    /// Certificates for `nodes` (none started yet); the first `voters` of them vote.
    pub fn new(nodes: &[&'static str], voters: usize, child_test: &'static str) -> Cluster {
        let dir = tempfile::tempdir().expect("temporary directory");
        tessera_cluster::create_dev_cluster(&dir.path().join("certs"), nodes)
            .expect("certificates");
        let members = nodes
            .iter()
            .map(|id| Member {
                id,
                http: free_address(),
                cluster: free_address(),
                child: std::sync::Mutex::new(None),
            })
            .collect();
        Cluster {
            dir,
            members,
            voters: nodes[..voters].to_vec(),
            joiners: (voters..nodes.len()).collect(),
            child_test,
            extra: (String::new(), String::new()),
            extra_tables: String::new(),
            partitions: Some(0),
            env: Vec::new(),
            advertised: std::collections::BTreeMap::new(),
        }
    }

    /// The same cluster with `name=value` in every node's environment.
    pub fn with_env(mut self, name: &str, value: &str) -> Cluster {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds `sharding` and `cluster` (TOML lines) to every node's config file.
    pub fn with_config(mut self, sharding: &str, cluster: &str) -> Cluster {
        self.extra = (sharding.to_string(), cluster.to_string());
        self
    }

    /// The same cluster with `toml` appended to every node's config file: whole tables the
    /// generated file does not have (say `[api]`), for the settings a test needs.
    pub fn with_tables(mut self, toml: &str) -> Cluster {
        self.extra_tables = toml.to_string();
        self
    }

    /// The same cluster with the partition plane serving `count` partitions.
    pub fn with_partitions(mut self, count: usize) -> Cluster {
        self.partitions = Some(u32::try_from(count).expect("a partition count"));
        self
    }

    /// The same cluster with no partition count in its config files: a cluster's default.
    pub fn with_default_partitions(mut self) -> Cluster {
        self.partitions = None;
        self
    }

    /// The same cluster with node `index` reached by its peers at `address` (a proxy in
    /// front of it, say): their seeds name it, and the node advertises it in the catalog.
    pub fn with_advertised(mut self, index: usize, address: SocketAddr) -> Cluster {
        self.advertised.insert(index, address);
        self
    }

    /// The cluster address peers dial to reach node `index`.
    pub fn advertised(&self, index: usize) -> SocketAddr {
        self.advertised
            .get(&index)
            .copied()
            .unwrap_or(self.members[index].cluster)
    }

    /// Node `index`'s process id, while it runs.
    pub fn pid(&self, index: usize) -> Option<u32> {
        self.child(index).as_ref().map(Child::id)
    }

    /// Starts nodes `0..count` and waits until each of them sees `count` members up.
    pub fn start_until_up(&self, count: usize) {
        for index in 0..count {
            self.start(index);
        }
        for index in 0..count {
            eventually(&format!("{count} members up"), self, || {
                let status = cluster_status(self, index)?;
                (members_up(&status) == count).then_some(())
            });
        }
    }

    /// Starts node `index` (again, on its data directory).
    pub fn start(&self, index: usize) {
        let dir = self.dir.path();
        let member = &self.members[index];
        let mut args: Vec<String> = vec![
            "node".into(),
            "--node-id".into(),
            member.id.into(),
            "--data-dir".into(),
            dir.join(member.id).display().to_string(),
            "--http".into(),
            member.http.to_string(),
            "--cluster-id".into(),
            "test".into(),
            "--cluster-listen".into(),
            member.cluster.to_string(),
            "--certs-dir".into(),
            dir.join("certs").display().to_string(),
            "--voters".into(),
            self.voters.join(","),
            "--config".into(),
            self.config_file(index).display().to_string(),
        ];
        // A voter is given every other voter; the joiner only one, and learns the rest from
        // the catalog.
        let joiner = self.joiners.contains(&index);
        let seeds: Vec<usize> = if joiner {
            vec![1]
        } else {
            (0..self.members.len())
                .filter(|peer| self.voters.contains(&self.members[*peer].id))
                .collect()
        };
        if joiner {
            args.extend(["--role".to_string(), "edge".to_string()]);
        }
        for peer in seeds {
            args.push("--seed".into());
            args.push(format!(
                "{}={}",
                self.members[peer].id,
                self.advertised(peer)
            ));
        }
        let log = std::fs::File::create(dir.join(format!("{}.log", member.id))).expect("log");
        let harness = ["--exact", self.child_test, "--ignored", "--nocapture"];
        let child = spawn_node(&harness, &args, ADMIN, "info", log, &self.env);
        *self.child(index) = Some(child);
    }

    /// A config file with what has no flag: a checkpoint every 8 catalog commands, so a node
    /// that misses a few dozen must catch up by state transfer; and a 5 s budget for a
    /// shard's allocation (a replicated commit, which a loaded 2-core CI machine can stretch
    /// past the 750 ms default); then whatever the test added ([`Cluster::with_config`], [`Cluster::with_tables`]).
    fn config_file(&self, index: usize) -> std::path::PathBuf {
        let member = &self.members[index];
        let path = self.dir.path().join(format!("{}.toml", member.id));
        let voters: Vec<String> = self
            .voters
            .iter()
            .map(|voter| format!("{voter:?}"))
            .collect();
        let (sharding, cluster) = &self.extra;
        let advertise = self
            .advertised
            .get(&index)
            .map(|address| format!("advertise = \"{address}\"\n"))
            .unwrap_or_default();
        let partitions = self
            .partitions
            .map(|count| format!("[sharding.partitions]\ncount = {count}\n"))
            .unwrap_or_default();
        let config = format!(
            "[sharding]\nrequest_timeout_ms = 5000\n{sharding}\n{partitions}[cluster]\nid = \"test\"\nlisten = \"{}\"\ncerts_dir = {:?}\nvoters = [{}]\n\
             checkpoint_interval_ops = {CHECKPOINT_INTERVAL_OPS}\n{advertise}{cluster}\n{}",
            member.cluster,
            self.dir.path().join("certs").display().to_string(),
            voters.join(", "),
            self.extra_tables
        );
        std::fs::write(&path, config).expect("config file");
        path
    }

    /// Sends SIGTERM (a graceful stop) and waits for the process to exit.
    pub fn terminate(&self, index: usize) -> std::process::ExitStatus {
        let mut child = self.child(index).take().expect("running");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success(), "SIGTERM sent");
        child.wait().expect("the node exits")
    }

    /// Kills node `index` with SIGKILL.
    pub fn kill(&self, index: usize) {
        let child = self.child(index).take();
        if let Some(mut child) = child {
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
        }
    }

    /// Stalls node `index` (SIGSTOP): it holds its sockets and answers nothing until
    /// [`Cluster::resume`].
    pub fn pause(&self, index: usize) {
        self.signal(index, "-STOP");
    }

    /// Resumes a node stalled by [`Cluster::pause`] (SIGCONT).
    pub fn resume(&self, index: usize) {
        self.signal(index, "-CONT");
    }

    fn signal(&self, index: usize, signal: &str) {
        let pid = self
            .child(index)
            .as_ref()
            .expect("the node runs")
            .id()
            .to_string();
        let status = Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    fn child(&self, index: usize) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.members[index]
            .child
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Deletes node `index`'s data directory, as a lost disk does (stop the node first).
    pub fn lose_disk(&self, index: usize) {
        let path = self.dir.path().join(self.members[index].id);
        std::fs::remove_dir_all(&path).expect("the node's data directory");
    }

    /// Node `index`'s HTTP base URL.
    pub fn url(&self, index: usize) -> String {
        format!("http://{}", self.members[index].http)
    }

    /// The index of node `node`.
    pub fn index_of(&self, node: &str) -> usize {
        self.members
            .iter()
            .position(|member| member.id == node)
            .expect("a member")
    }

    /// Node `index`'s log so far.
    pub fn log(&self, index: usize) -> String {
        std::fs::read_to_string(
            self.dir
                .path()
                .join(format!("{}.log", self.members[index].id)),
        )
        .unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for index in 0..self.members.len() {
            self.kill(index);
        }
        if std::env::var_os(KEEP_DIR_ENV).is_some() {
            let dir = std::mem::replace(&mut self.dir, tempfile::TempDir::new().expect("dir"));
            eprintln!("kept the cluster's directory: {}", dir.keep().display());
        }
    }
}

/// Set to keep a test cluster's directory (data, logs) after the test, for a post-mortem.
pub const KEEP_DIR_ENV: &str = "TESSERA_KEEP_TEST_DIR";

/// An HTTP answer.
pub struct Reply {
    /// Its status.
    pub status: u16,
    /// Its body.
    pub body: String,
}

impl Reply {
    /// The body as JSON (`null` if it is not).
    pub fn json(&self) -> Json {
        serde_json::from_str(&self.body).unwrap_or(Json::Null)
    }
}

/// A client that hands back error statuses as answers.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

/// One request; `None` when the node did not answer (not listening, or killed).
pub fn request(
    method: &str,
    url: &str,
    token: &str,
    body: Option<(&str, Vec<u8>)>,
) -> Option<Reply> {
    let mut builder = ureq::http::Request::builder()
        .method(method)
        .uri(url)
        .header("authorization", format!("Bearer {token}"));
    let body = match body {
        Some((content_type, bytes)) => {
            builder = builder.header("content-type", content_type);
            bytes
        }
        None => Vec::new(),
    };
    let response = agent().run(builder.body(body).ok()?).ok()?;
    let status = response.status().as_u16();
    let body = response.into_body().read_to_string().ok()?;
    Some(Reply { status, body })
}

/// A GET.
pub fn get(url: &str, token: &str) -> Option<Reply> {
    request("GET", url, token, None)
}

/// A POST of JSON.
pub fn post_json(url: &str, token: &str, body: &Json) -> Option<Reply> {
    let bytes = serde_json::to_vec(body).expect("json");
    request("POST", url, token, Some(("application/json", bytes)))
}

/// Polls `check` until it gives a value, failing the test after [`PATIENCE`].
pub fn eventually<T>(what: &str, cluster: &Cluster, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check() {
            return value;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = (0..cluster.members.len())
                .map(|index| {
                    let log = cluster.log(index);
                    let tail: Vec<&str> = log.lines().rev().take(15).collect();
                    format!("--- {}:\n{}", cluster.members[index].id, tail.join("\n"))
                })
                .collect();
            panic!("gave up waiting for {what}\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The cluster as node `index` sees it, once it answers.
pub fn cluster_status(cluster: &Cluster, index: usize) -> Option<Json> {
    let reply = get(&format!("{}/v1/cluster", cluster.url(index)), ADMIN)?;
    (reply.status == 200).then(|| reply.json())
}

/// Members in state `up`.
pub fn members_up(status: &Json) -> usize {
    status["members"]
        .as_array()
        .map(|members| members.iter().filter(|m| m["state"] == "up").count())
        .unwrap_or(0)
}

/// Waits until node `index` has bound `entity_type` at `version` (applied and compiled).
pub fn wait_bound(cluster: &Cluster, index: usize, token: &str, entity_type: &str, version: u64) {
    eventually(
        &format!("{entity_type} v{version} bound on node {index}"),
        cluster,
        || {
            let reply = get(&format!("{}/v1/status", cluster.url(index)), token)?;
            let status = reply.json();
            status["types"]
                .as_array()?
                .iter()
                .any(|ty| ty["entity_type"] == entity_type && ty["bound_version"] == version)
                .then_some(())
        },
    );
}

/// Counter `id`'s value once every node of `cluster` reads the same one through the API.
pub fn agreed_counter(cluster: &Cluster, token: &str, id: &str) -> u64 {
    eventually(&format!("the nodes agree on {id}"), cluster, || {
        let mut read = Vec::new();
        for index in 0..cluster.members.len() {
            let url = format!("{}/v1/entities/counter/{id}/ask", cluster.url(index));
            let reply = post_json(&url, token, &json!("Get"))?;
            read.push((reply.status == 200).then(|| reply.json().as_u64())??);
        }
        read.windows(2)
            .all(|pair| pair[0] == pair[1])
            .then(|| read[0])
    })
}

/// Asks counter `id` to add `add`, through node `index`.
pub fn ask_counter(cluster: &Cluster, index: usize, token: &str, id: &str, add: u64) -> Reply {
    let url = format!("{}/v1/entities/counter/{id}/ask", cluster.url(index));
    post_json(&url, token, &json!({"Add": add})).expect("the node answers")
}

/// Creates tenant `name` through node `index`; its token.
pub fn create_tenant(cluster: &Cluster, index: usize, name: &str) -> Option<String> {
    let reply = post_json(
        &format!("{}/v1/tenants", cluster.url(index)),
        ADMIN,
        &json!({"name": name}),
    )?;
    if reply.status != 201 {
        eprintln!("tenant {name} through node {index}: {}", reply.body);
        return None;
    }
    Some(reply.json()["token"].as_str()?.to_string())
}

/// The sum of a metric family's samples on node `index`.
pub fn metric_sum(cluster: &Cluster, index: usize, family: &str) -> f64 {
    let Some(reply) = get(&format!("{}/metrics", cluster.url(index)), ADMIN) else {
        return 0.0;
    };
    reply
        .body
        .lines()
        .filter(|line| line.starts_with(family))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Deploys the counter plugin as `entity_type` through node `index` (`query` after the `?`,
/// if any) and asserts it was accepted.
pub fn deploy_counter(
    cluster: &Cluster,
    index: usize,
    token: &str,
    entity_type: &str,
    query: &str,
) {
    let plugin = std::fs::read(crate::COUNTER).expect("the counter plugin");
    let url = format!(
        "{}/v1/types/{entity_type}/versions{query}",
        cluster.url(index)
    );
    let reply =
        request("POST", &url, token, Some(("application/wasm", plugin))).expect("deploy answered");
    assert_eq!(reply.status, 201, "deploy {entity_type}: {}", reply.body);
}

/// Declares member `node` lost through node `index`, as an operator does for a node gone with
/// its disk: `down`, then `remove?state_lost=true`, each retried until answered `200`.
pub fn declare_lost(cluster: &Cluster, index: usize, node: &str) {
    let act = |action: &str| {
        let url = format!("{}/v1/cluster/members/{node}/{action}", cluster.url(index));
        request("POST", &url, ADMIN, None).map(|reply| reply.status)
    };
    eventually(&format!("{node} marked down"), cluster, || {
        (act("down") == Some(200)).then_some(())
    });
    eventually(&format!("{node} removed"), cluster, || {
        (act("remove?state_lost=true") == Some(200)).then_some(())
    });
}

/// Whether `status` (a `GET /v1/cluster`) shows member `node` reachable.
pub fn reachable(status: &Json, node: &str) -> Option<bool> {
    status["members"]
        .as_array()?
        .iter()
        .find(|member| member["node"] == node)?["reachable"]
        .as_bool()
}
