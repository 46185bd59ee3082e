//! Groups of three voters in one process, over an in-memory network that routes frames by
//! their group: an operation submitted on any member commits on every voter and is observed
//! everywhere; the voters go on without their primary and a restarted voter catches up from
//! its journal; a follower rebuilds the state from the voters and submits through them; and
//! two groups on the same nodes stay apart, even when every frame reaches both.

use super::*;
use crate::state_machine::{KeyValue, KeyValueOperation, KeyValueResult, RestoreError};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Instant;

const VOTERS: [&str; 3] = ["n1", "n2", "n3"];
const DEADLINE: Duration = Duration::from_secs(20);

/// A key-value store that reports the `(key, value)` of each put it applied.
#[derive(Default)]
struct Recorded {
    store: KeyValue,
    applied: Vec<(u64, u64)>,
}

impl StateMachine for Recorded {
    fn apply(&mut self, operation: &[u8]) -> Vec<u8> {
        if let Ok(KeyValueOperation::Put { key, value }) = rmp_serde::from_slice(operation) {
            self.applied.push((key, value));
        }
        self.store.apply(operation)
    }

    fn snapshot(&self) -> Vec<u8> {
        self.store.snapshot()
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), RestoreError> {
        self.store.restore(snapshot)
    }
}

impl GroupMachine for Recorded {
    type Applied = (u64, u64);

    fn reset(&mut self) -> Result<(), RestoreError> {
        *self = Recorded::default();
        Ok(())
    }

    fn take_applied(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.applied)
    }

    fn fault(&self) -> Option<&str> {
        None
    }
}

/// Every put a member's observer heard of, in order.
#[derive(Default)]
struct Observed(Mutex<Vec<(u64, u64)>>);

impl GroupObserver<(u64, u64)> for Observed {
    fn applied<'a>(&'a self, applied: &'a (u64, u64)) -> ObserverFuture<'a> {
        self.0.lock().expect("observer").push(*applied);
        Box::pin(async {})
    }
}

impl Observed {
    fn puts(&self) -> Vec<(u64, u64)> {
        self.0.lock().expect("observer").clone()
    }

    async fn wait_for(&self, put: (u64, u64), who: &str) {
        let started = Instant::now();
        while !self.puts().contains(&put) {
            assert!(
                started.elapsed() < DEADLINE,
                "{who} never observed {put:?}: {:?}",
                self.puts()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Where frames for one member go.
type Inbox = mpsc::Sender<(String, GroupFrame)>;

/// Each node's inbound queue per group. A node that is down has none.
#[derive(Default)]
struct Network {
    inboxes: Mutex<BTreeMap<(String, GroupId), Inbox>>,
    /// Deliver every frame to every group of its receiver, as a node that ignored group ids
    /// would: each driver must drop what is not its own.
    crossed: bool,
    /// Nodes whose links are cut: nothing reaches them or leaves them.
    cut: Mutex<BTreeSet<String>>,
    /// Every `Submit` a node sent, cut or not: `(from, to, client, request number)`.
    submits: Mutex<Vec<(String, String, u64, u64)>>,
}

impl Network {
    fn connect(&self, node: &str, group: GroupId) -> GroupInbound {
        let (sender, inbound) = mpsc::channel(GROUP_INBOUND_MAX);
        self.inboxes
            .lock()
            .expect("network")
            .insert((node.to_string(), group), sender);
        inbound
    }

    fn disconnect(&self, node: &str) {
        self.inboxes
            .lock()
            .expect("network")
            .retain(|(owner, _), _| owner != node);
    }

    fn deliver(&self, from: &str, to: &str, frame: GroupFrame) {
        if let GroupMessage::Submit { request, .. } = &frame.message {
            self.submits.lock().expect("network").push((
                from.to_string(),
                to.to_string(),
                request.client,
                request.request_number,
            ));
        }
        let cut = self.cut.lock().expect("network");
        if cut.contains(from) || cut.contains(to) {
            return;
        }
        drop(cut);
        for ((owner, group), inbox) in self.inboxes.lock().expect("network").iter() {
            if owner == to && (self.crossed || *group == frame.group) {
                let _ = inbox.try_send((from.to_string(), frame.clone()));
            }
        }
    }
}

/// One node's way onto the network.
struct Outbox {
    node: String,
    network: Arc<Network>,
}

impl GroupOutbox for Outbox {
    fn send(&self, to: &str, frame: GroupFrame) {
        self.network.deliver(&self.node, to, frame);
    }
}

struct Member {
    group: Option<Group>,
    observed: Arc<Observed>,
}

struct Cluster {
    dir: tempfile::TempDir,
    network: Arc<Network>,
    /// Members by `(group, node)`.
    members: BTreeMap<(GroupId, String), Member>,
    /// Client sessions each member opens.
    sessions: usize,
}

fn put(key: u64, value: u64) -> Vec<u8> {
    KeyValueOperation::Put { key, value }.encode()
}

fn voters() -> Vec<String> {
    VOTERS.iter().map(|voter| voter.to_string()).collect()
}

impl Cluster {
    fn new(crossed: bool) -> Cluster {
        Cluster {
            dir: tempfile::tempdir().expect("temp dir"),
            network: Arc::new(Network {
                inboxes: Mutex::default(),
                crossed,
                cut: Mutex::default(),
                submits: Mutex::default(),
            }),
            members: BTreeMap::new(),
            sessions: 1,
        }
    }

    fn outbox(&self, node: &str) -> Arc<dyn GroupOutbox> {
        Arc::new(Outbox {
            node: node.to_string(),
            network: self.network.clone(),
        })
    }

    fn start_voter(&mut self, group: GroupId, node: &str) {
        let inbound = self.network.connect(node, group);
        let observed = Arc::new(Observed::default());
        let journal = self.dir.path().join(format!("{node}-{}.journal", group.0));
        let config = GroupConfig {
            sessions: self.sessions,
            ..GroupConfig::new(group, voters(), node.to_string())
        };
        let member = Group::start_voter(
            config,
            &journal,
            Recorded::default(),
            observed.clone(),
            self.outbox(node),
            inbound,
        )
        .expect("a voter starts");
        let member = Member {
            group: Some(member),
            observed,
        };
        self.members.insert((group, node.to_string()), member);
    }

    fn start_group(&mut self, group: GroupId) {
        for node in VOTERS {
            self.start_voter(group, node);
        }
    }

    fn start_follower(&mut self, group: GroupId, node: &str) {
        let inbound = self.network.connect(node, group);
        let observed = Arc::new(Observed::default());
        let member = Group::start_follower(
            GroupConfig::new(group, voters(), node.to_string()),
            Recorded::default(),
            observed.clone(),
            self.outbox(node),
            inbound,
        )
        .expect("a follower starts");
        let member = Member {
            group: Some(member),
            observed,
        };
        self.members.insert((group, node.to_string()), member);
    }

    /// Stops a node as a crash would: its groups' tasks go, its journals stay.
    fn stop(&mut self, node: &str) {
        self.network.disconnect(node);
        for ((_, owner), member) in self.members.iter_mut() {
            if owner == node {
                member.group = None;
            }
        }
    }

    fn member(&self, group: GroupId, node: &str) -> &Member {
        &self.members[&(group, node.to_string())]
    }

    fn group(&self, group: GroupId, node: &str) -> &Group {
        self.member(group, node)
            .group
            .as_ref()
            .expect("a running member")
    }

    async fn submit(&self, group: GroupId, node: &str, key: u64, value: u64) -> KeyValueResult {
        let result = self.group(group, node).submit(put(key, value)).await;
        KeyValueResult::decode(&result.expect("the operation commits"))
    }

    /// Waits until every running voter of `group` is in normal status. A
    /// group tolerates one failure of three, and a voter still recovering from its (fresh)
    /// journal is one: it needs the primary's answer to rejoin, so a test that stops or cuts
    /// a voter before the others are whole stops two.
    async fn wait_whole(&self, group: GroupId) {
        for node in VOTERS {
            status_until(self.group(group, node), "every voter normal", |status| {
                status.primary.is_some()
            })
            .await;
        }
    }

    async fn wait_everywhere(&self, group: GroupId, put: (u64, u64)) {
        for ((member_group, node), member) in &self.members {
            if *member_group == group && member.group.is_some() {
                member.observed.wait_for(put, node).await;
            }
        }
    }
}

const ONE: GroupId = GroupId(1);
const TWO: GroupId = GroupId(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operation_submitted_on_a_backup_commits_and_is_observed_on_every_voter() {
    let mut cluster = Cluster::new(false);
    cluster.start_group(ONE);
    assert_eq!(
        cluster.submit(ONE, "n2", 1, 10).await,
        KeyValueResult::Value(None)
    );
    // The submitter has applied (and observed) it before it is answered.
    assert_eq!(cluster.member(ONE, "n2").observed.puts(), vec![(1, 10)]);
    cluster.wait_everywhere(ONE, (1, 10)).await;
    assert_eq!(
        cluster.submit(ONE, "n3", 1, 11).await,
        KeyValueResult::Value(Some(10))
    );
    let status = cluster.group(ONE, "n1").status();
    assert_eq!(status.primary.as_deref(), Some("n1"));
    assert_eq!(status.voters, voters());
    assert!(status.commit >= 2, "{status:?}");
}

/// Polls `member`'s status until `condition` holds (at most 30 s).
async fn status_until(group: &Group, what: &str, condition: impl Fn(&GroupStatus) -> bool) {
    let poll = async {
        while !condition(&group.status()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let waited = tokio::time::timeout(Duration::from_secs(30), poll).await;
    assert!(waited.is_ok(), "{what}: {:?}", group.status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_primary_says_how_old_its_word_is() {
    let mut cluster = Cluster::new(false);
    cluster.start_group(ONE);
    cluster.submit(ONE, "n1", 1, 1).await;
    cluster.wait_whole(ONE).await;
    let in_contact = |status: &GroupStatus| status.contact_age_ms.is_some_and(|age| age < 1_000);
    status_until(cluster.group(ONE, "n1"), "n1 in contact", in_contact).await;
    cluster
        .network
        .cut
        .lock()
        .expect("network")
        .insert("n1".into());
    // The others elect a new primary; n1 still names itself (it cannot know better), but
    // says its word is getting old.
    status_until(cluster.group(ONE, "n2"), "a new primary", |status| {
        status.primary.is_some() && status.primary.as_deref() != Some("n1") && in_contact(status)
    })
    .await;
    status_until(cluster.group(ONE, "n1"), "n1's word ageing", |status| {
        status.contact_age_ms.is_none_or(|age| age >= 2_000)
    })
    .await;
    let stale = cluster.group(ONE, "n1").status();
    assert_eq!(stale.view, 0, "n1 has heard of no later view: {stale:?}");
    // Healed, it learns the new view and is in contact again.
    cluster.network.cut.lock().expect("network").clear();
    status_until(cluster.group(ONE, "n1"), "n1 back in contact", |status| {
        status.view > 0 && in_contact(status)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_says_how_far_each_backup_lags() {
    let mut cluster = Cluster::new(false);
    cluster.start_group(ONE);
    cluster.submit(ONE, "n1", 1, 1).await;
    cluster.wait_whole(ONE).await;
    let lag_of = |status: &GroupStatus, voter: usize| status.lag.get(voter).copied().flatten();
    status_until(
        cluster.group(ONE, "n1"),
        "every backup caught up",
        |status| (0..3).all(|voter| lag_of(status, voter) == Some(0)),
    )
    .await;
    assert!(
        cluster.group(ONE, "n2").status().lag.is_empty(),
        "a backup reports no lag"
    );
    // n3 is cut off: the primary and n2 commit on without it, and n3 falls behind.
    cluster
        .network
        .cut
        .lock()
        .expect("network")
        .insert("n3".into());
    for round in 2..=4 {
        cluster.submit(ONE, "n1", round, round).await;
    }
    status_until(
        cluster.group(ONE, "n1"),
        "n3 three ops behind, n2 none",
        |status| lag_of(status, 2) == Some(3) && lag_of(status, 1) == Some(0),
    )
    .await;
    // Healed, it is sent what it missed and catches up.
    cluster.network.cut.lock().expect("network").clear();
    cluster.submit(ONE, "n1", 5, 5).await;
    status_until(cluster.group(ONE, "n1"), "n3 caught up", |status| {
        lag_of(status, 2) == Some(0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_voters_go_on_without_the_primary_and_a_restarted_voter_catches_up() {
    let mut cluster = Cluster::new(false);
    cluster.start_group(ONE);
    cluster.submit(ONE, "n1", 1, 1).await;
    cluster.wait_whole(ONE).await;
    cluster.stop("n1");
    assert_eq!(
        cluster.submit(ONE, "n3", 2, 2).await,
        KeyValueResult::Value(None)
    );
    let status = cluster.group(ONE, "n2").status();
    assert_ne!(status.primary.as_deref(), Some("n1"), "{status:?}");
    // The old primary comes back on its journal and learns what it missed.
    cluster.start_voter(ONE, "n1");
    cluster
        .member(ONE, "n1")
        .observed
        .wait_for((2, 2), "n1")
        .await;
    cluster.submit(ONE, "n1", 3, 3).await;
    cluster.wait_everywhere(ONE, (3, 3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_whose_journal_was_created_but_never_written_starts_and_catches_up() {
    let mut cluster = Cluster::new(false);
    // n1's journal as a crash right after the file was made leaves it: it starts as a new
    // replica (it promised nothing), instead of refusing to start, and the group forms.
    let journal = cluster.dir.path().join(format!("n1-{}.journal", ONE.0));
    drop(crate::durable::FileJournal::open(&journal).expect("the file is made"));
    cluster.start_group(ONE);
    cluster.submit(ONE, "n1", 1, 1).await;
    cluster.wait_everywhere(ONE, (1, 1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_rebuilds_the_state_from_the_voters_and_submits_through_them() {
    let mut cluster = Cluster::new(false);
    cluster.start_group(ONE);
    cluster.submit(ONE, "n1", 1, 1).await;
    cluster.start_follower(ONE, "n9");
    cluster
        .member(ONE, "n9")
        .observed
        .wait_for((1, 1), "n9")
        .await;
    assert_eq!(
        cluster.submit(ONE, "n9", 1, 2).await,
        KeyValueResult::Value(Some(1))
    );
    assert!(cluster.member(ONE, "n9").observed.puts().contains(&(1, 2)));
    cluster.wait_everywhere(ONE, (1, 2)).await;
    assert_eq!(
        cluster.group(ONE, "n9").status().primary.as_deref(),
        Some("n1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_groups_on_the_same_nodes_stay_apart_even_when_every_frame_reaches_both() {
    let mut cluster = Cluster::new(true);
    cluster.start_group(ONE);
    cluster.start_group(TWO);
    cluster.start_follower(ONE, "n9");
    for round in 1..=5 {
        assert_eq!(
            cluster.submit(ONE, "n2", round, 100 + round).await,
            KeyValueResult::Value(None)
        );
        assert_eq!(
            cluster.submit(TWO, "n3", round, 200 + round).await,
            KeyValueResult::Value(None)
        );
    }
    cluster.wait_everywhere(ONE, (5, 105)).await;
    cluster.wait_everywhere(TWO, (5, 205)).await;
    for ((group, node), member) in &cluster.members {
        let expected: Vec<(u64, u64)> = (1..=5)
            .map(|round| (round, group.0 * 100 + round))
            .collect();
        assert_eq!(member.observed.puts(), expected, "{node} in {group}");
    }
}

#[test]
fn a_member_with_an_unusable_config_does_not_start() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _entered = runtime.enter();
    let dir = tempfile::tempdir().expect("temp dir");
    let (_sender, inbound) = mpsc::channel(1);
    let outsider = Group::start_voter(
        GroupConfig::new(ONE, voters(), "n9".into()),
        &dir.path().join("journal"),
        Recorded::default(),
        Arc::new(Observed::default()),
        Arc::new(Outbox {
            node: "n9".into(),
            network: Arc::default(),
        }),
        inbound,
    );
    assert!(matches!(outsider, Err(GroupError::Config(ref why)) if why.contains("not a voter")));
    let (_sender, inbound) = mpsc::channel(1);
    let voter_as_follower = Group::start_follower(
        GroupConfig::new(ONE, voters(), "n1".into()),
        Recorded::default(),
        Arc::new(Observed::default()),
        Arc::new(Outbox {
            node: "n1".into(),
            network: Arc::default(),
        }),
        inbound,
    );
    assert!(
        matches!(voter_as_follower, Err(GroupError::Config(ref why)) if why.contains("is a voter"))
    );
}

/// Distinct operations `from` has sent to `to` (as `(client, request number)`).
fn in_flight(network: &Network, from: &str, to: &str) -> usize {
    let submits = network.submits.lock().expect("network");
    submits
        .iter()
        .filter(|(sender, receiver, _, _)| sender == from && receiver == to)
        .map(|(_, _, client, number)| (*client, *number))
        .collect::<BTreeSet<_>>()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_several_sessions_has_as_many_operations_in_flight() {
    for sessions in [1, 4] {
        let mut cluster = Cluster::new(false);
        cluster.sessions = sessions;
        cluster.start_group(ONE);
        cluster.wait_whole(ONE).await;
        // n2's frames reach no one: what it sends shows what it has in flight.
        cluster
            .network
            .cut
            .lock()
            .expect("network")
            .insert("n2".into());
        let group = cluster.group(ONE, "n2");
        let pending: Vec<_> = (0..4u64)
            .map(|key| tokio::spawn(group.submit(put(key, key + 10))))
            .collect();
        let deadline = Instant::now() + Duration::from_millis(500);
        while in_flight(&cluster.network, "n2", "n1") < 4 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            in_flight(&cluster.network, "n2", "n1"),
            sessions,
            "{sessions} sessions"
        );
        cluster.network.cut.lock().expect("network").clear();
        for submitted in pending {
            let result = tokio::time::timeout(DEADLINE, submitted)
                .await
                .expect("every operation commits once the link is back")
                .expect("the submitting task");
            assert!(result.is_ok(), "{result:?}");
        }
        for key in 0..4u64 {
            cluster.wait_everywhere(ONE, (key, key + 10)).await;
        }
    }
}
