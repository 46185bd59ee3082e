//! A panic caught inside a simulated run (a replica's asserted invariant broken), as the text
//! a failed seed reports.

use std::any::Any;

/// The message `payload` (what `catch_unwind` returned) carried, or nothing.
pub(crate) fn message(payload: Box<dyn Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| text.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}
