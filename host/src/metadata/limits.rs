//! The catalog's hard limits, named so records, errors and docs agree on them.

/// The most versions one type keeps, so a deploy loop cannot grow a record without bound.
pub const VERSIONS_PER_TYPE_MAX: usize = 1_000;

/// The longest tenant or type name, so names cannot bloat keys, logs and metric labels.
pub const NAME_BYTES_MAX: usize = 64;
