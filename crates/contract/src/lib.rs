//! The small contracts every layer shares, at the bottom of the layer order: entity and shard
//! addresses ([`address`]), the error a sender sees ([`error`]), a message with its reply port
//! ([`envelope`]) with its W3C trace context ([`trace`]) and the trait through which a running entity reaches other entities
//! ([`routing`]). Nothing here knows about wasm, redb, regions or HTTP.
//!
//! Uses no other Tessera crate; every crate of the host may use it.

pub mod address;
pub mod envelope;
pub mod error;
pub mod routing;
pub mod trace;

pub use address::{
    Allocation, AllocationTable, ENTITY_ID_BYTES_MAX, ENTITY_TYPE_BYTES_MAX, EntityAddress, NodeId,
    ShardId, ShardKey, TypeKey,
};
pub use envelope::{Envelope, MessageMeta, Origin, Reply, ReplyPort};
pub use error::{ErrorKind, MessageError};
pub use routing::{BoxFuture, NoRoutes, Router, SEQUENCES_PER_GENERATION_LOG2, sequence_base};
pub use trace::{MessageTrace, TraceContext};
