//! Node metadata — tenants, entity types, plugin versions and plugin bytes — changed only by
//! [`Command`]s applied by a deterministic state machine over redb.
//!
//! On one node [`MetadataStore::apply`] is called directly; in a cluster the same commands are
//! ordered by the consensus metadata plane and applied on every node. Commands carry every
//! input (times, hashes) so applying one twice anywhere gives the same result.

mod command;
mod store;

pub use command::{Applied, Command, Quotas, Tenant, TypeOptions, TypeRecord, VersionRecord};
pub use store::{
    MetadataError, MetadataStore, NAME_BYTES_MAX, VERSIONS_PER_TYPE_MAX, validate_name,
};
