//! How a client's messages reach entities cheaply: [`EntityRef`](entity_ref::EntityRef), a
//! reusable handle that resolves an entity's route once; the routes each sender thread keeps
//! for its messages by address (`routes`); and the per-tenant token buckets of the message-rate
//! quota that both admit through (`rate`). None of them decides where a message goes: what
//! they cannot run on the sender's task goes to the region by address.

pub(super) mod entity_ref;
pub(super) mod rate;
pub(super) mod routes;
