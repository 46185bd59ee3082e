//! The faults a simulation injects ([`Faults`]), each a chance per step drawn from the seed.

/// How often, per thousand scheduling steps, each fault is injected.
///
/// ```
/// use tessera_testkit::Faults;
/// let faults = Faults { crash_per_mille: 20, ..Faults::all() };
/// assert!(faults.duplicate_per_mille > 0);
/// assert_eq!(Faults::none().crash_per_mille, 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Faults {
    /// The node crashes before the step: every instance, and delivery's progress not yet
    /// acknowledged, is lost; committed state, outboxes, receipts and reminders stay; it
    /// restarts at once. Any step with a non-empty outbox is between a commit and its delivery.
    pub crash_per_mille: u32,
    /// A delivered tell or a fired reminder arrives again (a lost acknowledgement, a network
    /// duplicate), right away or later, even after a restart.
    pub duplicate_per_mille: u32,
    /// A sender's deliveries are held back for a few steps while other messages move.
    pub delay_per_mille: u32,
}

impl Faults {
    /// No injected faults: the scheduler still picks the order of deliveries from the seed.
    pub fn none() -> Self {
        Faults {
            crash_per_mille: 0,
            duplicate_per_mille: 0,
            delay_per_mille: 0,
        }
    }

    /// Every fault, often enough that a short scenario meets each a few times.
    pub fn all() -> Self {
        Faults {
            crash_per_mille: 30,
            duplicate_per_mille: 150,
            delay_per_mille: 100,
        }
    }
}
