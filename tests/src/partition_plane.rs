//! What the partition plane's fault tests share: a three-node cluster with the plane serving
//! a counter ([`serving_cluster`]), whether a node runs every partition's group with a
//! primary ([`groups_ready`]), and a [`Ledger`] of each counter's acknowledged value that
//! checks every reply against it — an add answers the previous acknowledged value plus its
//! amount, plus at most the asks whose outcome the client could not know.

use crate::cluster::{
    ADMIN, Cluster, create_tenant, deploy_counter, eventually, get, post_json, wait_bound,
};
use serde_json::{Value as Json, json};
use std::collections::BTreeMap;

/// Partitions of the test clusters: two led by each node when placement is even.
pub const PARTITIONS: usize = 6;

/// `cluster` (three nodes, all voters, not started yet) with [`PARTITIONS`] partitions of
/// three replicas serving, every partition's group with a primary on every node, and the
/// counter deployed and bound everywhere for tenant `acme`; the cluster and the tenant's
/// token.
pub fn serving_cluster(cluster: Cluster) -> (Cluster, String) {
    let cluster = cluster.with_partitions(PARTITIONS);
    let nodes = cluster.members.len();
    cluster.start_until_up(nodes);
    for index in 0..nodes {
        eventually("every partition's group has a primary", &cluster, || {
            groups_ready(&cluster, index)
        });
    }
    let token = eventually("a tenant", &cluster, || create_tenant(&cluster, 0, "acme"));
    deploy_counter(&cluster, 0, &token, "counter", "");
    for index in 0..nodes {
        wait_bound(&cluster, index, &token, "counter", 1);
    }
    (cluster, token)
}

/// Every placed partition and its replicas, preferred primary first, as node `index` shows
/// them in `GET /v1/cluster`, once it answers.
pub fn placed_partitions(cluster: &Cluster, index: usize) -> Option<BTreeMap<u64, Vec<String>>> {
    let status = crate::cluster::cluster_status(cluster, index)?;
    let placed = status["partitions"]
        .as_array()?
        .iter()
        .filter_map(|partition| {
            let replicas = partition["replicas"]
                .as_array()?
                .iter()
                .filter_map(|node| Some(node.as_str()?.to_string()))
                .collect();
            Some((partition["partition"].as_u64()?, replicas))
        })
        .collect();
    Some(placed)
}

/// The groups node `index` runs (`GET /v1/cluster/partitions`), once it answers.
pub fn groups_here(cluster: &Cluster, index: usize) -> Option<Vec<Json>> {
    let url = format!("{}/v1/cluster/partitions", cluster.url(index));
    let reply = get(&url, ADMIN)?;
    (reply.status == 200).then_some(())?;
    reply.json()["partitions"].as_array().cloned()
}

/// Whether node `index` runs every partition's group, each with a primary it is in contact
/// with.
pub fn groups_ready(cluster: &Cluster, index: usize) -> Option<()> {
    let groups = groups_here(cluster, index)?;
    let ready = groups.len() == PARTITIONS
        && groups.iter().all(|here| {
            let status = &here["status"];
            status["primary"].is_string()
                && status["contact_age_ms"]
                    .as_u64()
                    .is_some_and(|age| age < 1_000)
        });
    ready.then_some(())
}

/// The partitions each node leads, as the node itself reports (a group's status on its
/// primary names that primary).
pub fn led_by(cluster: &Cluster) -> BTreeMap<usize, Vec<u64>> {
    let mut led = BTreeMap::new();
    for (index, member) in cluster.members.iter().enumerate() {
        let groups = groups_here(cluster, index).unwrap_or_default();
        let leads = groups
            .iter()
            .filter(|here| here["status"]["primary"] == member.id)
            .filter_map(|here| here["partition"].as_u64())
            .collect();
        led.insert(index, leads);
    }
    led
}

/// What an ask's answer says of its add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged with this value.
    Acknowledged(u64),
    /// Refused before it ran (`503`: unavailable, shard unavailable, a full mailbox or
    /// buffer): nothing of it was written, and a client retries.
    Refused,
    /// Unknown: a timeout, no answer, or an internal error; it may have been applied.
    Unknown,
}

/// Adds `add` to counter `id` through node `index`.
pub fn add_through(cluster: &Cluster, index: usize, token: &str, id: &str, add: u64) -> Outcome {
    add_within(cluster, index, token, id, add, None)
}

/// [`add_through`] with the ask's own timeout (the node's default, 5 s, if `None`): an ask
/// that reached a node that cannot answer ends after it, its outcome unknown.
pub fn add_within(
    cluster: &Cluster,
    index: usize,
    token: &str,
    id: &str,
    add: u64,
    timeout_ms: Option<u64>,
) -> Outcome {
    let query = timeout_ms.map_or(String::new(), |ms| format!("?timeout_ms={ms}"));
    let url = format!("{}/v1/entities/counter/{id}/ask{query}", cluster.url(index));
    match post_json(&url, token, &json!({"Add": add})) {
        Some(reply) if reply.status == 200 => match reply.json().as_u64() {
            Some(value) => Outcome::Acknowledged(value),
            None => Outcome::Unknown,
        },
        Some(reply) if reply.status == 503 => {
            eprintln!(
                "adding {add} to {id} through node {index}: 503 {}",
                reply.body
            );
            Outcome::Refused
        }
        reply => {
            let answer = reply.map(|reply| format!("{} {}", reply.status, reply.body));
            eprintln!("adding {add} to {id} through node {index}: {answer:?}");
            Outcome::Unknown
        }
    }
}

/// Counter `id`'s value read through node `index`: `None` unless it answered `200`.
pub fn read_through(cluster: &Cluster, index: usize, token: &str, id: &str) -> Option<u64> {
    let url = format!("{}/v1/entities/counter/{id}/ask", cluster.url(index));
    let reply = post_json(&url, token, &json!("Get"))?;
    (reply.status == 200).then(|| reply.json().as_u64())?
}

/// Adds `add` to counter `id` through the nodes `through`, in turn, until one acknowledges it;
/// every outcome is checked against `ledger`.
pub fn acknowledged_add(
    cluster: &Cluster,
    token: &str,
    ledger: &mut Ledger,
    through: &[usize],
    id: &str,
    add: u64,
) {
    let mut attempt = 0;
    eventually(&format!("{id} acknowledges adding {add}"), cluster, || {
        let index = through[attempt % through.len()];
        attempt += 1;
        let outcome = add_through(cluster, index, token, id, add);
        ledger.record(id, add, outcome);
        matches!(outcome, Outcome::Acknowledged(_)).then_some(())
    });
}

/// Adds to every counter of `ledger` once per round of `rounds` (1 to 5, by round and
/// counter), each add through one of `nodes` in turn until acknowledged.
pub fn add_rounds(
    cluster: &Cluster,
    token: &str,
    ledger: &mut Ledger,
    nodes: &[usize],
    rounds: std::ops::Range<usize>,
) {
    for round in rounds {
        for (number, id) in ledger.ids().iter().enumerate() {
            let add = (round + number) as u64 % 5 + 1;
            let first = (round + number) % nodes.len();
            let through: Vec<usize> = nodes[first..]
                .iter()
                .chain(&nodes[..first])
                .copied()
                .collect();
            acknowledged_add(cluster, token, ledger, &through, id, add);
        }
    }
}

/// One counter as its client knows it.
#[derive(Debug, Default, Clone)]
struct Known {
    /// The last acknowledged value.
    value: u64,
    /// Adds since then whose outcome is unknown.
    unknown: Vec<u64>,
}

/// Each counter's last acknowledged value, checked against every answer.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    counters: BTreeMap<String, Known>,
    /// Adds answered `503` (refused, retried).
    refused: usize,
    /// Adds whose outcome was unknown.
    unknown: usize,
}

impl Ledger {
    /// A ledger of counters `c0` to `c{counters - 1}`, each started at its value read through
    /// node `index`.
    pub fn read_through(cluster: &Cluster, index: usize, token: &str, counters: usize) -> Ledger {
        let mut ledger = Ledger::default();
        for id in 0..counters {
            let id = format!("c{id}");
            let value = eventually(&format!("{id} read"), cluster, || {
                read_through(cluster, index, token, &id)
            });
            ledger.start(&id, value);
        }
        ledger
    }

    /// Starts counter `id` at `value` (a read every node agreed on).
    pub fn start(&mut self, id: &str, value: u64) {
        self.counters.insert(
            id.to_string(),
            Known {
                value,
                unknown: Vec::new(),
            },
        );
    }

    /// Counter `id`'s last acknowledged value.
    pub fn value(&self, id: &str) -> u64 {
        self.counters.get(id).map_or(0, |known| known.value)
    }

    /// The counters, in order.
    pub fn ids(&self) -> Vec<String> {
        self.counters.keys().cloned().collect()
    }

    /// Records the outcome of adding `add` to `id`; panics on an acknowledged value that is
    /// not the last acknowledged one plus `add` plus some of the adds of unknown outcome
    /// since: an add lost, doubled, or computed from a stale copy. The unknown adds it
    /// includes are known from then on; the others may still land later.
    pub fn record(&mut self, id: &str, add: u64, outcome: Outcome) {
        let known = self.counters.entry(id.to_string()).or_default();
        match outcome {
            Outcome::Acknowledged(value) => known.settle(
                value,
                add,
                &format!("{id} answered {value} to adding {add}"),
            ),
            Outcome::Refused => self.refused += 1,
            Outcome::Unknown => {
                known.unknown.push(add);
                self.unknown += 1;
            }
        }
    }

    /// How many adds were answered without an acknowledgement so far: `(refused, unknown)`.
    pub fn failed(&self) -> (usize, usize) {
        (self.refused, self.unknown)
    }

    /// Checks a value read of `id` that no add was in flight for: the last acknowledged one
    /// plus some of the adds of unknown outcome since, which it becomes.
    pub fn check_read(&mut self, id: &str, value: u64, through: &str) {
        let known = self.counters.entry(id.to_string()).or_default();
        known.settle(value, 0, &format!("{id} read {value} through {through}"));
    }
}

impl Known {
    /// Takes `value` as acknowledged after an add of `add` (0 for a read): it must be the
    /// last acknowledged value plus `add` plus a subset of the unknown adds, which it removes.
    fn settle(&mut self, value: u64, add: u64, what: &str) {
        let landed = value
            .checked_sub(self.value + add)
            .and_then(|extra| subset_summing_to(&self.unknown, extra));
        let Some(landed) = landed else {
            panic!(
                "{what}: acknowledged {} before, adds of unknown outcome since {:?}",
                self.value, self.unknown
            );
        };
        for position in landed.into_iter().rev() {
            self.unknown.remove(position);
        }
        self.value = value;
    }
}

/// The positions (ascending) of a subset of `amounts` that sums to `total`, if one does.
fn subset_summing_to(amounts: &[u64], total: u64) -> Option<Vec<usize>> {
    // Each reachable sum with the positions of one subset reaching it: the unknown adds of
    // one counter are few, and their sums fewer still.
    let mut reachable: BTreeMap<u64, Vec<usize>> = BTreeMap::from([(0, Vec::new())]);
    for (position, amount) in amounts.iter().enumerate() {
        let more: Vec<(u64, Vec<usize>)> = reachable
            .iter()
            .filter(|(sum, _)| !reachable.contains_key(&(*sum + amount)))
            .map(|(sum, positions)| {
                let mut positions = positions.clone();
                positions.push(position);
                (sum + amount, positions)
            })
            .collect();
        reachable.extend(more);
    }
    reachable.remove(&total)
}
/// The partition of each of the counters `ids`: its shard (the shard function over the
/// cluster's `num_shards`, as node `index` reports it) modulo [`PARTITIONS`].
pub fn counter_partitions(
    cluster: &Cluster,
    index: usize,
    ids: &[String],
) -> Option<BTreeMap<String, u64>> {
    use tessera_sharding::{FnvExtractor, ShardExtractor};
    let overview = get(&format!("{}/v1/overview", cluster.url(index)), ADMIN)?.json();
    let shards = FnvExtractor::new(u32::try_from(overview["num_shards"].as_u64()?).ok()?);
    let partition = |id: &String| u64::from(shards.shard_of(id)) % PARTITIONS as u64;
    Some(ids.iter().map(|id| (id.clone(), partition(id))).collect())
}

/// Which node serves each of the counters `ids`, as node `index`'s catalog places their
/// shards (`GET /v1/cluster/shards`, the shard function over the cluster's `num_shards`).
pub fn counters_served_by(
    cluster: &Cluster,
    index: usize,
    ids: &[String],
) -> Option<BTreeMap<String, String>> {
    use tessera_sharding::{FnvExtractor, ShardExtractor};
    let overview = get(&format!("{}/v1/overview", cluster.url(index)), ADMIN)?.json();
    let shards = FnvExtractor::new(u32::try_from(overview["num_shards"].as_u64()?).ok()?);
    let placed = get(&format!("{}/v1/cluster/shards", cluster.url(index)), ADMIN)?.json();
    let owners: BTreeMap<u64, String> = placed["shards"]
        .as_array()?
        .iter()
        .filter(|shard| {
            shard["type"]
                .as_str()
                .is_some_and(|ty| ty.ends_with("/counter"))
        })
        .filter_map(|shard| {
            Some((
                shard["shard"].as_u64()?,
                shard["node"].as_str()?.to_string(),
            ))
        })
        .collect();
    ids.iter()
        .map(|id| {
            let owner = owners.get(&u64::from(shards.shard_of(id)))?;
            Some((id.clone(), owner.clone()))
        })
        .collect()
}
