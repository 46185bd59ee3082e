//! Each rule of the mesh's authority, kind by kind: who may send it, and what the committed
//! catalog must say. The node judging is `n2`, a voter; `n1` is the metadata primary, `n3` the
//! other voter, `n4` a member without a vote, `rogue` a node with a certificate that is no
//! member (or, where said, a member that lies).

use super::*;
use std::collections::BTreeMap;
use tessera_consensus::checkpoint::Checkpoint;
use tessera_consensus::group::{GroupFrame, GroupMessage};
use tessera_consensus::message::{Message, Reply, Request};
use tessera_contract::TypeKey;
use tessera_metadata::{METADATA_GROUP, Quotas};
use tessera_sharding::link::{WireBody, WireEnvelope};
use tessera_state::ShardPart;

const HERE: &str = "n2";

/// The catalog `n2` has applied.
struct Catalog {
    members: BTreeMap<String, MemberState>,
    allocations: BTreeMap<ShardKey, Allocation>,
    handoffs: BTreeMap<ShardKey, NodeId>,
    next_generation: u64,
    partitions: BTreeMap<u32, PartitionReplicas>,
}

impl CommittedCatalog for Catalog {
    fn member_state(&self, node: &str) -> Option<MemberState> {
        self.members.get(node).copied()
    }
    fn allocation(&self, key: &ShardKey) -> Option<Allocation> {
        self.allocations.get(key).cloned()
    }
    fn handoff_from(&self, key: &ShardKey) -> Option<NodeId> {
        self.handoffs.get(key).cloned()
    }
    fn next_generation(&self) -> u64 {
        self.next_generation
    }
    fn partition_placed(&self, partition: u32) -> Option<PartitionReplicas> {
        self.partitions.get(&partition).cloned()
    }
}

fn key(shard: u32) -> ShardKey {
    ShardKey::new(TypeKey::new("acme", "counter"), shard)
}

fn at(node: &str, generation: u64) -> Allocation {
    Allocation {
        node: node.into(),
        generation,
    }
}

/// Shard 1 lives on `n2` (generation 7); shard 2 moves from `n2` to `n4` (generation 8); shard
/// 3 moves from `n4` to `n2` (generation 9); generation 10 is the next the catalog gives.
fn catalog() -> Catalog {
    Catalog {
        members: ["n1", "n2", "n3", "n4"]
            .into_iter()
            .map(|node| (node.to_string(), MemberState::Up))
            .collect(),
        allocations: [
            (key(1), at("n2", 7)),
            (key(2), at("n4", 8)),
            (key(3), at("n2", 9)),
        ]
        .into_iter()
        .collect(),
        handoffs: [(key(2), "n2".to_string()), (key(3), "n4".to_string())]
            .into_iter()
            .collect(),
        next_generation: 10,
        partitions: [
            (0, placed(&["n2", "n4"], 0, &[])),
            (1, placed(&["n1", "n3"], 0, &[])),
            // Moved from n2 and n4 to n2 and n3: its epoch 2, from epoch 1.
            (2, placed(&["n2", "n3"], 2, &["n2", "n4"])),
        ]
        .into_iter()
        .collect(),
    }
}

fn placed(replicas: &[&str], epoch: u64, previous: &[&str]) -> PartitionReplicas {
    let nodes = |names: &[&str]| names.iter().map(|name| name.to_string()).collect();
    PartitionReplicas {
        replicas: nodes(replicas),
        generation: 1,
        epoch,
        previous: nodes(previous),
    }
}

fn voters() -> Vec<NodeId> {
    vec!["n1".into(), "n2".into(), "n3".into()]
}

fn judged(catalog: &Catalog, from: &str, message: PeerMessage) -> Verdict {
    let voters = voters();
    let known = Knowledge {
        node: HERE,
        voters: &voters,
        primary: Some("n1"),
        catalog,
    };
    judge(from, &message, &known)
}

fn verdict(from: &str, message: PeerMessage) -> Verdict {
    judged(&catalog(), from, message)
}

fn group(message: GroupMessage) -> PeerMessage {
    PeerMessage::Group(GroupFrame {
        group: METADATA_GROUP,
        message,
    })
}

fn submit(origin: &str, command: &Command) -> PeerMessage {
    group(GroupMessage::Submit {
        origin: origin.into(),
        request: Request {
            client: 1,
            request_number: 1,
            operation: CatalogMachine::encode_command(command),
        },
    })
}

fn join(node: &str) -> Command {
    Command::JoinMember {
        node: node.into(),
        cluster_address: "127.0.0.1:1".into(),
        api_address: "127.0.0.1:2".into(),
        roles: Default::default(),
        joined_ms: 0,
    }
}

fn envelope(shard: u32, allocation: Allocation) -> WireEnvelope {
    WireEnvelope {
        address: tessera_contract::EntityAddress::new("acme", "counter", "c"),
        key: key(shard),
        allocation,
        hops: 0,
        body: WireBody::Passivate,
    }
}

fn deliver(forwarder: &str, envelopes: Vec<WireEnvelope>) -> PeerMessage {
    PeerMessage::Region(LinkMessage::Deliver {
        from: forwarder.into(),
        batch: 1,
        envelopes,
    })
}

fn shard_state(shard: u32, generation: u64, sender: &str) -> PeerMessage {
    PeerMessage::Region(LinkMessage::ShardState {
        key: key(shard),
        generation,
        from: sender.into(),
        part: ShardPart {
            index: 0,
            last: true,
            entities: Vec::new(),
            remembered: Vec::new(),
        },
    })
}

fn installed(shard: u32, generation: u64) -> PeerMessage {
    PeerMessage::Region(LinkMessage::ShardStateInstalled {
        key: key(shard),
        generation,
        index: 0,
        error: None,
    })
}

fn allocated(shard: u32, allocation: Allocation) -> PeerMessage {
    PeerMessage::Region(LinkMessage::Allocated {
        key: key(shard),
        allocation,
    })
}

fn hand_off(shard: u32, to: Allocation) -> PeerMessage {
    PeerMessage::Region(LinkMessage::HandOff {
        key: key(shard),
        to,
    })
}

#[test]
fn the_plane_protocol_and_a_followers_entries_come_only_from_voters() {
    let commit = || {
        group(GroupMessage::Replica(Message::Commit {
            view: 0,
            commit: 3,
        }))
    };
    assert_eq!(verdict("n3", commit()), Verdict::Accept);
    assert_eq!(verdict("n4", commit()), Verdict::Refuse);
    assert_eq!(verdict("rogue", commit()), Verdict::Refuse);
    let entries = || {
        group(GroupMessage::Entries {
            view: 0,
            commit: 3,
            entries: Vec::new(),
        })
    };
    assert_eq!(verdict("n1", entries()), Verdict::Accept);
    assert_eq!(verdict("rogue", entries()), Verdict::Refuse);
    let checkpoint = || {
        group(GroupMessage::Checkpoint {
            view: 0,
            checkpoint: Checkpoint::new(0, 0, Vec::new()),
        })
    };
    assert_eq!(verdict("n3", checkpoint()), Verdict::Accept);
    assert_eq!(verdict("n4", checkpoint()), Verdict::Refuse);
}

#[test]
fn a_reply_comes_only_from_the_primary_of_the_view_it_names() {
    let reply = |view| {
        group(GroupMessage::Reply(Reply {
            client: 1,
            request_number: 1,
            view,
            result: Ok(Vec::new()),
        }))
    };
    assert_eq!(verdict("n1", reply(0)), Verdict::Accept);
    assert_eq!(verdict("n2", reply(4)), Verdict::Accept, "view 4 is n2's");
    assert_eq!(verdict("n3", reply(0)), Verdict::Refuse);
    assert_eq!(verdict("rogue", reply(0)), Verdict::Refuse);
}

#[test]
fn anyone_may_follow_the_catalog_it_joins_by() {
    let follow = group(GroupMessage::Follow { after: 0 });
    assert_eq!(verdict("rogue", follow), Verdict::Accept);
}

#[test]
fn a_command_comes_from_the_node_that_submits_it_and_shard_assignments_only_from_a_voter() {
    let tenant = Command::CreateTenant {
        name: "acme".into(),
        token_sha256: "ab".into(),
        quotas: Quotas::default(),
        created_ms: 0,
    };
    let assign = Command::AssignShards {
        epoch: 0,
        assignments: vec![tessera_metadata::ShardAssignment {
            key: key(1),
            expected: None,
            to: "rogue".into(),
        }],
    };
    let complete = Command::CompleteHandoff {
        key: key(2),
        generation: 8,
    };
    assert_eq!(
        verdict("n4", submit("n1", &tenant)),
        Verdict::Refuse,
        "for another"
    );
    assert_eq!(
        verdict("rogue", submit("rogue", &join("rogue"))),
        Verdict::Accept
    );
    assert_eq!(
        verdict("rogue", submit("rogue", &join("n4"))),
        Verdict::Refuse
    );
    assert_eq!(
        verdict("rogue", submit("rogue", &tenant)),
        Verdict::Hold,
        "no member yet: its join may be ahead of this node's catalog"
    );
    assert_eq!(verdict("n4", submit("n4", &tenant)), Verdict::Accept);
    assert_eq!(verdict("n4", submit("n4", &assign)), Verdict::Refuse);
    assert_eq!(verdict("n4", submit("n4", &complete)), Verdict::Refuse);
    assert_eq!(verdict("n1", submit("n1", &assign)), Verdict::Accept);
    let garbage = group(GroupMessage::Submit {
        origin: "n4".into(),
        request: Request {
            client: 1,
            request_number: 1,
            operation: b"\xc1not a command".to_vec(),
        },
    });
    assert_eq!(verdict("n4", garbage), Verdict::Refuse);
}

#[test]
fn envelopes_come_from_a_member_routed_by_an_allocation_the_catalog_gave() {
    assert_eq!(
        verdict("n4", deliver("n4", vec![envelope(1, at("n2", 7))])),
        Verdict::Accept
    );
    assert_eq!(
        verdict("n4", deliver("n4", vec![envelope(1, at("n3", 5))])),
        Verdict::Accept,
        "an older allocation: the sender had not heard of the newer one"
    );
    assert_eq!(
        verdict("n4", deliver("n1", vec![envelope(1, at("n2", 7))])),
        Verdict::Refuse
    );
    assert_eq!(
        verdict("rogue", deliver("rogue", vec![envelope(1, at("n2", 7))])),
        Verdict::Hold,
        "no member yet"
    );
    assert_eq!(
        verdict("rogue", deliver("rogue", vec![envelope(1, at("n4", 8))])),
        Verdict::Refuse,
        "no member yet, and a forged allocation"
    );
    assert_eq!(
        verdict("n4", deliver("n4", vec![envelope(1, at("n4", 8))])),
        Verdict::Refuse,
        "generation 8 went to another shard"
    );
    assert_eq!(
        verdict(
            "n4",
            deliver(
                "n4",
                vec![envelope(1, at("n2", 7)), envelope(5, at("n4", 6))]
            )
        ),
        Verdict::Refuse,
        "shard 5 was never given generation 6: the whole batch goes"
    );
    assert_eq!(
        verdict(
            "n4",
            deliver("n4", vec![envelope(1, at("rogue", u64::MAX))])
        ),
        Verdict::Hold,
        "a generation this node has not applied yet"
    );
}

#[test]
fn batch_results_and_ask_replies_come_from_members() {
    let delivered = || {
        PeerMessage::Region(LinkMessage::Delivered {
            batch: 1,
            accepted: 1,
            refused: Vec::new(),
        })
    };
    let ask_reply = || {
        PeerMessage::Region(LinkMessage::AskReply {
            request_id: 1,
            reply: tessera_sharding::link::WireReply::Ok(Vec::new()),
        })
    };
    assert_eq!(verdict("n4", delivered()), Verdict::Accept);
    assert_eq!(verdict("rogue", delivered()), Verdict::Hold);
    assert_eq!(verdict("n4", ask_reply()), Verdict::Accept);
    assert_eq!(verdict("rogue", ask_reply()), Verdict::Hold);
}

#[test]
fn an_allocation_comes_from_the_primary_as_the_catalog_has_it() {
    assert_eq!(verdict("n1", allocated(1, at("n2", 7))), Verdict::Accept);
    assert_eq!(
        verdict("n4", allocated(1, at("n2", 7))),
        Verdict::Refuse,
        "no voter"
    );
    assert_eq!(
        verdict("rogue", allocated(1, at("rogue", u64::MAX))),
        Verdict::Refuse
    );
    assert_eq!(
        verdict("n3", allocated(1, at("n2", 7))),
        Verdict::Hold,
        "a voter may be a primary this node has not heard of"
    );
    assert_eq!(
        verdict("n1", allocated(1, at("n4", 7))),
        Verdict::Refuse,
        "another owner"
    );
    assert_eq!(
        verdict("n1", allocated(1, at("n2", 5))),
        Verdict::Refuse,
        "an older one"
    );
    assert_eq!(
        verdict("n1", allocated(1, at("rogue", u64::MAX))),
        Verdict::Hold,
        "a generation this node has not applied: held, never acted on"
    );
    let failed = |from| {
        let message = PeerMessage::Region(LinkMessage::AllocationFailed {
            key: key(6),
            reason: "no reachable member".into(),
            state_unavailable: false,
        });
        verdict(from, message)
    };
    assert_eq!(failed("n1"), Verdict::Accept);
    assert_eq!(failed("n3"), Verdict::Hold);
    assert_eq!(failed("rogue"), Verdict::Refuse);
}

#[test]
fn a_handoff_comes_from_the_primary_for_a_committed_move_away_from_this_node() {
    assert_eq!(verdict("n1", hand_off(2, at("n4", 8))), Verdict::Accept);
    assert_eq!(verdict("rogue", hand_off(2, at("n4", 8))), Verdict::Refuse);
    assert_eq!(
        verdict("n4", hand_off(1, at("n4", 7))),
        Verdict::Refuse,
        "no voter"
    );
    assert_eq!(
        verdict("n1", hand_off(1, at("n4", 7))),
        Verdict::Refuse,
        "no move"
    );
    assert_eq!(
        verdict("n1", hand_off(2, at("rogue", 8))),
        Verdict::Refuse,
        "another target"
    );
    assert_eq!(
        verdict("n1", hand_off(3, at("n2", 9))),
        Verdict::Refuse,
        "a move to here"
    );
    assert_eq!(verdict("n1", hand_off(1, at("rogue", 12))), Verdict::Hold);
}

#[test]
fn a_shards_state_comes_from_the_node_the_committed_move_takes_it_from() {
    assert_eq!(verdict("n4", shard_state(3, 9, "n4")), Verdict::Accept);
    assert_eq!(
        verdict("n4", shard_state(3, 9, "n1")),
        Verdict::Refuse,
        "for another"
    );
    assert_eq!(
        verdict("rogue", shard_state(3, 9, "rogue")),
        Verdict::Refuse
    );
    assert_eq!(verdict("n1", shard_state(3, 9, "n1")), Verdict::Refuse);
    assert_eq!(
        verdict("n4", shard_state(1, 7, "n4")),
        Verdict::Refuse,
        "no move"
    );
    assert_eq!(
        verdict("n4", shard_state(2, 8, "n4")),
        Verdict::Refuse,
        "a move away"
    );
    assert_eq!(
        verdict("n4", shard_state(3, 8, "n4")),
        Verdict::Refuse,
        "another move"
    );
    assert_eq!(verdict("n4", shard_state(4, 11, "n4")), Verdict::Hold);
}

#[test]
fn an_acknowledgement_comes_from_the_node_the_committed_move_takes_the_shard_to() {
    assert_eq!(verdict("n4", installed(2, 8)), Verdict::Accept);
    assert_eq!(verdict("rogue", installed(2, 8)), Verdict::Refuse);
    assert_eq!(verdict("n1", installed(2, 8)), Verdict::Refuse);
    assert_eq!(verdict("n4", installed(2, 7)), Verdict::Refuse);
    assert_eq!(
        verdict("n4", installed(3, 9)),
        Verdict::Refuse,
        "a move to here"
    );
    assert_eq!(verdict("n4", installed(2, 10)), Verdict::Hold);
}

#[test]
fn commands_to_the_coordinator_come_from_members_and_a_completion_from_the_losing_node() {
    let allocate = |requester: &str| {
        PeerMessage::Coordinator(CoordinatorCommand::Allocate {
            key: key(6),
            requester: requester.into(),
        })
    };
    assert_eq!(verdict("n4", allocate("n4")), Verdict::Accept);
    assert_eq!(
        verdict("n4", allocate("n3")),
        Verdict::Refuse,
        "for another"
    );
    assert_eq!(verdict("rogue", allocate("rogue")), Verdict::Hold);
    let complete = |shard, generation| {
        PeerMessage::Coordinator(CoordinatorCommand::HandoffComplete {
            key: key(shard),
            generation,
        })
    };
    assert_eq!(verdict("n2", complete(2, 8)), Verdict::Accept);
    assert_eq!(
        verdict("n4", complete(2, 8)),
        Verdict::Refuse,
        "the new owner"
    );
    assert_eq!(verdict("rogue", complete(2, 8)), Verdict::Refuse);
    assert_eq!(
        verdict("n2", complete(2, 7)),
        Verdict::Refuse,
        "another move"
    );
    assert_eq!(verdict("n2", complete(1, 7)), Verdict::Refuse, "no move");
    let move_shard = || {
        PeerMessage::Coordinator(CoordinatorCommand::MoveShard {
            key: key(1),
            to: "n4".into(),
        })
    };
    assert_eq!(verdict("n4", move_shard()), Verdict::Accept);
    assert_eq!(verdict("rogue", move_shard()), Verdict::Hold);
}

#[test]
fn a_report_of_partitions_led_comes_from_the_node_it_names_for_partitions_it_replicates() {
    let report = |node: &str, led: Vec<(u32, u64, u64)>| {
        PeerMessage::Coordinator(CoordinatorCommand::PartitionPrimaries {
            node: node.into(),
            led,
        })
    };
    assert_eq!(
        verdict("n2", report("n2", vec![(0, 0, 3)])),
        Verdict::Accept
    );
    assert_eq!(
        verdict("n4", report("n4", vec![(2, 1, 3)])),
        Verdict::Accept,
        "the epoch a move leaves"
    );
    assert_eq!(
        verdict("n3", report("n3", vec![(2, 3, 0)])),
        Verdict::Hold,
        "an epoch not placed yet here"
    );
    assert_eq!(
        verdict("n2", report("n2", vec![])),
        Verdict::Accept,
        "leads none"
    );
    assert_eq!(
        verdict("n1", report("n2", vec![(0, 0, 3)])),
        Verdict::Refuse,
        "for another node"
    );
    assert_eq!(
        verdict("n2", report("n2", vec![(0, 0, 3), (1, 0, 3)])),
        Verdict::Refuse,
        "a partition it is no replica of"
    );
    assert_eq!(
        verdict("n2", report("n2", vec![(7, 0, 1)])),
        Verdict::Hold,
        "a partition not placed yet here"
    );
    assert_eq!(verdict("rogue", report("rogue", vec![])), Verdict::Hold);
}

#[test]
fn progress_comes_from_members_and_voters() {
    let progress = || PeerMessage::Progress { commit: 1_000_000 };
    assert_eq!(verdict("n4", progress()), Verdict::Accept);
    assert_eq!(verdict("rogue", progress()), Verdict::Hold);
    let mut without_n3 = catalog();
    without_n3.members.remove("n3");
    assert_eq!(
        judged(&without_n3, "n3", progress()),
        Verdict::Accept,
        "a voter"
    );
}

#[test]
fn blob_holds_come_from_voters_and_committed_members_reads_from_any_node_and_answers_only_as_replies()
 {
    let read = || PeerMessage::BlobRead {
        sha256: "ab".into(),
        chunk: 0,
    };
    let hold = || PeerMessage::BlobHold {
        sha256: "ab".into(),
        size_bytes: 1,
    };
    assert_eq!(verdict("n4", read()), Verdict::Accept);
    assert_eq!(verdict("n4", hold()), Verdict::Accept);
    assert_eq!(
        verdict("joining", read()),
        Verdict::Accept,
        "a node not joined yet"
    );
    assert_eq!(verdict("rogue", hold()), Verdict::Refuse, "never held");
    let mut without_n3 = catalog();
    without_n3.members.remove("n3");
    assert_eq!(
        judged(&without_n3, "n3", hold()),
        Verdict::Accept,
        "a voter"
    );
    let chunk = PeerMessage::BlobChunk {
        sha256: "ab".into(),
        chunk: 0,
        size_bytes: 1,
        bytes: vec![1],
    };
    assert_eq!(verdict("n1", chunk), Verdict::Refuse);
    let held = PeerMessage::BlobHeld {
        sha256: "ab".into(),
    };
    assert_eq!(verdict("n1", held), Verdict::Refuse);
}

#[test]
fn queries_come_from_committed_members_and_answers_only_as_replies() {
    use crate::node::member::query_data::{PeerAnswer, PeerQuery};
    let query = || PeerMessage::Query(PeerQuery::Overview);
    assert_eq!(verdict("n4", query()), Verdict::Accept);
    assert_eq!(verdict("rogue", query()), Verdict::Refuse, "never held");
    let answer = PeerMessage::Answer(PeerAnswer::Refused { why: "no".into() });
    assert_eq!(Kind::of(&answer), Some(Kind::Answer));
    assert_eq!(verdict("n1", answer), Verdict::Refuse);
}

#[test]
fn a_node_this_catalog_knows_as_no_member_waits_until_it_is_one() {
    let mut joining = catalog();
    joining.members.remove("n4");
    let batch = || deliver("n4", vec![envelope(1, at("n2", 7))]);
    assert_eq!(judged(&joining, "n4", batch()), Verdict::Hold);
    assert_eq!(
        judged(&joining, "n4", PeerMessage::Progress { commit: 1 }),
        Verdict::Hold
    );
    joining.members.insert("n4".into(), MemberState::Joining);
    assert_eq!(judged(&joining, "n4", batch()), Verdict::Accept);
}

#[test]
fn with_no_primary_known_the_coordinators_word_waits() {
    let catalog = catalog();
    let voters = voters();
    let known = Knowledge {
        node: HERE,
        voters: &voters,
        primary: None,
        catalog: &catalog,
    };
    assert_eq!(
        judge("n1", &allocated(1, at("n2", 7)), &known),
        Verdict::Hold
    );
    assert_eq!(
        judge("rogue", &allocated(1, at("n2", 7)), &known),
        Verdict::Refuse
    );
}

#[test]
fn every_kind_has_its_own_label_and_place() {
    let mut labels: Vec<&str> = Kind::ALL.iter().map(|kind| kind.refusal_label()).collect();
    for (index, kind) in Kind::ALL.iter().enumerate() {
        assert_eq!(kind.index(), index);
    }
    labels.sort_unstable();
    labels.dedup();
    assert_eq!(labels.len(), Kind::ALL.len());
    assert_eq!(Kind::of(&hand_off(1, at("n4", 7))), Some(Kind::HandOff));
    assert_eq!(Kind::of(&group(GroupMessage::Follow { after: 0 })), None);
}

fn partition_frame(partition: u64) -> PeerMessage {
    epoch_frame(partition, 0)
}

fn epoch_frame(partition: u64, epoch: u64) -> PeerMessage {
    PeerMessage::Group(GroupFrame {
        group: tessera_consensus::group::GroupId((epoch << 32) | (partition + 1)),
        message: GroupMessage::Replica(Message::Commit { view: 1, commit: 3 }),
    })
}

#[test]
fn a_partition_groups_frames_pass_only_between_its_replicas() {
    // Partition 0 lives on n2 (here) and n4; partition 1 on n1 and n3.
    assert_eq!(verdict("n4", partition_frame(0)), Verdict::Accept);
    assert_eq!(
        verdict("n1", partition_frame(0)),
        Verdict::Refuse,
        "n1 is no replica of it"
    );
    assert_eq!(verdict("rogue", partition_frame(0)), Verdict::Refuse);
    assert_eq!(
        verdict("n1", partition_frame(1)),
        Verdict::Refuse,
        "this node is no replica"
    );
    // A placement this node has not applied yet: held until its catalog catches up.
    assert_eq!(verdict("n4", partition_frame(7)), Verdict::Hold);
    // A moved partition: its epoch's group between its replicas, the epoch it leaves between
    // the replicas before, a later epoch held, an earlier one refused.
    assert_eq!(verdict("n3", epoch_frame(2, 2)), Verdict::Accept);
    assert_eq!(
        verdict("n4", epoch_frame(2, 2)),
        Verdict::Refuse,
        "no longer a replica"
    );
    assert_eq!(verdict("n4", epoch_frame(2, 1)), Verdict::Accept);
    assert_eq!(
        verdict("n3", epoch_frame(2, 1)),
        Verdict::Refuse,
        "not a replica before"
    );
    assert_eq!(verdict("n3", epoch_frame(2, 3)), Verdict::Hold);
    assert_eq!(verdict("n4", epoch_frame(2, 0)), Verdict::Refuse);
    // A group id that names no partition at all.
    assert_eq!(
        verdict(
            "n4",
            partition_frame(u64::from(tessera_metadata::PARTITIONS_MAX) + 5)
        ),
        Verdict::Refuse
    );
}
