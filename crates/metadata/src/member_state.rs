//! Where a cluster member is in its life cycle ([`MemberState`]), and the moves between states
//! that committed commands may make.

use serde::{Deserialize, Serialize};

/// Where a member is in its life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberState {
    /// Asked to join; owns nothing until it is up.
    Joining,
    /// A full member: may own shards and vote.
    Up,
    /// Leaving gracefully: its shards are being handed off.
    Leaving,
    /// Handed everything off; about to be removed.
    Exiting,
    /// Declared dead: owns nothing; an operator or the cluster removes it.
    Down,
    /// Gone from the cluster (its record is deleted when this is applied).
    Removed,
}

impl MemberState {
    /// Whether a member in this state may be moved to `next`.
    ///
    /// ```
    /// use tessera_metadata::MemberState::*;
    /// assert!(Joining.may_become(Up));
    /// assert!(Up.may_become(Leaving));
    /// assert!(Up.may_become(Down));
    /// assert!(Leaving.may_become(Up)); // a leave called off
    /// assert!(!Exiting.may_become(Up));
    /// assert!(!Down.may_become(Up));
    /// ```
    pub fn may_become(self, next: MemberState) -> bool {
        use MemberState::*;
        matches!(
            (self, next),
            (Joining, Up)
                | (Up, Leaving)
                | (Leaving, Up)
                | (Leaving, Exiting)
                | (Exiting, Removed)
                | (Joining | Up | Leaving | Exiting, Down)
                | (Down, Removed)
        )
    }

    /// The name used in the API, the CLI and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Joining => "joining",
            MemberState::Up => "up",
            MemberState::Leaving => "leaving",
            MemberState::Exiting => "exiting",
            MemberState::Down => "down",
            MemberState::Removed => "removed",
        }
    }

    /// Every state, in life-cycle order.
    pub const ALL: [MemberState; 6] = [
        MemberState::Joining,
        MemberState::Up,
        MemberState::Leaving,
        MemberState::Exiting,
        MemberState::Down,
        MemberState::Removed,
    ];
}
