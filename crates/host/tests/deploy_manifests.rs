//! The deployment files against the real `tessera` binary. No container registry or Kubernetes
//! is reachable here, so the test plays the kubelet: it reads `deploy/kubernetes/statefulset.yaml`
//! and `deploy/Dockerfile`, checks that they agree (user, data volume, ports, command) and that
//! every variable they set is one `tessera node` takes, then starts one process per pod with
//! exactly the container's command and environment (Kubernetes' `$(VAR)` expansion, the
//! downward API and the Secret's token included), an empty environment otherwise, the
//! volumes mapped to temporary directories and each pod's network to a loopback address of its
//! own (so every pod listens on the manifest's very ports, and a pod's DNS name stands for its
//! address). It follows the probes: every pod becomes ready; one terminated as the kubelet
//! does exits 0 within `terminationGracePeriodSeconds` and, restarted on its volume (a rolling
//! upgrade's step), is ready again; with two of three voters gone the last one stays live but
//! not ready. An operator's `tessera login` to one pod, from another directory, sees the three
//! members up at their advertised addresses. The image's non-root user and its volume are
//! `deploy_non_root.rs`'s.

use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const NAMESPACE: &str = "tessera-test";
const ADMIN_TOKEN: &str = "deploy-manifest-admin-token-0123456789";

/// How long forming the cluster may take in a debug build on a shared machine.
const READY_DEADLINE: Duration = Duration::from_secs(120);

/// Every document of a YAML file, as JSON.
fn yaml_documents(path: &str) -> Vec<Json> {
    let text = std::fs::read_to_string(format!("{ROOT}/{path}")).expect("the manifest reads");
    serde_norway::Deserializer::from_str(&text)
        .map(|document| serde::Deserialize::deserialize(document).expect("valid YAML"))
        .collect()
}

fn statefulset() -> Json {
    let mut documents = yaml_documents("deploy/kubernetes/statefulset.yaml");
    assert_eq!(documents.len(), 1);
    let statefulset = documents.remove(0);
    assert_eq!(statefulset["kind"], "StatefulSet");
    statefulset
}

fn string(value: &Json) -> String {
    value
        .as_str()
        .unwrap_or_else(|| panic!("a string, not {value}"))
        .to_string()
}

/// The Dockerfile's instructions of the final stage: keyword → arguments, in order.
fn dockerfile_final_stage() -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(format!("{ROOT}/deploy/Dockerfile")).expect("the Dockerfile");
    let joined = text.replace("\\\n", " ");
    let lines: Vec<(String, String)> = joined
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (keyword, rest) = line.split_once(' ').unwrap_or((line, ""));
            (keyword.to_uppercase(), rest.trim().to_string())
        })
        .collect();
    let last_from = lines
        .iter()
        .rposition(|(keyword, _)| keyword == "FROM")
        .expect("a FROM");
    lines[last_from..].to_vec()
}

fn instruction(stage: &[(String, String)], keyword: &str) -> String {
    stage
        .iter()
        .rev()
        .find(|(found, _)| found == keyword)
        .map(|(_, rest)| rest.clone())
        .unwrap_or_else(|| panic!("the Dockerfile's final stage has {keyword}"))
}

/// `KEY=value` pairs of the stage's `ENV` instructions.
fn dockerfile_env(stage: &[(String, String)]) -> BTreeMap<String, String> {
    stage
        .iter()
        .filter(|(keyword, _)| keyword == "ENV")
        .flat_map(|(_, rest)| {
            rest.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .map(|pair| {
            let (key, value) = pair.split_once('=').expect("ENV KEY=value");
            (key.to_string(), value.to_string())
        })
        .collect()
}

/// The `tessera node --help` text, which names every variable the node takes.
fn node_help() -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["node", "--help"])
        .output()
        .expect("tessera runs");
    assert!(output.status.success());
    String::from_utf8(output.stdout).expect("UTF-8 help")
}

/// One pod's process environment: the container's `env`, expanded as Kubernetes does.
fn pod_env(container: &Json, pod: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for entry in container["env"].as_array().expect("env") {
        let name = string(&entry["name"]);
        let value = if let Some(value) = entry["value"].as_str() {
            expand(value, &env)
        } else if let Some(path) = entry["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            match path {
                "metadata.name" => pod.to_string(),
                "metadata.namespace" => NAMESPACE.to_string(),
                other => panic!("the test provides no field {other}"),
            }
        } else if let Some(secret) = entry["valueFrom"].get("secretKeyRef") {
            assert_eq!(
                (
                    string(&secret["name"]).as_str(),
                    string(&secret["key"]).as_str()
                ),
                ("tessera-admin", "token"),
                "the Secret docs/deploy.md creates"
            );
            ADMIN_TOKEN.to_string()
        } else {
            panic!("the test cannot provide {entry}");
        };
        env.push((name, value));
    }
    env
}

/// Kubernetes' `$(VAR)` expansion over the variables defined before.
fn expand(value: &str, defined: &[(String, String)]) -> String {
    let mut expanded = value.to_string();
    for (name, replacement) in defined {
        expanded = expanded.replace(&format!("$({name})"), replacement);
    }
    assert!(
        !expanded.contains("$("),
        "{value} names an undefined variable"
    );
    expanded
}

/// A pod played by a process: its loopback address and its volumes.
struct Pod {
    name: String,
    address: String,
    data: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
}

impl Pod {
    fn start(&mut self) {
        let log = std::fs::File::create(&self.log).expect("a log file");
        let child = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(&self.args)
            .env_clear()
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the node starts");
        self.child = Some(child);
    }

    fn url(&self, port: u16, path: &str) -> String {
        format!("http://{}:{port}{path}", self.address)
    }

    /// SIGTERM, as the kubelet sends after the preStop hook; the exit within `grace`.
    fn terminate(&mut self, grace: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(sent.success());
        let deadline = Instant::now() + grace;
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "{} did not stop within {grace:?}:\n{}",
                    self.name,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The status code of `GET url` (none while nothing listens).
fn status_of(url: &str) -> Option<u16> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    agent
        .get(url)
        .call()
        .ok()
        .map(|response| response.status().as_u16())
}

fn wait_for_status(pod: &Pod, url: &str, wanted: u16) {
    let deadline = Instant::now() + READY_DEADLINE;
    while status_of(url) != Some(wanted) {
        assert!(
            Instant::now() < deadline,
            "{url} never answered {wanted}:\n{}",
            pod.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn probe_path(container: &Json, probe: &str) -> String {
    assert_eq!(container[probe]["httpGet"]["port"], "http", "{probe} port");
    string(&container[probe]["httpGet"]["path"])
}

#[test]
fn the_image_and_the_statefulset_agree_and_every_variable_is_one_the_node_takes() {
    let statefulset = statefulset();
    let pod_spec = &statefulset["spec"]["template"]["spec"];
    let container = &pod_spec["containers"][0];
    let stage = dockerfile_final_stage();

    let user = instruction(&stage, "USER");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("a numeric USER");
    assert_ne!(uid, 0, "the image runs as a non-root user");
    assert_eq!(pod_spec["securityContext"]["runAsUser"], uid);
    assert_eq!(pod_spec["securityContext"]["runAsNonRoot"], true);

    let env: BTreeMap<String, String> = pod_env(container, "tessera-0").into_iter().collect();
    let volume = instruction(&stage, "VOLUME");
    let data_mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|mount| mount["name"] == "data")
        .expect("a data mount");
    let data_dir = string(&data_mount["mountPath"]);
    assert_eq!(volume, format!("[\"{data_dir}\"]"));
    assert_eq!(env["TESSERA_DATA_DIR"], data_dir);
    let image_env = dockerfile_env(&stage);
    assert_eq!(image_env["TESSERA_DATA_DIR"], data_dir);

    let ports: Vec<u64> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|port| port["containerPort"].as_u64().unwrap())
        .collect();
    let exposed: Vec<u64> = instruction(&stage, "EXPOSE")
        .split_whitespace()
        .map(|port| port.parse().unwrap())
        .collect();
    assert_eq!(exposed, ports);
    assert!(env["TESSERA_HTTP"].ends_with(&format!(":{}", ports[0])));
    assert!(env["TESSERA_CLUSTER_LISTEN"].ends_with(&format!(":{}", ports[1])));
    assert!(image_env["TESSERA_HTTP"].ends_with(&format!(":{}", ports[0])));

    let entrypoint: Vec<String> = serde_json::from_str(&instruction(&stage, "ENTRYPOINT")).unwrap();
    let command: Vec<String> = serde_json::from_str(&instruction(&stage, "CMD")).unwrap();
    assert_eq!(entrypoint, ["/usr/local/bin/tessera"]);
    assert_eq!(container["args"], serde_json::json!(command));

    let help = node_help();
    for name in env.keys().chain(image_env.keys()) {
        if name.starts_with("TESSERA_") {
            assert!(
                help.contains(&format!("[env: {name}=")) || name == "TESSERA_ADMIN_TOKEN",
                "tessera node takes no {name}:\n{help}"
            );
        }
    }
}

#[test]
fn three_pods_from_the_statefulset_form_a_cluster_probe_and_stop_as_kubernetes_expects() {
    let statefulset = statefulset();
    let name = string(&statefulset["metadata"]["name"]);
    let service = string(&statefulset["spec"]["serviceName"]);
    let replicas = statefulset["spec"]["replicas"].as_u64().unwrap() as usize;
    let pod_spec = &statefulset["spec"]["template"]["spec"];
    let container = &pod_spec["containers"][0];
    let grace = Duration::from_secs(pod_spec["terminationGracePeriodSeconds"].as_u64().unwrap());
    let http_port = container["ports"][0]["containerPort"].as_u64().unwrap() as u16;
    let cluster_port = container["ports"][1]["containerPort"].as_u64().unwrap() as u16;
    let ready_path = probe_path(container, "readinessProbe");
    let live_path = probe_path(container, "livenessProbe");
    assert_eq!(probe_path(container, "startupProbe"), live_path);
    let mounts: Vec<(String, String)> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|mount| (string(&mount["name"]), string(&mount["mountPath"])))
        .collect();

    let dir = tempfile::tempdir().expect("temp dir");
    let pod_names: Vec<String> = (0..replicas)
        .map(|index| format!("{name}-{index}"))
        .collect();
    // The certificates as docs/deploy.md makes them, less the CA's key (not in the Secret).
    let certs = dir.path().join("certs");
    let created = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(["certs", "create", "--nodes", &pod_names.join(",")])
        .arg("--dir")
        .arg(&certs)
        .output()
        .expect("certs create");
    assert!(created.status.success(), "{created:?}");
    std::fs::remove_file(certs.join("ca.key")).expect("ca.key");

    // Each pod's network: 127.<x>.<y>.<ordinal + 1>, <x>.<y> from this process so two runs
    // at once do not meet.
    let salt = std::process::id();
    let address = |index: usize| {
        format!(
            "127.{}.{}.{}",
            100 + salt % 100,
            salt / 100 % 250,
            index + 1
        )
    };
    let dns = |index: usize| format!("{name}-{index}.{service}.{NAMESPACE}.svc.cluster.local");
    let mut pods: Vec<Pod> = (0..replicas)
        .map(|index| {
            let data = dir.path().join(format!("data-{index}"));
            std::fs::create_dir(&data).expect("a fresh volume");
            let mapped = |value: &str| {
                let mut value = value.replace("0.0.0.0:", &format!("{}:", address(index)));
                for other in 0..replicas {
                    value = value.replace(&dns(other), &address(other));
                }
                for (volume, path) in &mounts {
                    let local = match volume.as_str() {
                        "data" => data.clone(),
                        "certs" => certs.clone(),
                        other => panic!("the test has no volume {other}"),
                    };
                    value = value.replace(path, local.to_str().expect("UTF-8 path"));
                }
                value
            };
            let env = pod_env(container, &pod_names[index])
                .into_iter()
                .map(|(key, value)| (key, mapped(&value)))
                .collect();
            let args = container["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|arg| mapped(&string(arg)))
                .collect();
            Pod {
                name: pod_names[index].clone(),
                address: address(index),
                data,
                args,
                env,
                log: dir.path().join(format!("{}.log", pod_names[index])),
                child: None,
            }
        })
        .collect();

    for pod in &mut pods {
        pod.start();
    }
    for pod in &pods {
        wait_for_status(pod, &pod.url(http_port, &ready_path), 200);
        assert_eq!(status_of(&pod.url(http_port, &live_path)), Some(200));
        assert!(
            pod.data.join("tessera.redb").is_file(),
            "data on the volume"
        );
    }

    // An operator's CLI, logged in to one pod from elsewhere, sees every pod an up member at
    // the address it advertises (its DNS name, here its pod's address).
    let home = dir.path().join("operator");
    std::fs::create_dir(&home).expect("a home");
    let cli = |args: &[&str], stdin: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(args)
            .current_dir(&home)
            .env_clear()
            .env("HOME", &home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tessera runs");
        let mut input = child.stdin.take().expect("stdin");
        std::io::Write::write_all(&mut input, stdin.as_bytes()).expect("stdin");
        drop(input);
        let output = child.wait_with_output().expect("tessera exits");
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8(output.stdout).expect("UTF-8")
    };
    cli(&["login", &pods[1].url(http_port, "")], ADMIN_TOKEN);
    let status: Json =
        serde_json::from_str(&cli(&["cluster", "status", "--json"], "")).expect("JSON");
    let members = status["members"].as_array().expect("members");
    assert_eq!(members.len(), replicas, "{status}");
    for (index, member) in members.iter().enumerate() {
        assert_eq!(member["node"], pod_names[index]);
        assert_eq!(member["state"], "up");
        let advertised = format!("{}:{}", address(index), cluster_port);
        assert_eq!(member["cluster_address"], advertised);
    }

    // A rolling upgrade's step: the last pod terminated, the others (ready again after a
    // view change, if it was the primary) serve, and it comes back on its volume.
    let last = replicas - 1;
    let stopped = pods[last].terminate(grace);
    assert!(stopped.success(), "{stopped}:\n{}", pods[last].log());
    for pod in &pods[..last] {
        wait_for_status(pod, &pod.url(http_port, &ready_path), 200);
    }
    pods[last].start();
    wait_for_status(&pods[last], &pods[last].url(http_port, &ready_path), 200);

    // Two of three voters gone: the last is live, but not ready (no quorum to commit with).
    for pod in &mut pods[1..] {
        let stopped = pod.terminate(grace);
        assert!(stopped.success(), "{stopped}:\n{}", pod.log());
    }
    wait_for_status(&pods[0], &pods[0].url(http_port, &ready_path), 503);
    assert_eq!(status_of(&pods[0].url(http_port, &live_path)), Some(200));
}
