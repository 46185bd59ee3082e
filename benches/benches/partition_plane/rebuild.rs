//! The rebuild-rate scenario of the partition plane's benchmarks: a backup of a three-voter
//! group loses its disk and rebuilds from its peers (state transfer of the checkpoint, then
//! the log above it), timed against redb writing the same rows into a fresh database.

use super::{COMMITTERS, Committer, GROUP, Plane, commit, config, cpu_time, until};
use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tessera_benches::partition_group::{Voter, filler, start_voter, voter_files};
use tessera_contract::EntityAddress;
use tokio::runtime::Runtime;

/// Bytes of state per entity.
const REBUILD_VALUE_BYTES: usize = 4096;

/// The partition's tables the rebuilt replica's rows land in, for the raw redb baseline: the
/// same definitions as `tessera-state`'s (state keys, entity metadata, stamps).
const ENTITY_STATE: TableDefinition<(&str, &str, &str, &str), &[u8]> =
    TableDefinition::new("entity_state");
const ENTITY_META: TableDefinition<(&str, &str, &str), (u32, u64)> =
    TableDefinition::new("entity_meta");
const STAMPS: TableDefinition<(&str, &str, &str), u64> = TableDefinition::new("partition_stamps");

struct Rebuilt {
    bytes: usize,
    rebuilt_in: Duration,
    /// The process's CPU time meanwhile (every replica's, and the polling's).
    rebuild_cpu: Duration,
    raw_in: Duration,
    states_installed: u64,
    /// When the checkpoint fetched by state transfer was installed, if one was.
    installed_in: Option<Duration>,
    ops: u64,
}

/// Fills a three-voter group with `bytes` of entity state, deletes a backup's journal and
/// database, restarts it and times its rebuild; then times redb writing the same rows.
async fn rebuild(bytes: usize) -> Rebuilt {
    let mut plane = Plane::start(3).await;
    let state = plane.state();
    let entities = bytes / REBUILD_VALUE_BYTES;
    let filled: Vec<(EntityAddress, u64)> = {
        let next = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..COMMITTERS)
            .map(|_| {
                let (state, next) = (state.clone(), next.clone());
                tokio::spawn(async move {
                    let mut written = Vec::new();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= entities as u64 {
                            return written;
                        }
                        let mut committer = Committer::new(&format!("rebuild-{index:06}"));
                        let writes = committer.next(filler(index, REBUILD_VALUE_BYTES));
                        commit(state.as_ref(), writes).await;
                        written.push((committer.entity, index));
                    }
                })
            })
            .collect();
        let mut filled = Vec::with_capacity(entities);
        for task in tasks {
            filled.extend(task.await.expect("a filler"));
        }
        filled
    };
    let target = plane.status(&plane.primary).commit;
    let lost = plane
        .voters
        .iter()
        .find(|node| **node != plane.primary)
        .expect("a backup")
        .clone();
    until("the backup applies every write", || {
        plane.status(&lost).commit >= target
    })
    .await;

    // The backup's disk is lost: its voter stops, its journal and database are deleted.
    plane.network.cut(&lost, GROUP);
    drop(plane.members.remove(&lost));
    for file in voter_files(plane.dir.path(), &lost, GROUP) {
        std::fs::remove_file(&file).expect("the lost replica's file is deleted");
    }
    let (started, cpu_before) = (Instant::now(), cpu_time());
    let voter = start_voter(
        &plane.network,
        config(&plane.voters, &lost),
        plane.dir.path(),
    );
    let holds_every_row = |voter: &Voter| {
        voter.group.status().commit >= target
            && filled.iter().all(|(entity, index)| {
                voter.store.get(entity, "value").ok().flatten().as_deref()
                    == Some(filler(*index, REBUILD_VALUE_BYTES).as_slice())
            })
    };
    let mut installed_in = None;
    until("the lost replica rebuilds", || {
        if installed_in.is_none() && voter.group.status().states_installed > 0 {
            installed_in = Some(started.elapsed());
        }
        holds_every_row(&voter)
    })
    .await;
    let rebuilt_in = started.elapsed();
    let rebuild_cpu = cpu_time() - cpu_before;
    let status = voter.group.status();
    plane.members.insert(lost, voter);

    // The baseline: the same rows (state key, entity metadata, stamp) written into a fresh
    // database in one durable transaction.
    let raw_path = plane.dir.path().join("raw.redb");
    let rows: Vec<(EntityAddress, Vec<u8>)> = filled
        .iter()
        .map(|(entity, index)| (entity.clone(), filler(*index, REBUILD_VALUE_BYTES)))
        .collect();
    let raw_in = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let database = redb::Database::create(&raw_path).expect("a fresh database");
        let transaction = database.begin_write().expect("a write transaction");
        {
            let mut state = transaction.open_table(ENTITY_STATE).expect("table");
            let mut meta = transaction.open_table(ENTITY_META).expect("table");
            let mut stamps = transaction.open_table(STAMPS).expect("table");
            for (stamp, (entity, value)) in rows.iter().enumerate() {
                let key = (
                    entity.tenant.as_str(),
                    entity.entity_type.as_str(),
                    entity.id.as_str(),
                );
                state
                    .insert((key.0, key.1, key.2, "value"), value.as_slice())
                    .expect("insert");
                meta.insert(key, (0, value.len() as u64 + 5))
                    .expect("insert");
                stamps.insert(key, stamp as u64 + 1).expect("insert");
            }
        }
        transaction.commit().expect("a durable commit");
        let took = started.elapsed();
        let read = database.begin_read().expect("read");
        assert_eq!(
            read.open_table(ENTITY_STATE)
                .expect("table")
                .len()
                .expect("len"),
            rows.len() as u64
        );
        took
    })
    .await
    .expect("the baseline");
    Rebuilt {
        bytes: entities * REBUILD_VALUE_BYTES,
        rebuilt_in,
        rebuild_cpu,
        raw_in,
        states_installed: status.states_installed,
        installed_in,
        ops: target,
    }
}

/// Runs the scenario with `bytes` of entity state and prints its table.
pub(super) fn print(runtime: &Runtime, bytes: usize) {
    let rebuilt = runtime.block_on(rebuild(bytes));
    let mib = rebuilt.bytes as f64 / (1 << 20) as f64;
    let rate = |took: Duration| mib / took.as_secs_f64();
    println!(
        "\nrebuild of a lost replica: {mib:.1} MiB of entity state ({} entities of {} bytes, {} \
         ops), from restart on an empty disk until its machine holds every row:",
        rebuilt.bytes / REBUILD_VALUE_BYTES,
        REBUILD_VALUE_BYTES,
        rebuilt.ops
    );
    println!(
        "rebuilt replica: {:>8.2} s, {:>7.1} MiB/s (checkpoints installed by state transfer: {}; \
         process CPU meanwhile {:.2} s)",
        rebuilt.rebuilt_in.as_secs_f64(),
        rate(rebuilt.rebuilt_in),
        rebuilt.states_installed,
        rebuilt.rebuild_cpu.as_secs_f64()
    );
    if let Some(installed_in) = rebuilt.installed_in {
        println!(
            "  of which: checkpoint fetched and installed after {:.2} s, the log above it \
             replayed in the remaining {:.2} s",
            installed_in.as_secs_f64(),
            (rebuilt.rebuilt_in - installed_in).as_secs_f64()
        );
    }
    println!(
        "raw redb, same rows, one synced transaction: {:>8.2} s, {:>7.1} MiB/s",
        rebuilt.raw_in.as_secs_f64(),
        rate(rebuilt.raw_in)
    );
    println!(
        "rebuild / raw redb: {:.0} %",
        rate(rebuilt.rebuilt_in) / rate(rebuilt.raw_in) * 100.0
    );
}
