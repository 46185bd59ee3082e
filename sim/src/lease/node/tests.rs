//! The node's rules one message at a time.

use std::collections::BTreeSet;
use std::rc::Rc;

use super::{Node, Outbox};
use crate::lease::clock::DriftingClock;
use crate::lease::log::Refusal;
use crate::lease::message::{Message, ShardState};
use crate::lease::table::{Entry, MemberId, MemberStatus, Start, Table};
use crate::rng::SimRng;
use tessera_sharding::lease::LeaseConfig;

fn member(machine: usize) -> MemberId {
    MemberId {
        machine,
        incarnation: 1,
    }
}

fn table(entry: Entry) -> Message {
    Message::TableUpdate {
        table: Rc::new(Table {
            entries: vec![entry],
        }),
    }
}

fn fresh_entry(owner: MemberId) -> Entry {
    Entry {
        owner,
        generation: 1,
        lineage: 1,
        start: Start::Fresh,
        settled: false,
    }
}

/// A joined node on machine 0 (clock without drift) that owns shard 0, with `renew` deciding
/// whether its first renewal commits.
fn owner_node(renew: bool) -> Node {
    let clock = DriftingClock::random(&mut SimRng::new(5), 0);
    let mut node = Node::new(0, clock, LeaseConfig::default(), 1, None);
    node.join_as_new_member(0);
    let mut out = Outbox::default();
    node.receive(
        Message::JoinOk {
            member: member(0),
            boot: 1,
        },
        0,
        &mut out,
    );
    node.receive(table(fresh_entry(member(0))), 0, &mut out);
    node.tick(0, &mut out);
    let renewal = out.sends.iter().find_map(|(_, message)| match message {
        Message::Renew { renewal, .. } => Some(*renewal),
        _ => None,
    });
    if let (true, Some(renewal)) = (renew, renewal) {
        let status = MemberStatus::Up;
        let answer = Message::RenewOk {
            member: member(0),
            boot: 1,
            renewal,
            status,
        };
        node.receive(answer, 3_000, &mut out);
    }
    node
}

#[test]
fn a_node_serves_only_with_a_lease_the_table_and_the_state() {
    assert!(!owner_node(false).serves(0, 0), "no lease yet");
    let node = owner_node(true);
    assert!(node.serves(0, 5_999), "lease counts from the send at 0");
    assert!(
        !node.serves(0, 6_000),
        "and ends 6 s after it, not after the answer"
    );
}

#[test]
fn a_handoff_stops_serving_before_the_state_leaves() {
    let mut node = owner_node(true);
    let mut out = Outbox::default();
    let handoff = Message::HandOff {
        source: member(0),
        shard: 0,
        generation: 2,
        target: member(1),
    };
    node.receive(handoff, 100, &mut out);
    assert!(!node.serves(0, 100));
    assert!(
        out.sends
            .iter()
            .any(|(_, m)| matches!(m, Message::StateTransfer { generation: 2, .. }))
    );
    let done = Message::TransferDone {
        source: member(0),
        shard: 0,
        generation: 2,
    };
    node.receive(done, 200, &mut out);
    assert!(
        out.sends
            .iter()
            .any(|(_, m)| matches!(m, Message::HandOffDone { generation: 2, .. }))
    );
}

#[test]
fn a_transfer_older_than_what_the_node_holds_is_answered_not_installed() {
    let mut node = owner_node(true);
    let mut out = Outbox::default();
    let state = ShardState {
        lineage: 9,
        applied: Rc::new(BTreeSet::from([1, 2])),
    };
    let stale = Message::StateTransfer {
        target: member(0),
        source: member(1),
        shard: 0,
        generation: 1,
        state,
    };
    node.receive(stale, 100, &mut out);
    assert!(node.serves(0, 100), "still the fresh state of generation 1");
    assert!(
        out.sends
            .iter()
            .any(|(_, m)| matches!(m, Message::TransferDone { generation: 1, .. }))
    );
}

#[test]
fn a_removed_node_stops_serving_and_joins_again_as_a_new_member() {
    let mut node = owner_node(true);
    let mut out = Outbox::default();
    let refusal = Message::Refused {
        member: member(0),
        boot: 1,
        refusal: Refusal::Removed,
    };
    node.receive(refusal, 100, &mut out);
    assert!(!node.serves(0, 100));
    assert_eq!(
        node.member(),
        MemberId {
            machine: 0,
            incarnation: 2
        }
    );
}
