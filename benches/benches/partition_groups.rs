//! What one idle partition group costs (issue 34, item 2): `N` groups of three voters, each a
//! `PartitionReplica` through the one group driver with its own file journal and redb database, all in this
//! process over an in-memory network — three nodes' worth of replicas, as an idle three-node
//! cluster with `N` partitions at R = 3 would run them. Measured once every group has a
//! primary: process CPU time over an idle window (`getrusage`), resident memory, open file
//! descriptors and journal and database bytes, each beside the same process with no group (the baseline,
//! same runtime and threads), reported per group and per replica.
//!
//! Run: `cargo bench -p tessera-benches --bench partition_groups` (or name the group counts:
//! `-- 16 64`). Not a criterion timing benchmark: it prints the table.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_benches::partition_group::{Network, partition_config, start_voter};
use tessera_consensus::group::GroupId;

const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
/// How long the idle CPU is measured over.
const IDLE_WINDOW: Duration = Duration::from_secs(5);
/// How long the groups may take to elect their primaries.
const ELECTION_WAIT_MAX: Duration = Duration::from_secs(60);

/// Process CPU time (user + system) so far.
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole rusage into the pointer it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn open_files() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |entries| entries.count())
}

fn directory_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok()?.metadata().ok())
                .map(|metadata| metadata.len())
                .sum()
        })
        .unwrap_or(0)
}

/// What the process costs idle with `groups` groups running.
struct Cost {
    cpu_per_second: Duration,
    resident: u64,
    files: usize,
    journal_bytes: u64,
    elected_in: Duration,
}

async fn measure(groups: u64) -> Cost {
    let dir = tempfile::tempdir().expect("temp dir");
    let network = Arc::new(Network::default());
    let (resident_before, files_before) = (resident_bytes(), open_files());
    let mut running = Vec::new();
    let started = Instant::now();
    for group in (1..=groups).map(GroupId) {
        for node in VOTERS {
            let config = partition_config(group, VOTERS.map(String::from).to_vec(), node.into());
            // The machine on its own redb file, as a node runs it.
            let voter = start_voter(&network, config, dir.path());
            running.push(voter.group);
        }
    }
    while !running.iter().all(|voter| voter.status().primary.is_some()) {
        assert!(
            started.elapsed() < ELECTION_WAIT_MAX,
            "the groups did not elect"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elected_in = started.elapsed();
    // Let the elections' traffic settle before the idle window.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu_before = cpu_time();
    tokio::time::sleep(IDLE_WINDOW).await;
    let cpu = cpu_time() - cpu_before;
    let cost = Cost {
        cpu_per_second: cpu.div_f64(IDLE_WINDOW.as_secs_f64()),
        resident: resident_bytes().saturating_sub(resident_before),
        files: open_files().saturating_sub(files_before),
        journal_bytes: directory_bytes(dir.path()),
        elected_in,
    };
    drop(running);
    cost
}

fn main() {
    let counts: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|argument| argument.parse().ok())
        .collect();
    let counts = if counts.is_empty() {
        vec![16, 64, 128]
    } else {
        counts
    };
    // The node's runtime: two worker threads on this 2-core machine.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "idle partition groups of three voters in one process (three nodes' worth), {} s windows:",
        IDLE_WINDOW.as_secs()
    );
    let baseline = runtime.block_on(measure(0));
    println!(
        "  baseline (the same process and runtime, no group): CPU {:.3} ms/s",
        baseline.cpu_per_second.as_secs_f64() * 1e3
    );
    for groups in counts {
        let cost = runtime.block_on(measure(groups));
        let replicas = (groups * 3) as f64;
        let cpu_ms =
            (cost.cpu_per_second.as_secs_f64() - baseline.cpu_per_second.as_secs_f64()) * 1e3;
        println!(
            "  {groups:>4} groups: CPU {:.1} ms/s ({:.3} ms/s a replica above the baseline, {:.1} % of \
             the machine's 2 cores for the three nodes) | resident +{:.1} MiB ({:.0} KiB a \
             replica) | files +{} ({:.1} a replica) | journals and databases {:.1} MiB ({:.0} KiB a replica) | \
             elected in {:.2} s",
            cost.cpu_per_second.as_secs_f64() * 1e3,
            cpu_ms / replicas,
            cost.cpu_per_second.as_secs_f64() * 1e3 / 2000.0 * 100.0,
            cost.resident as f64 / (1 << 20) as f64,
            cost.resident as f64 / 1024.0 / replicas,
            cost.files,
            cost.files as f64 / replicas,
            cost.journal_bytes as f64 / (1 << 20) as f64,
            cost.journal_bytes as f64 / 1024.0 / replicas,
            cost.elected_in.as_secs_f64(),
        );
    }
}
