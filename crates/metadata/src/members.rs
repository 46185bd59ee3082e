//! Cluster membership as the catalog keeps it: one [`MemberRecord`] per node, moved through
//! Akka's member life cycle only by committed commands, so every node sees the same sequence
//! of changes. `Joining → Up → Leaving → Exiting → Removed`, and `Down` from any state before
//! `Removed` when a node is declared dead; a removed node's record is deleted, and the node
//! may join again later as a new member. Reachability is not here: it is what each node's
//! failure detector sees now, not a decision.

use super::error::{MetadataError, storage};
use super::member_state::MemberState;
use super::records::validate_name;
use super::store::{MEMBERS, MetadataStore, decode, encode};
use redb::{ReadableDatabase, ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Roles one member may advertise.
pub const MEMBER_ROLES_MAX: usize = 16;

/// Bytes of one advertised address.
pub const MEMBER_ADDRESS_BYTES_MAX: usize = 256;

/// One member of the cluster, as committed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// The node's id (unique in the cluster).
    pub node: String,
    /// Where peers reach it (`host:port` of its cluster listener; empty on a node without one).
    pub cluster_address: String,
    /// Where clients reach its HTTP API (`host:port`).
    pub api_address: String,
    /// The roles it advertises (shard placement may require one).
    pub roles: BTreeSet<String>,
    /// Where it is in its life cycle.
    pub state: MemberState,
    /// When it first joined (submitter's clock).
    pub joined_ms: u64,
    /// When its state last changed (submitter's clock).
    pub updated_ms: u64,
}

fn validate_member(record: &MemberRecord) -> Result<(), MetadataError> {
    validate_name(&record.node)?;
    for role in &record.roles {
        validate_name(role)?;
    }
    if record.roles.len() > MEMBER_ROLES_MAX {
        return Err(MetadataError::InvalidMember(format!(
            "{} advertises {} roles; at most {MEMBER_ROLES_MAX}",
            record.node,
            record.roles.len()
        )));
    }
    for address in [&record.cluster_address, &record.api_address] {
        if address.len() > MEMBER_ADDRESS_BYTES_MAX {
            return Err(MetadataError::InvalidMember(format!(
                "an address of {} is longer than {MEMBER_ADDRESS_BYTES_MAX} bytes",
                record.node
            )));
        }
    }
    Ok(())
}

/// Adds `record` as a joining member. A member that is joining or up already only has its
/// addresses and roles refreshed (a restarted node joins again without changing state); a
/// member that is leaving, exiting or down is refused until it is removed.
pub(super) fn join_member(
    transaction: &WriteTransaction,
    mut record: MemberRecord,
) -> Result<MemberRecord, MetadataError> {
    validate_member(&record)?;
    let mut members = transaction.open_table(MEMBERS).map_err(storage)?;
    let existing: Option<MemberRecord> = members
        .get(record.node.as_str())
        .map_err(storage)?
        .map(|bytes| decode(bytes.value()))
        .transpose()?;
    match existing {
        // A restart: the member keeps its state (a leaving member whose leave stopped short
        // comes back leaving, serves what it still owns and goes on handing it off).
        Some(existing)
            if matches!(
                existing.state,
                MemberState::Joining | MemberState::Up | MemberState::Leaving
            ) =>
        {
            record.state = existing.state;
            record.joined_ms = existing.joined_ms;
            record.updated_ms = existing.updated_ms;
        }
        Some(existing) => {
            return Err(MetadataError::MemberTransition {
                node: record.node,
                from: existing.state,
                to: MemberState::Joining,
            });
        }
        None => {
            record.state = MemberState::Joining;
            record.updated_ms = record.joined_ms;
        }
    }
    members
        .insert(record.node.as_str(), encode(&record).as_slice())
        .map_err(storage)?;
    Ok(record)
}

/// Moves `node` to `state` if its life cycle allows it; `Removed` deletes the record.
pub(super) fn set_member_state(
    transaction: &WriteTransaction,
    node: &str,
    state: MemberState,
    updated_ms: u64,
) -> Result<MemberRecord, MetadataError> {
    let mut members = transaction.open_table(MEMBERS).map_err(storage)?;
    let mut record: MemberRecord = match members.get(node).map_err(storage)? {
        Some(bytes) => decode(bytes.value())?,
        None => return Err(MetadataError::NoMember(node.to_string())),
    };
    if !record.state.may_become(state) {
        return Err(MetadataError::MemberTransition {
            node: node.to_string(),
            from: record.state,
            to: state,
        });
    }
    record.state = state;
    record.updated_ms = updated_ms;
    if state == MemberState::Removed {
        members.remove(node).map_err(storage)?;
    } else {
        members
            .insert(node, encode(&record).as_slice())
            .map_err(storage)?;
    }
    Ok(record)
}

/// Answers a lease renewal: granted to a member that may serve shards (up, leaving or
/// exiting) or is about to (joining: it renews before it becomes up, so it holds a lease by
/// the time it is given shards); refused to one that is down or gone, which must stop serving.
pub(super) fn renew_lease(
    transaction: &WriteTransaction,
    node: &str,
) -> Result<MemberState, MetadataError> {
    let members = transaction.open_table(MEMBERS).map_err(storage)?;
    let record: MemberRecord = match members.get(node).map_err(storage)? {
        Some(bytes) => decode(bytes.value())?,
        None => return Err(MetadataError::NoMember(node.to_string())),
    };
    match record.state {
        MemberState::Joining | MemberState::Up | MemberState::Leaving | MemberState::Exiting => {
            Ok(record.state)
        }
        state => Err(MetadataError::LeaseRefused {
            node: node.to_string(),
            state,
        }),
    }
}

impl MetadataStore {
    /// Every member, by node id.
    pub fn members(&self) -> Result<Vec<MemberRecord>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let table = transaction.open_table(MEMBERS).map_err(storage)?;
        let mut members = Vec::new();
        for row in table.iter().map_err(storage)? {
            let (_, bytes) = row.map_err(storage)?;
            members.push(decode(bytes.value())?);
        }
        Ok(members)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Applied, Command, MetadataStore};
    use std::sync::Arc;

    fn store() -> (tempfile::TempDir, MetadataStore) {
        let dir = tempfile::tempdir().expect("temp dir");
        let database =
            Arc::new(redb::Database::create(dir.path().join("m.redb")).expect("database"));
        (dir, MetadataStore::open(database).expect("store"))
    }

    fn join(node: &str, api: &str) -> Command {
        Command::JoinMember {
            node: node.into(),
            cluster_address: format!("{node}:7946"),
            api_address: api.into(),
            roles: ["shard".to_string()].into(),
            joined_ms: 10,
        }
    }

    fn set(node: &str, state: MemberState) -> Command {
        Command::SetMemberState {
            node: node.into(),
            state,
            updated_ms: 20,
        }
    }

    #[test]
    fn a_lease_is_renewed_only_while_the_member_may_serve() {
        let (_dir, store) = store();
        let renew = || Command::RenewLease { node: "n1".into() };
        assert!(matches!(
            store.apply(renew()),
            Err(MetadataError::NoMember(_))
        ));
        store.apply(join("n1", "127.0.0.1:1")).expect("join");
        for state in [MemberState::Joining, MemberState::Up, MemberState::Leaving] {
            if state != MemberState::Joining {
                store.apply(set("n1", state)).expect("step");
            }
            assert_eq!(store.apply(renew()), Ok(Applied::LeaseRenewed), "{state:?}");
        }
        store.apply(set("n1", MemberState::Down)).expect("down");
        assert!(matches!(
            store.apply(renew()),
            Err(MetadataError::LeaseRefused { .. })
        ));
        store
            .apply(set("n1", MemberState::Removed))
            .expect("removed");
        assert!(matches!(
            store.apply(renew()),
            Err(MetadataError::NoMember(_))
        ));
    }

    #[test]
    fn a_member_walks_the_whole_life_cycle_and_is_deleted_when_removed() {
        let (_dir, store) = store();
        let Applied::Member(joined) = store.apply(join("n1", "a:1")).expect("join") else {
            panic!("a join reports the member");
        };
        assert_eq!(joined.state, MemberState::Joining);
        for state in [
            MemberState::Up,
            MemberState::Leaving,
            MemberState::Exiting,
            MemberState::Removed,
        ] {
            let applied = store.apply(set("n1", state)).expect("a legal step");
            assert!(matches!(applied, Applied::Member(record) if record.state == state));
        }
        assert!(store.members().expect("members").is_empty());
        assert_eq!(store.applied_commands().expect("count"), 5);
    }

    #[test]
    fn an_illegal_transition_is_refused_and_changes_nothing() {
        let (_dir, store) = store();
        store.apply(join("n1", "a:1")).expect("join");
        store.apply(set("n1", MemberState::Up)).expect("up");
        store.apply(set("n1", MemberState::Down)).expect("down");
        let before = store.members().expect("members");
        let refused = store.apply(set("n1", MemberState::Up));
        assert_eq!(
            refused,
            Err(MetadataError::MemberTransition {
                node: "n1".into(),
                from: MemberState::Down,
                to: MemberState::Up,
            })
        );
        let rejoin = store.apply(join("n1", "a:1"));
        assert!(matches!(
            rejoin,
            Err(MetadataError::MemberTransition { .. })
        ));
        assert_eq!(store.members().expect("members"), before);
        assert_eq!(store.applied_commands().expect("count"), 3);
        assert_eq!(
            store.apply(set("n9", MemberState::Up)),
            Err(MetadataError::NoMember("n9".into()))
        );
    }

    #[test]
    fn a_restarted_member_joins_again_keeping_its_state_and_taking_new_addresses() {
        let (_dir, store) = store();
        store.apply(join("n1", "a:1")).expect("join");
        store.apply(set("n1", MemberState::Up)).expect("up");
        let Applied::Member(again) = store.apply(join("n1", "b:2")).expect("rejoin") else {
            panic!("a join reports the member");
        };
        assert_eq!(again.state, MemberState::Up);
        assert_eq!(again.api_address, "b:2");
        assert_eq!(again.joined_ms, 10);
    }

    #[test]
    fn a_member_whose_leave_stopped_short_rejoins_leaving_and_may_be_called_back_up() {
        let (_dir, store) = store();
        store.apply(join("n1", "a:1")).expect("join");
        store.apply(set("n1", MemberState::Up)).expect("up");
        store
            .apply(set("n1", MemberState::Leaving))
            .expect("leaving");
        let Applied::Member(again) = store.apply(join("n1", "a:1")).expect("rejoin") else {
            panic!("a join reports the member");
        };
        assert_eq!(again.state, MemberState::Leaving);
        let Applied::Member(back) = store.apply(set("n1", MemberState::Up)).expect("up") else {
            panic!("a state change reports the member");
        };
        assert_eq!(back.state, MemberState::Up);
    }

    #[test]
    fn bad_member_input_is_refused() {
        let (_dir, store) = store();
        let bad_name = Command::JoinMember {
            node: "no spaces".into(),
            cluster_address: String::new(),
            api_address: String::new(),
            roles: BTreeSet::new(),
            joined_ms: 0,
        };
        assert!(matches!(
            store.apply(bad_name),
            Err(MetadataError::InvalidName(_))
        ));
        let too_many_roles = Command::JoinMember {
            node: "n1".into(),
            cluster_address: String::new(),
            api_address: String::new(),
            roles: (0..=MEMBER_ROLES_MAX).map(|i| format!("r{i}")).collect(),
            joined_ms: 0,
        };
        assert!(matches!(
            store.apply(too_many_roles),
            Err(MetadataError::InvalidMember(_))
        ));
        assert!(store.members().expect("members").is_empty());
    }
}
