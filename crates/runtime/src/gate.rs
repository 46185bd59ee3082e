//! The hook through which the layer above admits guest calls (per-tenant fairness): a call
//! holds a running slot while the guest runs, and gives it back while it waits on an `ask` —
//! waiting is not running, and a nested ask to the same tenant must find a slot free or the
//! two would wait on each other.

use tessera_contract::BoxFuture;

/// A guest call's running slot, as the runtime sees it.
pub trait CallGate: Send + Sync {
    /// The call is about to wait on an ask: give the slot back.
    fn pause(&self);

    /// The ask returned: wait for a slot again before the guest runs on.
    fn resume(&self) -> BoxFuture<'static, ()>;

    /// Asked at each epoch tick while the guest runs: `Some` pauses the guest until the future
    /// completes (a call that started without a slot because its tenant was alone, when another
    /// tenant now wants the cores).
    fn preempt(&self) -> Option<BoxFuture<'static, ()>>;

    /// The call is about to send an ask (its slot already given back): waits until its
    /// tenant's message rate (`per_second`, 0 for none; `burst` at most) allows one more
    /// message, as entities' tells are delivered at that rate too.
    fn pace(&self, per_second: u32, burst: u32) -> BoxFuture<'static, ()>;
}
