//! The catalog as a workload of the VSR simulator ([`crate::vsr`]): every replica
//! runs a [`CatalogMachine`] over its own in-memory redb database (a crash loses it; the replica
//! rebuilds it from its checkpoint and journal), and clients submit a random mix of catalog and
//! membership commands over a few names, so commands collide and many are refused.
//!
//! The check replays the committed order (every committed request once, at the first op that
//! carried it, as the replicas' client tables do) on a fresh reference machine and requires
//! every acknowledged reply to equal the reference's answer to that request. The simulator
//! itself checks that every replica ends with the same snapshot bytes.
//!
//! It lives in `metadata`, not `consensus`, because consensus must not know the catalog.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::rng::SimRng;
use crate::vsr::history::History;
use crate::vsr::{CommittedOrder, Workload, WorkloadCounts};
use tessera_consensus::message::ClientId;
use tessera_consensus::state_machine::StateMachine;
use tessera_contract::{ShardKey, TypeKey};
use tessera_metadata::{CatalogMachine, CatalogResult};
use tessera_metadata::{
    Command, MemberState, MetadataStore, PartitionPlacement, Quotas, ShardAssignment, TypeOptions,
};

/// Tenants the clients name: few, so creations collide and updates find them.
const TENANTS: [&str; 2] = ["acme", "globex"];
/// Entity types the clients deploy, roll back, delete and shard.
const ENTITY_TYPES: [&str; 2] = ["counter", "cart"];
/// Plugin hashes (a deploy orders a hash and a size; the bytes never enter the catalog).
const PLUGINS: [&str; 3] = ["p1", "p2", "p3"];
/// Nodes that join, move through the member life cycle, and own shards.
const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Shards per type the clients assign.
const SHARDS_PER_TYPE: u64 = 4;
/// Partitions the placements name: `0..PARTITIONS_DRAWN`.
const PARTITIONS_DRAWN: u64 = 4;
/// Per thousand: a shard decision that is a partition placement instead.
const PLACEMENT_PER_MILLE: u64 = 300;
/// Assignments in one `AssignShards` command, at most.
const ASSIGNMENTS_PER_COMMAND_MAX: u64 = 3;
/// Coordinator epochs the shard decisions carry: `0..EPOCHS_DRAWN`.
const EPOCHS_DRAWN: u64 = 3;
/// Per thousand: a shard decision that is a coordinator taking the seat.
const SEAT_PER_MILLE: u64 = 200;
/// Per thousand: an assignment that expects its shard unallocated.
const UNALLOCATED_PER_MILLE: u64 = 600;
/// Generations an assignment expects, at most.
const GENERATION_DRAWN_MAX: u64 = 6;
/// Versions a `SetActiveVersion` names, at most (higher ones are refused more often).
const VERSION_DRAWN_MAX: u64 = 4;
/// Per thousand: a deploy of a plugin over every tenant's `plugin_bytes_max` (refused by the
/// quota, changing nothing).
const OVERSIZED_DEPLOY_PER_MILLE: u64 = 150;
/// The size of a deploy's plugin when it is not oversized.
const PLUGIN_SIZE_BYTES: u64 = 4 << 20;
/// Per thousand: a quota update that is invalid (a zero message deadline) and refused.
const INVALID_QUOTAS_PER_MILLE: u64 = 150;
/// The command mix: cumulative weights out of [`COMMAND_WEIGHT_TOTAL`], in the order of
/// [`CommandKind::ALL`]. Membership commands are a third of the mix.
const COMMAND_WEIGHTS: [u64; 8] = [10, 8, 16, 8, 6, 12, 15, 25];
/// Sum of [`COMMAND_WEIGHTS`].
const COMMAND_WEIGHT_TOTAL: u64 = 100;

/// Which command to draw next.
#[derive(Clone, Copy, Debug)]
enum CommandKind {
    CreateTenant,
    UpdateQuotas,
    DeployVersion,
    SetActiveVersion,
    DeleteType,
    AssignShards,
    JoinMember,
    SetMemberState,
}

impl CommandKind {
    const ALL: [CommandKind; 8] = [
        CommandKind::CreateTenant,
        CommandKind::UpdateQuotas,
        CommandKind::DeployVersion,
        CommandKind::SetActiveVersion,
        CommandKind::DeleteType,
        CommandKind::AssignShards,
        CommandKind::JoinMember,
        CommandKind::SetMemberState,
    ];

    fn draw(rng: &mut SimRng) -> CommandKind {
        let mut roll = rng.below(COMMAND_WEIGHT_TOTAL);
        for (kind, weight) in CommandKind::ALL.into_iter().zip(COMMAND_WEIGHTS) {
            if roll < weight {
                return kind;
            }
            roll -= weight;
        }
        CommandKind::SetMemberState
    }
}

/// Catalog and membership commands on every replica's [`CatalogMachine`], checked against a
/// reference machine replaying the committed order.
#[derive(Clone, Copy, Debug, Default)]
pub struct CatalogWorkload;

impl Workload for CatalogWorkload {
    type Machine = CatalogMachine;
    type Operation = Command;
    type Answer = Vec<u8>;

    fn name(&self) -> &'static str {
        "catalog"
    }

    fn machine(&self) -> Result<CatalogMachine, String> {
        let database = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(|error| format!("an in-memory catalog database: {error}"))?;
        let store = MetadataStore::open(Arc::new(database))
            .map_err(|error| format!("the catalog tables: {error}"))?;
        Ok(CatalogMachine::new(store))
    }

    fn next_operation(&self, rng: &mut SimRng, client: ClientId, request_number: u64) -> Command {
        // Every client joins first, so every seed that commits anything commits membership.
        if request_number == 1 {
            return join_member(client, request_number, pick(rng, &NODES));
        }
        let time_ms = client * 1_000_000 + request_number;
        match CommandKind::draw(rng) {
            CommandKind::CreateTenant => Command::CreateTenant {
                name: pick(rng, &TENANTS),
                token_sha256: format!("token-{client}-{request_number}"),
                quotas: Quotas::default(),
                created_ms: time_ms,
            },
            CommandKind::UpdateQuotas => Command::UpdateQuotas {
                name: pick(rng, &TENANTS),
                quotas: random_quotas(rng),
            },
            CommandKind::DeployVersion => deploy_version(rng, time_ms),
            CommandKind::SetActiveVersion => Command::SetActiveVersion {
                tenant: pick(rng, &TENANTS),
                entity_type: pick(rng, &ENTITY_TYPES),
                version: rng.between(1, VERSION_DRAWN_MAX) as u32,
            },
            CommandKind::DeleteType => Command::DeleteType {
                tenant: pick(rng, &TENANTS),
                entity_type: pick(rng, &ENTITY_TYPES),
            },
            CommandKind::AssignShards => assign_shards(rng),
            CommandKind::JoinMember => join_member(client, time_ms, pick(rng, &NODES)),
            CommandKind::SetMemberState => Command::SetMemberState {
                node: pick(rng, &NODES),
                state: MemberState::ALL[rng.below(MemberState::ALL.len() as u64) as usize],
                updated_ms: time_ms,
            },
        }
    }

    fn encode(&self, command: &Command) -> Vec<u8> {
        CatalogMachine::encode_command(command)
    }

    fn decode_answer(&self, bytes: &[u8]) -> Result<Vec<u8>, String> {
        match rmp_serde::from_slice::<CatalogResult>(bytes) {
            Ok(_) => Ok(bytes.to_vec()),
            Err(error) => Err(format!("a catalog answer that does not decode: {error}")),
        }
    }

    fn check(
        &self,
        history: &History<Command, Vec<u8>>,
        committed: &CommittedOrder,
    ) -> Result<WorkloadCounts, String> {
        let mut counts = WorkloadCounts::default();
        let answers = self.replay(history, committed, &mut counts)?;
        for operation in &history.operations {
            let Some((_, answer)) = &operation.completed else {
                continue;
            };
            let request = (operation.client, operation.request_number);
            let Some(expected) = answers.get(&request) else {
                return Err(format!(
                    "client {} request {} was acknowledged but never committed",
                    request.0, request.1
                ));
            };
            if expected != answer {
                return Err(format!(
                    "client {} request {} ({:?}) was answered {:?}; the committed order gives {:?}",
                    request.0,
                    request.1,
                    operation.operation,
                    CatalogMachine::decode_result(answer),
                    CatalogMachine::decode_result(expected),
                ));
            }
            counts.replies_checked += 1;
        }
        if counts.replies_checked > 0 && counts.membership_commands == 0 {
            return Err("no membership command was committed".to_string());
        }
        Ok(counts)
    }
}

impl CatalogWorkload {
    /// Applies every committed request once, in op order, to a fresh machine; returns each
    /// request's answer.
    fn replay(
        &self,
        history: &History<Command, Vec<u8>>,
        committed: &CommittedOrder,
        counts: &mut WorkloadCounts,
    ) -> Result<HashMap<(ClientId, u64), Vec<u8>>, String> {
        let commands: HashMap<(ClientId, u64), &Command> = history
            .operations
            .iter()
            .map(|operation| {
                (
                    (operation.client, operation.request_number),
                    &operation.operation,
                )
            })
            .collect();
        let mut reference = self.machine()?;
        let mut answers = HashMap::new();
        for (expected_op, (op, requests)) in (1..).zip(committed) {
            if *op != expected_op {
                return Err(format!("op {expected_op} committed but never reported"));
            }
            for request in requests {
                if answers.contains_key(request) {
                    continue;
                }
                let Some(command) = commands.get(request) else {
                    return Err(format!("op {op} carries unknown request {request:?}"));
                };
                let answer = reference.apply(&CatalogMachine::encode_command(command));
                if CatalogMachine::decode_result(&answer).is_err() {
                    counts.refusals += 1;
                }
                if matches!(
                    command,
                    Command::JoinMember { .. } | Command::SetMemberState { .. }
                ) {
                    counts.membership_commands += 1;
                }
                answers.insert(*request, answer);
            }
        }
        Ok(answers)
    }
}

fn pick(rng: &mut SimRng, names: &[&str]) -> String {
    names[rng.below(names.len() as u64) as usize].to_string()
}

fn random_quotas(rng: &mut SimRng) -> Quotas {
    let message_deadline_ms = if rng.per_mille(INVALID_QUOTAS_PER_MILLE) {
        0
    } else {
        rng.between(1, 1_000)
    };
    Quotas {
        message_deadline_ms,
        ..Quotas::default()
    }
}

fn deploy_version(rng: &mut SimRng, deployed_ms: u64) -> Command {
    let sha256 = pick(rng, &PLUGINS);
    let size_bytes = if rng.per_mille(OVERSIZED_DEPLOY_PER_MILLE) {
        tessera_metadata::quota_ceilings::PLUGIN_BYTES_MAX as u64 + 1
    } else {
        PLUGIN_SIZE_BYTES
    };
    Command::DeployVersion {
        tenant: pick(rng, &TENANTS),
        entity_type: pick(rng, &ENTITY_TYPES),
        size_bytes,
        sha256,
        options: TypeOptions::default(),
        deployed_ms,
    }
}

/// A shard decision: a coordinator taking the seat, or an assignment by a coordinator of a
/// random epoch that read random generations (so both fences refuse some and pass others).
fn assign_shards(rng: &mut SimRng) -> Command {
    let epoch = rng.below(EPOCHS_DRAWN);
    if rng.per_mille(SEAT_PER_MILLE) {
        return Command::SeatCoordinator { epoch };
    }
    if rng.per_mille(PLACEMENT_PER_MILLE) {
        return place_partitions(rng, epoch);
    }
    let count = rng.between(1, ASSIGNMENTS_PER_COMMAND_MAX);
    let assignments = (0..count)
        .map(|_| {
            let type_key = TypeKey::new(pick(rng, &TENANTS), pick(rng, &ENTITY_TYPES));
            let key = ShardKey::new(type_key, rng.below(SHARDS_PER_TYPE) as u32);
            let expected = (!rng.per_mille(UNALLOCATED_PER_MILLE))
                .then(|| rng.between(1, GENERATION_DRAWN_MAX));
            ShardAssignment {
                key,
                expected,
                to: pick(rng, &NODES),
            }
        })
        .collect();
    Command::AssignShards { epoch, assignments }
}

/// A partition placement: a few partitions, each on one to three of the nodes (sometimes one
/// named twice, refused), at a drawn generation.
fn place_partitions(rng: &mut SimRng, epoch: u64) -> Command {
    let count = rng.between(1, ASSIGNMENTS_PER_COMMAND_MAX);
    let placements = (0..count)
        .map(|_| {
            let replica_count = rng.between(1, NODES.len() as u64);
            let replicas = (0..replica_count).map(|_| pick(rng, &NODES)).collect();
            PartitionPlacement {
                partition: rng.below(PARTITIONS_DRAWN) as u32,
                expected: (!rng.per_mille(UNALLOCATED_PER_MILLE))
                    .then(|| rng.between(1, GENERATION_DRAWN_MAX)),
                replicas,
                // Now and then a settled move (refused unless the set is the one placed).
                settled: rng.per_mille(100),
            }
        })
        .collect();
    Command::PlacePartitions { epoch, placements }
}

fn join_member(client: ClientId, joined_ms: u64, node: String) -> Command {
    Command::JoinMember {
        cluster_address: format!("10.0.0.{client}:7000"),
        api_address: format!("10.0.0.{client}:8080"),
        node,
        roles: BTreeSet::from(["entities".to_string()]),
        joined_ms,
    }
}

#[cfg(test)]
#[path = "catalog_tests.rs"]
mod tests;
