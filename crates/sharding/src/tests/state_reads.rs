//! State reads go where the entity lives: through any region they are answered by the owner of
//! the entity's shard (the fake's "state" is what was delivered to it on that node), wait out a
//! handoff in the shard's buffer and are answered by the new owner, and fail as an ask does
//! while the shard has no home.

use super::*;
use crate::CoordinatorCommand;
use tessera_contract::ErrorKind;

#[tokio::test(start_paused = true)]
async fn state_is_read_at_the_owner_through_any_region() {
    let cluster = cluster(3, test_config(), None).await;
    let ids = one_id_per_shard(16);
    for id in ids.values() {
        let address = counter().entity(id.clone());
        let written = format!("written to {id}").into_bytes();
        let reply = cluster.regions[0].ask(address, written.clone(), None).await;
        assert_eq!(reply, Ok(written));
    }
    let table = cluster.coordinator.allocation_table().await.unwrap();
    let owners: std::collections::BTreeSet<_> = table.values().map(|a| a.node.clone()).collect();
    assert_eq!(owners.len(), 3, "the entities live on every node");
    for id in ids.values() {
        let address = counter().entity(id.clone());
        let expected = vec![("0000".to_string(), format!("written to {id}").into_bytes())];
        for (index, region) in cluster.regions.iter().enumerate() {
            let state = region.read_state(address.clone(), None).await;
            assert_eq!(
                state,
                Ok(expected.clone()),
                "{address} read via node-{index}"
            );
        }
    }
    let never_written = counter().entity("never-written");
    for region in &cluster.regions {
        assert_eq!(
            region.read_state(never_written.clone(), None).await,
            Ok(Vec::new())
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_state_read_waits_out_a_handoff_and_is_answered_by_the_new_owner() {
    let gate = Arc::new(Semaphore::new(0));
    let cluster = cluster(2, test_config(), Some(Arc::clone(&gate))).await;
    let ids = one_id_per_shard(16);
    for id in ids.values() {
        let reply = cluster.regions[0].ask(counter().entity(id.clone()), b"warm".to_vec(), None);
        assert!(reply.await.is_ok());
    }
    let table = cluster.coordinator.allocation_table().await.unwrap();
    let id = ids
        .values()
        .find(|id| table[&key_of(id, 16)].node == "node-0")
        .expect("node-0 owns some shards")
        .clone();
    let address = counter().entity(id.clone());
    cluster
        .coordinator
        .command(CoordinatorCommand::MoveShard {
            key: key_of(&id, 16),
            to: "node-1".into(),
        })
        .await
        .unwrap();
    cluster.fakes[0].stop_called.notified().await;
    // Held at the gate: the tell and then the read wait in node-0's buffer, in that order.
    cluster.regions[1]
        .tell(address.clone(), b"moved".to_vec())
        .await
        .unwrap();
    let read = tokio::spawn({
        let region = cluster.regions[1].clone();
        let address = address.clone();
        async move { region.read_state(address, None).await }
    });
    gate.add_permits(1);
    let state = read.await.unwrap().expect("the new owner answers");
    assert_eq!(
        state,
        vec![("0000".to_string(), b"moved".to_vec())],
        "read on node-1, after the tell buffered before it"
    );
}

#[tokio::test(start_paused = true)]
async fn a_state_read_fails_as_an_ask_does_while_its_shard_has_no_home() {
    let switchboard = Arc::new(Switchboard::new());
    // A coordinator that never answers keeps the allocation in flight.
    let (silent_coordinator, _requests) = tokio::sync::mpsc::channel::<CoordinatorCommand>(16);
    switchboard.connect_coordinator(silent_coordinator);
    let config = test_config();
    let settings = TypeSettings::new(16);
    let (region, _fake) = start_region("node-0", &config, &switchboard, None, None, settings).await;
    let address = counter().entity("homeless");
    let patience = Some(config.request_timeout * 2);
    let (asked, read) = tokio::join!(
        region.ask(address.clone(), b"hello".to_vec(), patience),
        region.read_state(address.clone(), patience),
    );
    let (asked, read) = (asked.unwrap_err(), read.unwrap_err());
    assert_eq!(asked.kind, ErrorKind::Unavailable, "{asked}");
    assert_eq!(read.kind, asked.kind, "{read}");
    assert!(read.message.contains("no allocation for shard"), "{read}");
}
