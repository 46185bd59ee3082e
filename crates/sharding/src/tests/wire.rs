//! The link vocabulary is plain data: it survives a MessagePack round trip.

use super::*;
use crate::CoordinatorCommand;
use crate::link::{LinkMessage, ReplyTo, WireBody, WireEnvelope, WireReply};
use tessera_contract::Allocation;

#[test]
fn wire_messages_round_trip_through_messagepack() {
    let key = ShardKey::new(counter(), 7);
    let allocation = Allocation {
        node: "node-1".into(),
        generation: 3,
    };
    let messages = vec![
        LinkMessage::Deliver {
            from: "node-0".into(),
            batch: 4,
            envelopes: vec![WireEnvelope {
                address: counter().entity("c-1"),
                key: key.clone(),
                allocation: allocation.clone(),
                hops: 1,
                body: WireBody::Message {
                    payload: vec![1, 2, 3],
                    meta: tessera_contract::MessageMeta {
                        origin: Some(Box::new(tessera_contract::Origin::Entity {
                            sender: counter().entity("c-0"),
                            seq: 7,
                        })),
                        chain: vec![counter().entity("c-2")],
                        deadline: None,
                        trace: None,
                    },
                    reply_to: Some(ReplyTo {
                        node: "node-0".into(),
                        request_id: 9,
                        timeout_ms: 750,
                    }),
                },
            }],
        },
        LinkMessage::Deliver {
            from: "node-2".into(),
            batch: 5,
            envelopes: vec![WireEnvelope {
                address: counter().entity("c-3"),
                key: key.clone(),
                allocation: allocation.clone(),
                hops: 1,
                body: WireBody::ReadState {
                    reply_to: ReplyTo {
                        node: "node-2".into(),
                        request_id: 10,
                        timeout_ms: 5_000,
                    },
                },
            }],
        },
        LinkMessage::Delivered {
            batch: 4,
            accepted: 0,
            refused: vec![(0, tessera_contract::MessageError::unavailable("busy"))],
        },
        LinkMessage::AskReply {
            request_id: 9,
            reply: WireReply::Ok(vec![4]),
        },
        LinkMessage::HandOff {
            key: key.clone(),
            to: allocation.clone(),
        },
    ];
    for message in messages {
        let bytes = rmp_serde::to_vec_named(&message).unwrap();
        let back: LinkMessage = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, message);
    }
    let command = CoordinatorCommand::Allocate {
        key,
        requester: "node-0".into(),
    };
    let bytes = rmp_serde::to_vec_named(&command).unwrap();
    assert_eq!(
        rmp_serde::from_slice::<CoordinatorCommand>(&bytes).unwrap(),
        command
    );
}
