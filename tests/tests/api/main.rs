//! The HTTP API seen from a client: a real node serving on a loopback port, a real HTTP client
//! (ureq on blocking threads). Every endpoint, every bad input, every tenant quota, a hot
//! deploy under load, a restart of a node with remembered entities, hostile clients at the edge,
//! clients competing for the node's connections, the entity listing, and the dashboard's page
//! and JSON.

mod admission;
mod crash;
mod dashboard;
mod doc_examples;
mod edge;
mod entities;
mod lifecycle;
mod listing;
mod messaging;
mod quota;
mod support;
mod tenants;
mod types;
