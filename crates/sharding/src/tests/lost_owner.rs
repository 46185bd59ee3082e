//! An ask forwarded to an owner that dies (its connection lost and not back) ends as soon as
//! the loss has lasted [`LOST_OWNER_GRACE`], with a timeout (it may have run there), instead
//! of waiting out its deadline; while the connection holds, it waits.

use super::*;
use crate::link::{LOST_OWNER_GRACE, LinkError, LinkMessage, Refused};
use crate::{CoordinatorCommand, RemoteLinks};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tessera_contract::{ErrorKind, NodeId};

/// The owner's node id.
const OWNER: &str = "node-1";

/// A link to an owner that takes every frame and never answers, and whose connection is
/// reported lost once `lost` is set.
#[derive(Default)]
struct SilentOwnerLink {
    lost: AtomicBool,
}

impl RemoteLinks for SilentOwnerLink {
    fn send_to_region(&self, node: &str, message: LinkMessage) -> Result<(), Box<Refused>> {
        if node != OWNER {
            return Err(Box::new((LinkError::Unreachable(node.into()), message)));
        }
        Ok(())
    }

    fn send_to_coordinator(&self, _: CoordinatorCommand) -> Result<(), LinkError> {
        Err(LinkError::Unreachable("the coordinator runs here".into()))
    }

    fn regions(&self) -> Vec<NodeId> {
        vec![OWNER.to_string()]
    }

    fn regions_lost_for(&self, _: Duration) -> Vec<NodeId> {
        if self.lost.load(Ordering::Relaxed) {
            vec![OWNER.to_string()]
        } else {
            Vec::new()
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_ask_to_an_owner_whose_connection_is_lost_ends_before_its_deadline_as_a_timeout() {
    // Shards go only to the owner, so node-0 forwards everything.
    let config = ShardingConfig {
        role_constraint: Some("owner".into()),
        ..test_config()
    };
    let switchboard = Arc::new(Switchboard::new());
    let link = Arc::new(SilentOwnerLink::default());
    assert!(switchboard.set_remote(Arc::clone(&link) as Arc<dyn RemoteLinks>));
    let counter = TypeKey::new("acme", "counter");
    let settings = TypeSettings::new(config.num_shards);
    let (region, _fake) = start_region(
        "node-0",
        &config,
        &switchboard,
        None,
        None,
        settings.clone(),
    )
    .await;
    region
        .register_type(counter.clone(), settings)
        .await
        .unwrap();
    let membership = Membership::new();
    membership.join("node-0", Vec::<String>::new());
    membership.join(OWNER, ["owner"]);
    let catalog = tempfile::tempdir().unwrap();
    let _coordinator = Coordinator::start(
        config.clone(),
        membership.subscribe(),
        Arc::clone(&switchboard),
        test_plane(&catalog),
    )
    .unwrap();

    let deadline = Duration::from_secs(60);
    let started = tokio::time::Instant::now();
    let asking = {
        let region = region.clone();
        let address = counter.entity("c-1");
        tokio::spawn(async move { region.ask(address, b"add".to_vec(), Some(deadline)).await })
    };
    // The connection holds: the ask waits for the owner.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        !asking.is_finished(),
        "an ask waits while its owner's connection holds"
    );

    link.lost.store(true, Ordering::Relaxed);
    let lost_at = tokio::time::Instant::now();
    let asked = asking.await.expect("the asker");
    let error = asked.expect_err("no owner answered");
    assert_eq!(error.kind, ErrorKind::Timeout, "{error}");
    assert!(error.message.contains(OWNER), "{error}");
    let ended_after = lost_at.elapsed();
    assert!(
        ended_after < Duration::from_secs(1) && started.elapsed() < deadline,
        "the ask ended {ended_after:?} after the link reported the loss (which is reported \
         once it lasted {LOST_OWNER_GRACE:?}), not at its deadline"
    );
    assert_eq!(region.counters().asks_orphaned, 1);
}
