//! Everything that crosses the simulated network, and between whom. Nodes talk to the log
//! (renewals, joins, reports), the log and its coordinator talk to nodes (answers, handoffs,
//! table announcements), nodes talk to each other (state transfers, forwarded requests) and to
//! clients (replies).

use std::collections::BTreeSet;
use std::rc::Rc;

use super::log::Refusal;
use super::table::{MemberId, MemberStatus, Table};
use tessera_sharding::lease::Renewal;

/// Where a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// The metadata log and the coordinator running beside it.
    Log,
    /// A machine (whatever process runs on it now).
    Machine(usize),
    /// The clients, outside every partition.
    Client,
}

/// A shard's state as it travels in a handoff: its lineage and the ids applied to it.
#[derive(Clone, Debug)]
pub struct ShardState {
    /// The history this state continues.
    pub lineage: u64,
    /// Message ids applied to it (what deduplication needs).
    pub applied: Rc<BTreeSet<u64>>,
}

/// How a node answered a client's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    /// Applied now.
    Applied,
    /// Applied before: the state already holds this id.
    Duplicate,
}

/// A message on the wire.
#[derive(Clone, Debug)]
pub enum Message {
    /// Node → log: renew `member`'s lease.
    Renew {
        member: MemberId,
        boot: u64,
        renewal: Renewal,
    },
    /// Node → log: `member` joins, or its restarted process announces itself.
    Join { member: MemberId, boot: u64 },
    /// Node → log: `member` wants to leave.
    Leave { member: MemberId, boot: u64 },
    /// Node → log: send me the committed table (answered with a [`Message::TableUpdate`]).
    FetchTable,
    /// Node → log: `member` holds the state of `shard` at `generation`.
    Installed {
        member: MemberId,
        shard: usize,
        generation: u64,
    },
    /// Node → log: `member` handed `shard` off at `generation` and dropped its copy.
    HandOffDone {
        member: MemberId,
        shard: usize,
        generation: u64,
    },
    /// Log → node: the renewal committed.
    RenewOk {
        member: MemberId,
        boot: u64,
        renewal: Renewal,
        status: MemberStatus,
    },
    /// Log → node: a command of `member` was refused.
    Refused {
        member: MemberId,
        boot: u64,
        refusal: Refusal,
    },
    /// Log → node: the join committed.
    JoinOk { member: MemberId, boot: u64 },
    /// Coordinator → previous owner: stop serving `shard` and send its state to `target`.
    HandOff {
        source: MemberId,
        shard: usize,
        generation: u64,
        target: MemberId,
    },
    /// Log → node: the committed table (announced by the coordinator, or asked for).
    TableUpdate { table: Rc<Table> },
    /// Previous owner → new owner: the state of `shard` for the move at `generation`.
    StateTransfer {
        target: MemberId,
        source: MemberId,
        shard: usize,
        generation: u64,
        state: ShardState,
    },
    /// New owner → previous owner: the transfer for `generation` is no longer needed.
    TransferDone {
        source: MemberId,
        shard: usize,
        generation: u64,
    },
    /// Client → node, or node → node when forwarded: a message for `shard`.
    Request { id: u64, shard: usize, hops: u8 },
    /// Node → client.
    Reply { id: u64, kind: ReplyKind },
}
