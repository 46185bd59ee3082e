//! Backup and restore seen from outside (`docs/backup.md`). A three-node cluster serves counter
//! adds from several writers, each recording every value acknowledged to it; a backup is taken
//! while they write; the backup is restored into a fresh one-node cluster, where every counter
//! holds at least the value acknowledged before the backup started, the old tenant token works,
//! and a reminder scheduled before the backup fires after the restore. A tenant's export holds
//! only its own entities and plugins; a tenant token cannot read another tenant's plugin,
//! create tenants, or write another tenant's entities; a restore into a cluster that is not
//! empty (or a tenant that has the types) is refused and changes nothing. An entity larger than
//! a shard part comes back whole, into one node and into three whose partition plane serves; and a sender restored from before a tell still reaches a
//! receiver restored from after it (the skew of two shards read at different moments). Each
//! node is this test binary re-run as a child (`tessera_tests::processes`).

use serde_json::{Value as Json, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tessera_host::backup::{Reader, Record, Summary, Writer};
use tessera_tests::cluster::*;
use tessera_tests::partition_plane;
use tessera_tests::processes::run_child_if_asked;

const SOURCE: [&str; 3] = ["a1", "a2", "a3"];
const TARGET: [&str; 1] = ["b1"];
const WRITERS: usize = 4;
const COUNTERS_PER_WRITER: usize = 5;
/// One value per message, as large as a message may write (4 MiB) with its key and the key
/// count: more than a shard part holds with its framing, so each value travels in chunks.
const VALUE_BYTES: u64 = (4 << 20) - 256;
/// 12 values: 48 MiB in one entity, twelve times what a part holds.
const KEYS: u64 = 12;
/// Long enough that the reminder is still pending when the backup is taken and restored.
const REMINDER_DELAY_MS: u64 = 30_000;

/// Not a test of its own: a child process's node, run by the command line until killed.
#[test]
#[ignore = "run by the backup tests as their child processes"]
fn backup_child_node() {
    run_child_if_asked();
}

fn cli(args: &[&str]) -> ExitCode {
    tessera_host::cli::run_from(std::iter::once("tessera").chain(args.iter().copied()))
}

fn value(reply: &Reply) -> Option<u64> {
    (reply.status == 200)
        .then(|| reply.json().as_u64())
        .flatten()
}

fn ask(cluster: &Cluster, index: usize, token: &str, path: &str, body: &Json) -> Reply {
    let url = format!("{}/v1/entities/{path}/ask", cluster.url(index));
    post_json(&url, token, body).expect("the node answers")
}

fn records(file: &Path) -> (Option<String>, Vec<Record>) {
    let mut reader = Reader::open(std::fs::File::open(file).expect("backup")).expect("a backup");
    let mut records = Vec::new();
    while let Some(record) = reader.next_record().expect("a whole backup") {
        records.push(record);
    }
    (reader.header().tenant.clone(), records)
}

#[test]
fn a_backup_under_load_restores_every_acknowledged_value_into_a_fresh_cluster() {
    let source = Cluster::new(&SOURCE, SOURCE.len(), "backup_child_node");
    let target = Cluster::new(&TARGET, TARGET.len(), "backup_child_node");
    source.start_until_up(SOURCE.len());
    target.start_until_up(TARGET.len());
    let token = eventually("a tenant", &source, || create_tenant(&source, 0, "acme"));
    deploy_counter(&source, 0, &token, "counter", "");
    let reminder = std::fs::read(tessera_tests::REMINDER).expect("the reminder plugin");
    let url = format!("{}/v1/types/reminder/versions", source.url(0));
    let deployed = request("POST", &url, &token, Some(("application/wasm", reminder)))
        .expect("deploy answered");
    assert_eq!(deployed.status, 201, "{}", deployed.body);
    for index in 0..SOURCE.len() {
        wait_bound(&source, index, &token, "counter", 1);
        wait_bound(&source, index, &token, "reminder", 1);
    }
    let remind = json!({"Remind": {"delay_ms": REMINDER_DELAY_MS, "note": "restored"}});
    let scheduled = ask(&source, 1, &token, "reminder/r-1", &remind);
    assert_eq!(scheduled.status, 200, "{}", scheduled.body);

    // Writers add 1 to their counters in turn, each keeping the last value acknowledged.
    let acked: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let source = Arc::new(source);
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (acked, stop, source, token) =
                (acked.clone(), stop.clone(), source.clone(), token.clone());
            std::thread::spawn(move || {
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    let id = format!("w{writer}-c{}", round % COUNTERS_PER_WRITER);
                    let reply = ask_counter(&source, writer % SOURCE.len(), &token, &id, 1);
                    if let Some(value) = value(&reply) {
                        acked.lock().expect("acked").insert(id, value);
                    }
                    round += 1;
                }
            })
        })
        .collect();
    eventually("every counter acknowledged a few times", &source, || {
        let acked = acked.lock().expect("acked");
        (acked.len() == WRITERS * COUNTERS_PER_WRITER && acked.values().all(|value| *value >= 3))
            .then_some(())
    });

    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("cluster.tsrbak");
    let before = acked.lock().expect("acked").clone();
    let backed_up = cli(&[
        "backup",
        "--out",
        &file.display().to_string(),
        "--url",
        &source.url(0),
        "--token",
        ADMIN,
    ]);
    let during = acked.lock().expect("acked").clone();
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().expect("a writer");
    }
    assert_eq!(backed_up, ExitCode::SUCCESS, "the backup succeeded");
    assert!(
        during
            .iter()
            .any(|(id, value)| before.get(id) != Some(value)),
        "the load went on while the backup ran"
    );
    let (tenant, written) = records(&file);
    assert_eq!(tenant, None, "a whole cluster's backup");
    assert!(
        written
            .iter()
            .any(|record| matches!(record, Record::Tenant(t) if t.name == "acme")),
        "the tenant is in the backup"
    );

    // A damaged file, or one of a newer format, is refused before anything is restored.
    let bytes = std::fs::read(&file).expect("the backup");
    let truncated = dir.path().join("truncated.tsrbak");
    std::fs::write(&truncated, &bytes[..bytes.len() - 1]).expect("a copy");
    let mut newer = bytes.clone();
    newer[8..12].copy_from_slice(&(tessera_host::backup::FORMAT_VERSION + 1).to_be_bytes());
    let future = dir.path().join("future.tsrbak");
    std::fs::write(&future, &newer).expect("a copy");
    for damaged in [&truncated, &future] {
        let refused = cli(&[
            "restore",
            &damaged.display().to_string(),
            "--url",
            &target.url(0),
            "--token",
            ADMIN,
        ]);
        assert_eq!(
            refused,
            ExitCode::from(2),
            "{} is refused",
            damaged.display()
        );
    }
    let tenants = get(&format!("{}/v1/tenants", target.url(0)), ADMIN).expect("answered");
    assert_eq!(tenants.json()["tenants"], json!([]), "nothing was restored");

    let restored = cli(&[
        "restore",
        &file.display().to_string(),
        "--url",
        &target.url(0),
        "--token",
        ADMIN,
    ]);
    assert_eq!(restored, ExitCode::SUCCESS, "the restore succeeded");

    // The old token works, the reminder has not fired yet and fires now, and every counter
    // holds at least what was acknowledged before the backup started.
    let fired = |cluster: &Cluster| {
        let reply = ask(cluster, 0, &token, "reminder/r-1", &json!("Fired"));
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()["count"].as_u64().expect("a count")
    };
    assert_eq!(fired(&target), 0, "the reminder was restored pending");
    for (id, acknowledged) in &before {
        let reply = ask_counter(&target, 0, &token, id, 0);
        let restored = value(&reply).unwrap_or_else(|| panic!("{id}: {}", reply.body));
        assert!(
            restored >= *acknowledged,
            "{id}: restored {restored}, acknowledged {acknowledged} before the backup"
        );
    }
    eventually("the restored reminder fires", &target, || {
        (fired(&target) == 1).then_some(())
    });
}

#[test]
fn a_tenant_exports_and_imports_only_its_own_entities() {
    let cluster = Cluster::new(&["t1"], 1, "backup_child_node");
    cluster.start_until_up(1);
    let acme = eventually("acme", &cluster, || create_tenant(&cluster, 0, "acme"));
    let globex = eventually("globex", &cluster, || create_tenant(&cluster, 0, "globex"));
    deploy_counter(&cluster, 0, &acme, "counter", "");
    deploy_counter(&cluster, 0, &globex, "gcount", "");
    let echo = std::fs::read(tessera_tests::ECHO).expect("the echo plugin");
    let echo_sha = hex::encode(Sha256::digest(&echo));
    let url = format!("{}/v1/types/echo/versions", cluster.url(0));
    let deployed =
        request("POST", &url, &globex, Some(("application/wasm", echo))).expect("answered");
    assert_eq!(deployed.status, 201, "{}", deployed.body);
    wait_bound(&cluster, 0, &acme, "counter", 1);
    wait_bound(&cluster, 0, &globex, "gcount", 1);
    for counter in 0..5u64 {
        let reply = ask_counter(&cluster, 0, &acme, &format!("c-{counter}"), counter + 1);
        assert_eq!(value(&reply), Some(counter + 1), "{}", reply.body);
        let reply = ask(
            &cluster,
            0,
            &globex,
            &format!("gcount/g-{counter}"),
            &json!({"Add": 50}),
        );
        assert_eq!(value(&reply), Some(50), "{}", reply.body);
    }

    // acme's export holds acme's types and entities only.
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("acme.tsrbak");
    let file_arg = file.display().to_string();
    let url = cluster.url(0);
    let exported = cli(&[
        "backup", "--tenant", "--out", &file_arg, "--url", &url, "--token", &acme,
    ]);
    assert_eq!(exported, ExitCode::SUCCESS);
    let (tenant, written) = records(&file);
    assert_eq!(tenant.as_deref(), Some("acme"));
    let mut ids = Vec::new();
    for record in &written {
        match record {
            Record::Version {
                tenant,
                entity_type,
                ..
            }
            | Record::Active {
                tenant,
                entity_type,
                ..
            } => {
                assert_eq!((tenant.as_str(), entity_type.as_str()), ("acme", "counter"));
            }
            Record::Shard(shard) => {
                assert_eq!(
                    (shard.tenant.as_str(), shard.entity_type.as_str()),
                    ("acme", "counter")
                );
                ids.extend(shard.part.entities.iter().map(|entity| entity.id.clone()));
            }
            other => panic!("a tenant export holds {other:?}"),
        }
    }
    ids.sort();
    assert_eq!(ids, ["c-0", "c-1", "c-2", "c-3", "c-4"]);

    // A tenant token reads no other tenant's plugin and creates no tenant.
    let plugin_url = format!("{url}/v1/backup/plugins/{echo_sha}");
    let plugin = request("HEAD", &plugin_url, &acme, None).expect("answered");
    assert_eq!(plugin.status, 404, "acme reads no plugin of globex's");
    let own = request("HEAD", &plugin_url, &globex, None).expect("answered");
    assert_eq!(own.status, 200, "globex reads its own plugin");
    let created = post_json(
        &format!("{url}/v1/restore/tenants"),
        &acme,
        &json!({"name": "mallory", "token_sha256": "00", "quotas": {}, "created_ms": 0}),
    )
    .expect("answered");
    assert_eq!(created.status, 403, "{}", created.body);

    // globex imports acme's export: into globex, and acme's counters move on on their own.
    let imported = cli(&[
        "restore", "--tenant", &file_arg, "--url", &url, "--token", &globex,
    ]);
    assert_eq!(imported, ExitCode::SUCCESS);
    let reply = ask_counter(&cluster, 0, &acme, "c-0", 100);
    assert_eq!(value(&reply), Some(101), "{}", reply.body);
    for counter in 0..5u64 {
        let reply = ask(
            &cluster,
            0,
            &globex,
            &format!("counter/c-{counter}"),
            &json!({"Add": 0}),
        );
        assert_eq!(
            value(&reply),
            Some(counter + 1),
            "globex's copy: {}",
            reply.body
        );
    }

    // A shard record naming acme, sent with globex's token, is installed into globex.
    let part = written
        .iter()
        .find_map(|record| match record {
            Record::Shard(shard) if shard.part.entities.iter().any(|e| e.id == "c-0") => {
                Some(record.clone())
            }
            _ => None,
        })
        .expect("c-0's shard");
    let body = tessera_host::backup::encode_frame(&part).expect("a frame")[8..].to_vec();
    let sent = request(
        "POST",
        &format!("{url}/v1/restore/shards"),
        &globex,
        Some(("application/msgpack", body)),
    )
    .expect("answered");
    assert_eq!(sent.status, 200, "{}", sent.body);
    let reply = ask_counter(&cluster, 0, &acme, "c-0", 0);
    assert_eq!(
        value(&reply),
        Some(101),
        "acme's c-0 is untouched: {}",
        reply.body
    );

    // A second import into globex, and a cluster restore into this cluster, change nothing.
    let again = cli(&[
        "restore", "--tenant", &file_arg, "--url", &url, "--token", &globex,
    ]);
    assert_eq!(again, ExitCode::from(2), "globex has the type already");
    let whole = dir.path().join("whole.tsrbak");
    let whole_arg = whole.display().to_string();
    let backed_up = cli(&[
        "backup", "--out", &whole_arg, "--url", &url, "--token", ADMIN,
    ]);
    assert_eq!(backed_up, ExitCode::SUCCESS);
    let refused = cli(&["restore", &whole_arg, "--url", &url, "--token", ADMIN]);
    assert_eq!(refused, ExitCode::from(2), "the cluster is not empty");
    let tenants = get(&format!("{url}/v1/tenants"), ADMIN)
        .expect("answered")
        .json();
    assert_eq!(
        tenants["tenants"].as_array().map(Vec::len),
        Some(2),
        "{tenants}"
    );
}

#[test]
fn an_entity_larger_than_a_part_is_backed_up_and_restored_whole() {
    let source = Cluster::new(&["s1"], 1, "backup_child_node");
    let target = Cluster::new(&["r1"], 1, "backup_child_node");
    source.start_until_up(1);
    target.start_until_up(1);
    let token = eventually("a tenant", &source, || create_tenant(&source, 0, "acme"));
    // Room for the entity's state, and CPU time to read it back in one message; the quotas
    // travel with the tenant.
    let quotas = json!({"entity_state_bytes_max": 256 << 20, "message_deadline_ms": 20_000});
    let url = format!("{}/v1/tenants/acme/quotas", source.url(0));
    let bytes = serde_json::to_vec(&quotas).expect("json");
    let reply = request("PUT", &url, ADMIN, Some(("application/json", bytes))).expect("quotas");
    assert_eq!(reply.status, 200, "quotas: {}", reply.body);
    let plugin = std::fs::read(tessera_tests::BALLAST).expect("the ballast plugin");
    let url = format!("{}/v1/types/ballast/versions", source.url(0));
    let reply = request("POST", &url, &token, Some(("application/wasm", plugin))).expect("deploy");
    assert_eq!(reply.status, 201, "deploy: {}", reply.body);
    wait_bound(&source, 0, &token, "ballast", 1);
    for key in 0..KEYS {
        let fill = json!({"Fill": {"key": key, "bytes": VALUE_BYTES}});
        let reply = ask(&source, 0, &token, "ballast/big", &fill);
        assert_eq!(reply.status, 200, "fill {key}: {}", reply.body);
    }
    let held = json!({"keys": KEYS, "bytes": KEYS * VALUE_BYTES, "wrong": []});

    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("big.tsrbak");
    let file_arg = file.display().to_string();
    let started = Instant::now();
    let backed_up = cli(&[
        "backup",
        "--out",
        &file_arg,
        "--url",
        &source.url(0),
        "--token",
        ADMIN,
    ]);
    let backup_took = started.elapsed();
    assert_eq!(backed_up, ExitCode::SUCCESS);
    let (_, written) = records(&file);
    let parts = written
        .iter()
        .filter(|record| matches!(record, Record::Shard(shard) if !shard.part.entities.is_empty()))
        .count() as u64;
    assert!(parts > KEYS, "the entity spans parts: {parts}");

    let started = Instant::now();
    let restored = cli(&[
        "restore",
        &file_arg,
        "--url",
        &target.url(0),
        "--token",
        ADMIN,
    ]);
    let restore_took = started.elapsed();
    assert_eq!(restored, ExitCode::SUCCESS);
    let reply = ask(&target, 0, &token, "ballast/big", &json!("Check"));
    assert_eq!(reply.json(), held, "every byte restored: {}", reply.body);

    // Into three nodes whose partition plane serves: each part is an install op of the
    // entity's partition, each value's pieces staged across them until it is whole.
    let plane = Cluster::new(&["p1", "p2", "p3"], 3, "backup_child_node")
        .with_partitions(partition_plane::PARTITIONS);
    plane.start_until_up(3);
    for index in 0..3 {
        eventually("every partition's group has a primary", &plane, || {
            partition_plane::groups_ready(&plane, index)
        });
    }
    let started = Instant::now();
    let restored = cli(&[
        "restore",
        &file_arg,
        "--url",
        &plane.url(0),
        "--token",
        ADMIN,
    ]);
    let plane_restore_took = started.elapsed();
    assert_eq!(restored, ExitCode::SUCCESS, "restored into the plane");
    for index in 0..3 {
        let reply = ask(&plane, index, &token, "ballast/big", &json!("Check"));
        assert_eq!(
            reply.json(),
            held,
            "every byte restored, asked through node {index}: {}",
            reply.body
        );
    }
    let file_bytes = std::fs::metadata(&file).expect("the backup").len();
    eprintln!(
        "{} bytes of one entity in {parts} parts ({file_bytes} bytes of backup): backup took \
         {backup_took:?}, restore {restore_took:?}, into three nodes whose plane serves \
         {plane_restore_took:?}",
        KEYS * VALUE_BYTES
    );
}

/// Polls counter `id` on `cluster` until it holds `expected`.
fn counter_reaches(cluster: &Cluster, token: &str, id: &str, expected: u64) {
    eventually(&format!("{id} reaches {expected}"), cluster, || {
        (value(&ask_counter(cluster, 0, token, id, 0)) == Some(expected)).then_some(())
    });
}

#[test]
fn a_sender_restored_from_before_its_tell_still_reaches_a_receiver_restored_from_after() {
    let source = Cluster::new(&["u1"], 1, "backup_child_node");
    let target = Cluster::new(&["v1"], 1, "backup_child_node");
    source.start_until_up(1);
    target.start_until_up(1);
    let token = eventually("a tenant", &source, || create_tenant(&source, 0, "acme"));
    deploy_counter(&source, 0, &token, "counter", "");
    let relay = std::fs::read(tessera_tests::RELAY).expect("the relay plugin");
    let url = format!("{}/v1/types/relay/versions", source.url(0));
    let reply = request("POST", &url, &token, Some(("application/wasm", relay))).expect("deploy");
    assert_eq!(reply.status, 201, "deploy: {}", reply.body);
    wait_bound(&source, 0, &token, "counter", 1);
    wait_bound(&source, 0, &token, "relay", 1);
    let tell = |cluster: &Cluster, amount: u64| {
        let add = json!({"TellAdd": {"entity_type": "counter", "id": "c1", "amount": amount}});
        let reply = ask(cluster, 0, &token, "relay/r1", &add);
        assert_eq!(reply.status, 200, "{}", reply.body);
    };

    // Two backups around a tell: the sender's shard from the first, the receiver's from the
    // second — the skew of two shards read at different moments of one backup.
    let dir = tempfile::tempdir().expect("a directory");
    let take = |name: &str| {
        let file = dir.path().join(name);
        let code = cli(&[
            "backup",
            "--out",
            &file.display().to_string(),
            "--url",
            &source.url(0),
            "--token",
            ADMIN,
        ]);
        assert_eq!(code, ExitCode::SUCCESS);
        records(&file).1
    };
    tell(&source, 1);
    counter_reaches(&source, &token, "c1", 1);
    let before = take("before.tsrbak");
    tell(&source, 10);
    counter_reaches(&source, &token, "c1", 11);
    let after = take("after.tsrbak");
    let skewed = dir.path().join("skewed.tsrbak");
    let mut reader =
        Reader::open(std::fs::File::open(dir.path().join("before.tsrbak")).expect("backup"))
            .expect("a backup");
    while reader.next_record().expect("a record").is_some() {}
    let mut writer = Writer::new(
        std::fs::File::create(&skewed).expect("a file"),
        reader.header(),
    )
    .expect("a header");
    let of_type = |records: &[Record], entity_type: &str| -> Vec<Record> {
        records
            .iter()
            .filter(|record| match record {
                Record::Shard(shard) => shard.entity_type == entity_type,
                _ => false,
            })
            .cloned()
            .collect()
    };
    let catalog = before
        .iter()
        .filter(|record| !matches!(record, Record::Shard(_)))
        .cloned();
    let shards = of_type(&before, "relay")
        .into_iter()
        .chain(of_type(&after, "counter"));
    for record in catalog.chain(shards) {
        writer.write(&record).expect("a record");
    }
    writer.finish(Summary::default()).expect("the end");

    let restored = cli(&[
        "restore",
        &skewed.display().to_string(),
        "--url",
        &target.url(0),
        "--token",
        ADMIN,
    ]);
    assert_eq!(restored, ExitCode::SUCCESS);
    counter_reaches(&target, &token, "c1", 11);
    let sent = ask(&target, 0, &token, "relay/r1", &json!("Sent"));
    assert_eq!(
        sent.json(),
        json!(1),
        "the sender remembers one tell: {}",
        sent.body
    );
    // Its next tell is numbered past the receiver's receipt of the tell it does not remember.
    tell(&target, 100);
    counter_reaches(&target, &token, "c1", 111);
}
