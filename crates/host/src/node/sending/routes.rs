//! [`SenderRoutes`]: each thread's resolved routes to the entities it tells and asks by
//! address.
//!
//! A message by address ([`Node::tell`], [`Node::ask`]) finds its tenant's rate bucket, its
//! type's registration and its entity's cell in tables every sender shares. A handle
//! ([`EntityRef`](crate::node::EntityRef)) resolves all of that once. The node keeps such resolved
//! routes for its senders by address too, in one map per thread. So a message to an entity
//! this thread sent to before costs one lookup in a map no other thread touches.
//!
//! Nothing here decides where a message goes. A route that cannot run a message on the
//! sender's task (the entity is busy, not live here, or its shard is moving) gives the message
//! back, admitted, and the region routes it by address, with every guarantee of a tell by
//! address. A route whose tenant, type or cell changed resolves them again, as a handle does.
//!
//! Bounded: each thread keeps at most `sender_routes_per_thread` routes
//! ([`NodeConfig`](crate::node::NodeConfig), [`SENDER_ROUTES_PER_THREAD`] by default; 0 keeps none).
//! A route is kept only for an entity the thread sends to again soon after a first message: the
//! misses are remembered in a small Bloom filter, cleared after twice the bound of misses. So a
//! sender to ever-new entities pays a hash and two bit tests per message, and no resolving.
//! When the map is full, the routes not used since the last sweep leave, or all of them when
//! too few would.

use super::entity_ref::ResolvedRoute;
use crate::node::{Node, NodeError};
use std::cell::RefCell;
use std::hash::BuildHasher;
use std::time::Duration;
use tessera_contract::{EntityAddress, MessageError};
use tessera_sharding::{EntityRoute, PendingReply};
use thread_local::ThreadLocal;

/// What a route's try on the sender's task did: run here (`Ok(Ok)`), gave the payload back unsent
/// (`Ok(Err)`), or found its type gone (`Err`).
type SentHere<T> = Result<Result<T, Vec<u8>>, MessageError>;

/// The most routes one thread keeps, by default.
pub const SENDER_ROUTES_PER_THREAD: usize = 1024;

/// The largest bound a node may be configured with (about 25 MiB of routes per thread).
pub const SENDER_ROUTES_PER_THREAD_LIMIT: usize = 65_536;

/// The Bloom filter of recent misses has 8 bits per remembered miss and is tested with two
/// hashes: a few percent of false positives when full, which only keep a route early. It is
/// why a sender to ever-new entities pays a hash and two bit tests per message, and resolves
/// nothing; the routes it lets a thread keep took a message by address from 842 to 731 ns with
/// two senders, 2,026 to 1,871 ns with one (`benches/wall.sh`, 1,000 entities, 2026-12-04).
const RECENT_MISS_BITS_PER_MISS: usize = 8;

/// The routes of every thread that told by address through one node.
pub(in crate::node) struct SenderRoutes {
    /// The most routes one thread keeps (0: none).
    per_thread_max: usize,
    per_thread: ThreadLocal<RefCell<Routes>>,
}

/// What trying a message on this thread's route did.
pub(in crate::node) enum Tried<T> {
    /// Run (or started) on the sender's task, with what that gives back (an ask's reply on its
    /// way).
    Sent(T),
    /// Not sent: the payload goes through the region, by address.
    NotSent(Vec<u8>, ByRegion),
}

/// Why a message goes through the region, and what follows it.
pub(in crate::node) enum ByRegion {
    /// The route admitted it under the tenant's rate but could not run it here: it is not
    /// admitted again, and the route picks the entity's cell up afterwards.
    Admitted,
    /// No route: admit it; `keep` says whether to keep a route for the entity afterwards.
    Missed { keep: bool },
}

struct Routes {
    max: usize,
    /// The routes, found by their address's hash and compared with the address each route
    /// holds: the address is not kept a second time as a key (a route 72 bytes and three
    /// string allocations smaller than in a map keyed by address, and one hash per miss).
    routes: hashbrown::HashTable<Kept>,
    hasher: foldhash::fast::RandomState,
    /// A Bloom filter of the recently missed addresses, and how many it holds (cleared at
    /// `2 * max`).
    recent_misses: Box<[u64]>,
    recent_miss_count: usize,
}

struct Kept {
    resolved: ResolvedRoute,
    /// Used since the last sweep.
    used: bool,
}

impl Kept {
    fn is_for(&self, to: &EntityAddress) -> bool {
        self.resolved.route.address() == to
    }
}

impl Routes {
    fn new(max: usize) -> Self {
        let bits = 2 * max * RECENT_MISS_BITS_PER_MISS;
        Routes {
            max,
            routes: hashbrown::HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            recent_misses: vec![0; bits.div_ceil(64)].into_boxed_slice(),
            recent_miss_count: 0,
        }
    }
}

impl SenderRoutes {
    /// Routes for at most `per_thread_max` entities per thread (0: none).
    pub(in crate::node) fn new(per_thread_max: usize) -> Self {
        SenderRoutes {
            per_thread_max,
            per_thread: ThreadLocal::new(),
        }
    }

    /// Tries a tell of `payload` to `to` on this thread's route (see [`try_here`](Self::try_here)).
    pub(in crate::node) fn tell_here(
        &self,
        node: &Node,
        to: &EntityAddress,
        payload: Vec<u8>,
    ) -> Result<Tried<()>, NodeError> {
        self.try_here(node, to, payload, |route, payload| {
            route
                .tell_here(payload)
                .map(|given_back| given_back.map_or(Ok(()), Err))
        })
    }

    /// Tries an ask of `payload` to `to` on this thread's route (see
    /// [`try_here`](Self::try_here)).
    pub(in crate::node) fn ask_here(
        &self,
        node: &Node,
        to: &EntityAddress,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Tried<PendingReply>, NodeError> {
        self.try_here(node, to, payload, |route, payload| {
            route.ask_here(payload, Some(timeout))
        })
    }

    /// Tries `payload` for `to` on this thread's route: admits it and runs it here (`send`)
    /// when the thread has a route and the entity is idle and live here. An error (over the
    /// tenant's rate, tenant or type gone) means it was not sent, as a message by address says.
    fn try_here<T>(
        &self,
        node: &Node,
        to: &EntityAddress,
        payload: Vec<u8>,
        send: impl FnOnce(&mut EntityRoute, Vec<u8>) -> SentHere<T>,
    ) -> Result<Tried<T>, NodeError> {
        if self.per_thread_max == 0 {
            return Ok(Tried::NotSent(payload, ByRegion::Missed { keep: false }));
        }
        let routes = self
            .per_thread
            .get_or(|| RefCell::new(Routes::new(self.per_thread_max)));
        // Busy only if a message run here told again by address from inside: through the region.
        let Ok(mut routes) = routes.try_borrow_mut() else {
            return Ok(Tried::NotSent(payload, ByRegion::Missed { keep: false }));
        };
        let hash = routes.hash(to);
        let Some(kept) = routes.find_mut(hash, to) else {
            let keep = routes.missed(hash);
            return Ok(Tried::NotSent(payload, ByRegion::Missed { keep }));
        };
        kept.used = true;
        kept.resolved.admit(node)?;
        match send(&mut kept.resolved.route, payload) {
            Ok(Ok(sent)) => Ok(Tried::Sent(sent)),
            Ok(Err(payload)) => Ok(Tried::NotSent(payload, ByRegion::Admitted)),
            Err(error) => {
                // The type is gone: so is the route.
                routes.forget(hash, to);
                Err(error.into())
            }
        }
    }

    /// After a message [`try_here`](Self::try_here) gave back went through the region: the route
    /// picks the entity's cell up again.
    pub(in crate::node) fn sent_by_region(&self, to: &EntityAddress) {
        let Some(routes) = self.per_thread.get() else {
            return;
        };
        let Ok(mut routes) = routes.try_borrow_mut() else {
            return;
        };
        let hash = routes.hash(to);
        if let Some(kept) = routes.find_mut(hash, to) {
            kept.resolved.route.sent_by_region();
        }
    }

    /// After a message by address to `to` was taken: keeps a route to it on this thread, if there
    /// is room (or room can be made).
    pub(in crate::node) fn keep(&self, node: &Node, to: &EntityAddress) {
        // Resolved before the map is borrowed: resolving reads the node's shared tables.
        let Ok(mut resolved) = node.resolve_route(to.clone()) else {
            return;
        };
        resolved.route.sent_by_region();
        // Only a thread that missed (so has its routes) is told to keep one.
        let Some(routes) = self.per_thread.get() else {
            return;
        };
        let Ok(mut routes) = routes.try_borrow_mut() else {
            return;
        };
        // Used: the message it was kept after counts, so the next sweep keeps it.
        let kept = Kept {
            resolved,
            used: true,
        };
        // Another task of this thread may have kept one meanwhile: this one replaces it.
        let hash = routes.hash(to);
        if let Some(already) = routes.find_mut(hash, to) {
            *already = kept;
            return;
        }
        if routes.routes.len() >= routes.max {
            routes.sweep();
        }
        routes.insert(hash, kept);
        debug_assert!(
            routes.routes.len() <= routes.max,
            "a thread keeps at most its bound of routes"
        );
    }

    /// The routes this thread keeps (0 while a message runs here through one of them).
    pub(in crate::node) fn kept_here(&self) -> usize {
        self.per_thread.get().map_or(0, |routes| {
            routes.try_borrow().map_or(0, |routes| routes.routes.len())
        })
    }
}

impl Routes {
    /// The hash `to`'s route is found by.
    fn hash(&self, to: &EntityAddress) -> u64 {
        self.hasher.hash_one(to)
    }

    /// The route to `to` (whose address hashes to `hash`), if this thread keeps one.
    fn find_mut(&mut self, hash: u64, to: &EntityAddress) -> Option<&mut Kept> {
        self.routes.find_mut(hash, |kept| kept.is_for(to))
    }

    /// Adds a route whose address hashes to `hash` (none for it is kept yet).
    fn insert(&mut self, hash: u64, kept: Kept) {
        let hasher = &self.hasher;
        self.routes.insert_unique(hash, kept, |kept| {
            hasher.hash_one(kept.resolved.route.address())
        });
    }

    /// Drops the route to `to` (whose address hashes to `hash`), if this thread keeps one.
    fn forget(&mut self, hash: u64, to: &EntityAddress) {
        if let Ok(route) = self.routes.find_entry(hash, |kept| kept.is_for(to)) {
            route.remove();
        }
    }

    /// Notes a miss of the address that hashes to `hash`: whether it was missed recently too
    /// (then a route is worth keeping).
    fn missed(&mut self, hash: u64) -> bool {
        // Two bit positions from the two halves of the hash.
        let filter_bits = self.recent_misses.len() * 64;
        let bits = [hash as u32 as usize, (hash >> 32) as usize].map(|half| half % filter_bits);
        let seen = bits
            .iter()
            .all(|&bit| self.recent_misses[bit / 64] & (1 << (bit % 64)) != 0);
        if seen {
            return true;
        }
        if self.recent_miss_count == 2 * self.max {
            self.recent_misses.fill(0);
            self.recent_miss_count = 0;
        }
        for bit in bits {
            self.recent_misses[bit / 64] |= 1 << (bit % 64);
        }
        self.recent_miss_count += 1;
        false
    }

    /// Makes room: the routes not used since the last sweep, or whose entity is no longer live
    /// here, leave; if that frees less than a quarter of the map, every route leaves (so that a
    /// sweep, which visits every route, comes at most once per a quarter of the map's inserts).
    fn sweep(&mut self) {
        self.routes.retain(|kept| {
            let stays = kept.used && kept.resolved.route.holds_live_cell();
            kept.used = false;
            stays
        });
        if self.routes.len() > self.max * 3 / 4 {
            self.routes.clear();
        }
    }
}
