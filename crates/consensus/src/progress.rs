//! The bookkeeping of the multi-step protocols a replica runs besides normal operation: the
//! votes of a view change ([`ViewChangeState`]), the answers of a recovery
//! ([`RecoveryState`]) and the chunks of a state transfer ([`StateTransferState`]). The
//! protocols themselves live in `view_change`, `recovery` and `state_transfer`.

use super::message::{LogSuffix, OpNumber, ReplicaIndex, Status, ViewNumber};

/// A do-view-change vote as held by the new primary.
#[derive(Clone, Debug)]
pub(super) struct DoViewChangeVote {
    pub(super) replica: ReplicaIndex,
    pub(super) log_view: ViewNumber,
    pub(super) log: LogSuffix,
    pub(super) commit: OpNumber,
    pub(super) forgetful: bool,
}

/// Progress of the view change for the replica's current view.
#[derive(Clone, Debug)]
pub(super) struct ViewChangeState {
    pub(super) start_view_change_votes: Vec<bool>,
    pub(super) do_view_change_votes: Vec<Option<DoViewChangeVote>>,
    pub(super) do_view_change_sent: bool,
    pub(super) started_tick: u64,
    pub(super) request_start_view_allowed_tick: u64,
}

impl ViewChangeState {
    pub(super) fn new(replica_count: usize) -> ViewChangeState {
        ViewChangeState {
            start_view_change_votes: vec![false; replica_count],
            do_view_change_votes: vec![None; replica_count],
            do_view_change_sent: false,
            started_tick: 0,
            request_start_view_allowed_tick: 0,
        }
    }

    pub(super) fn reset(&mut self, now_ticks: u64) {
        self.start_view_change_votes
            .iter_mut()
            .for_each(|vote| *vote = false);
        self.do_view_change_votes
            .iter_mut()
            .for_each(|vote| *vote = None);
        self.do_view_change_sent = false;
        self.started_tick = now_ticks;
    }
}

/// One peer's answer to a recovery request.
#[derive(Clone, Debug)]
pub(super) struct Answer {
    pub(super) view: ViewNumber,
    pub(super) status: Status,
    pub(super) log: Option<LogSuffix>,
    pub(super) commit: OpNumber,
    /// The peer holds no durable promise (no view change voted in, no op acknowledged).
    pub(super) empty: bool,
}

impl Answer {
    /// Whether the answer can be trusted to name every view its sender took part in. A peer
    /// that is still recovering and holds nothing may have lost its disk: it has forgotten
    /// them.
    pub(super) fn knows_its_views(&self) -> bool {
        !(self.empty && self.status == Status::Recovering)
    }
}

/// Progress of one recovery.
#[derive(Clone, Debug)]
pub(super) struct RecoveryState {
    pub(super) nonce: u64,
    pub(super) answers: Vec<Option<Answer>>,
    pub(super) sent_tick: Option<u64>,
}

impl RecoveryState {
    pub(super) fn new(nonce: u64, replica_count: u8) -> RecoveryState {
        RecoveryState {
            nonce,
            answers: vec![None; usize::from(replica_count)],
            sent_tick: None,
        }
    }
}

/// Which checkpoint a state-transfer chunk belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CheckpointIdentity {
    pub(super) op: OpNumber,
    pub(super) entry_checksum: u64,
    pub(super) state_checksum: u64,
    pub(super) state_bytes: u64,
}

/// Progress of fetching a checkpoint from one peer.
#[derive(Clone, Debug)]
pub(super) struct StateTransferState {
    pub(super) source: ReplicaIndex,
    /// Known from the first chunk on.
    pub(super) identity: Option<CheckpointIdentity>,
    pub(super) bytes: Vec<u8>,
    pub(super) progress_tick: u64,
    pub(super) requested_tick: u64,
}

impl StateTransferState {
    pub(super) fn new(source: ReplicaIndex, now_ticks: u64) -> StateTransferState {
        StateTransferState {
            source,
            identity: None,
            bytes: Vec::new(),
            progress_tick: now_ticks,
            requested_tick: now_ticks,
        }
    }
}
