//! The deliberately broken behaviours a run may be told to have, each of which some check
//! must catch: most break the replica itself; one breaks how a node answers the partition
//! workload's reads.

use std::str::FromStr;
use tessera_consensus::config::Canaries;

/// A deliberately broken replica behaviour the checkers must catch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Canary {
    /// No canary: every check must pass.
    #[default]
    None,
    /// The primary commits as soon as it has prepared, without a quorum.
    CommitWithoutQuorum,
    /// A backup acknowledges a prepare before its journal write is durable.
    AcknowledgeBeforeDurable,
    /// A replica installs a transferred checkpoint without verifying its checksum.
    InstallUnverifiedState,
    /// A replica whose disk was lost starts as a member of a new group (formatted, normal in
    /// view 0) instead of recovering from its peers first, and votes on what it forgot.
    VoteAfterDiskLoss,
    /// A backup applies each prepare as it appends it, before it is committed.
    ApplyUncommitted,
    /// The partition workload's primary answers a read from its own copy at once, without a
    /// commit barrier (other workloads ignore it).
    ReadWithoutBarrier,
}

impl Canary {
    /// The canaries that break the replica itself: every workload must catch them.
    pub const OF_THE_REPLICA: [Canary; 5] = [
        Canary::CommitWithoutQuorum,
        Canary::AcknowledgeBeforeDurable,
        Canary::InstallUnverifiedState,
        Canary::VoteAfterDiskLoss,
        Canary::ApplyUncommitted,
    ];

    /// Every canary, for tests and the command line.
    pub const ALL: [Canary; 6] = [
        Canary::CommitWithoutQuorum,
        Canary::AcknowledgeBeforeDurable,
        Canary::InstallUnverifiedState,
        Canary::VoteAfterDiskLoss,
        Canary::ApplyUncommitted,
        Canary::ReadWithoutBarrier,
    ];

    /// The command-line name.
    pub fn name(&self) -> &'static str {
        match self {
            Canary::None => "none",
            Canary::CommitWithoutQuorum => "commit-without-quorum",
            Canary::AcknowledgeBeforeDurable => "acknowledge-before-durable",
            Canary::InstallUnverifiedState => "install-unverified-state",
            Canary::VoteAfterDiskLoss => "vote-after-disk-loss",
            Canary::ApplyUncommitted => "apply-uncommitted",
            Canary::ReadWithoutBarrier => "read-without-barrier",
        }
    }

    pub(super) fn canaries(&self) -> Canaries {
        Canaries {
            commit_without_quorum: *self == Canary::CommitWithoutQuorum,
            acknowledge_before_durable: *self == Canary::AcknowledgeBeforeDurable,
            install_unverified_state: *self == Canary::InstallUnverifiedState,
            apply_uncommitted: *self == Canary::ApplyUncommitted,
        }
    }
}

impl FromStr for Canary {
    type Err = String;

    fn from_str(name: &str) -> Result<Canary, String> {
        [Canary::None]
            .into_iter()
            .chain(Canary::ALL)
            .find(|canary| canary.name() == name)
            .ok_or_else(|| format!("unknown canary {name}"))
    }
}
