//! The HTTP API seen from a client: a real node serving on a loopback port, a real HTTP client
//! (ureq on blocking threads). Every endpoint, every bad input, every tenant quota, a hot
//! deploy under load, a restart of a node with remembered entities, hostile clients at the edge,
//! and clients competing for the node's connections.

mod admission;
mod crash;
mod doc_examples;
mod edge;
mod entities;
mod lifecycle;
mod messaging;
mod quota;
mod support;
mod tenants;
mod types;
