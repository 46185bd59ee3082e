//! Which connections the accept loop ([`super::server`]) serves when clients compete for its
//! `connections_max` places (`[api]` in the node config, `docs/api.md`), so that one client
//! address cannot shut every other client out. Three rules, in order:
//!
//! - **Per address.** A client address holds at most `connections_per_address_max`
//!   connections; one more from it is refused. An IPv6 client counts by its /64, the block one
//!   host is usually given, or it could open a cap's worth from each of its addresses.
//! - **Shedding.** Once all places but the `admin_connections_reserved` are taken, a newcomer
//!   takes the place of the oldest connection not serving a request — first one that never
//!   sent a valid token (a client trickling a request head, say), then one idle between
//!   requests —, which is closed without an answer. A connection busy with a request is never
//!   shed.
//! - **Admin reserve.** When nothing can be shed, the reserved places take newcomers that may
//!   only make admin requests (the edge answers any other `503` and closes them), so an
//!   operator can still reach a node whose every connection is busy. Past `connections_max` a
//!   connection is refused.
//!
//! The table is one lock taken by the accept loop and by each connection as it ends; the
//! requests of a connection never take it: they mark it authenticated through the
//! [`ConnectionRef`] the accept loop puts in each request, and its phase through its
//! [`Activity`].

use super::activity::Activity;
use super::error::ApiError;
use crate::node::{ApiLimits, Principal};
use axum::http::StatusCode;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// Most open connections one admission looks at, oldest first, for one to shed: bounds the
/// work of an accept (under the table's lock) when `connections_max` is large and the oldest
/// connections are busy.
const SHED_CANDIDATES_MAX: usize = 4096;

/// Bits of an IPv6 address that name the client: its /64.
const IPV6_CLIENT_PREFIX_BITS: u32 = 64;

/// The admission rules' bounds, from `ApiLimits`.
#[derive(Clone, Copy, Debug)]
pub(super) struct AdmissionLimits {
    connections_max: usize,
    per_address_max: usize,
    admin_reserved: usize,
}

impl From<&ApiLimits> for AdmissionLimits {
    fn from(limits: &ApiLimits) -> Self {
        AdmissionLimits {
            connections_max: limits.connections_max,
            per_address_max: limits.connections_per_address_max,
            admin_reserved: limits.admin_connections_reserved,
        }
    }
}

impl AdmissionLimits {
    /// Places a connection can take without shedding another or entering the admin reserve.
    fn general(&self) -> usize {
        // `ApiLimits::validate` keeps the reserve below the cap.
        self.connections_max.saturating_sub(self.admin_reserved)
    }
}

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Its address holds `connections_per_address_max` connections.
    PerAddress,
    /// `connections_max` connections are open and none can be shed.
    Full,
}

/// One open connection as the accept loop, the connection's task and the edge share it.
#[derive(Debug)]
pub(super) struct OpenConnection {
    activity: Arc<Activity>,
    /// A request of this connection carried a valid token.
    authenticated: AtomicBool,
    /// Admitted to the admin reserve: serves admin requests only.
    admin_only: bool,
    /// Notified once when the connection is shed; its task then closes it.
    shed: Notify,
}

impl OpenConnection {
    fn new(admin_only: bool) -> OpenConnection {
        OpenConnection {
            activity: Arc::new(Activity::new()),
            authenticated: AtomicBool::new(false),
            admin_only,
            shed: Notify::new(),
        }
    }

    /// The connection's activity, which its socket and requests update.
    pub(super) fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// Completes once the connection has been shed (at once if it was shed before the call).
    pub(super) async fn shed(&self) {
        self.shed.notified().await;
    }

    fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Relaxed)
    }
}

/// A request's connection, as the accept loop hands it to the edge in the request's extensions.
#[derive(Clone, Debug)]
pub(super) struct ConnectionRef(pub(super) Arc<OpenConnection>);

impl ConnectionRef {
    /// Takes note of who the request is from: a valid token marks the connection
    /// authenticated (shed after those that never sent one); on a connection admitted to the
    /// admin reserve anything but the admin token is refused.
    pub(super) fn check(&self, principal: &Result<Principal, ApiError>) -> Result<(), ApiError> {
        let connection = &self.0;
        match principal {
            Ok(Principal::Admin) => {}
            _ if connection.admin_only => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the node's last connections are kept for admin requests; retry later",
                ));
            }
            Ok(Principal::Tenant(_)) => {}
            Err(_) => return Ok(()),
        }
        connection.authenticated.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// A connection let in: its shared part, its place in the table, and whether another was shed
/// to make room for it.
pub(super) struct Admitted {
    pub(super) connection: Arc<OpenConnection>,
    pub(super) place: Place,
    pub(super) shed_another: bool,
}

/// An admitted connection's place in the table; dropping it frees the place (a shed
/// connection's place was freed when it was shed).
pub(super) struct Place {
    admission: Arc<Admission>,
    id: u64,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.admission.table().remove(self.id);
    }
}

/// The open connections and the rules that admit new ones; see the module doc.
pub(super) struct Admission {
    limits: AdmissionLimits,
    table: Mutex<Table>,
}

impl Admission {
    pub(super) fn new(limits: AdmissionLimits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            table: Mutex::new(Table::default()),
        })
    }

    /// Admits a connection from `peer` under the rules of the module doc, shedding another if
    /// it must (that one's task is told and closes it).
    pub(super) fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Admitted, Refusal> {
        let address = client_address(peer);
        let mut table = self.table();
        if table.connections_of(address) >= self.limits.per_address_max {
            return Err(Refusal::PerAddress);
        }
        let mut shed_another = false;
        let admin_only = if table.open.len() < self.limits.general() {
            false
        } else if let Some(shed) = table.shed_oldest() {
            shed.shed.notify_one();
            shed_another = true;
            false
        } else if table.open.len() < self.limits.connections_max {
            true
        } else {
            return Err(Refusal::Full);
        };
        let connection = Arc::new(OpenConnection::new(admin_only));
        let id = table.insert(address, connection.clone());
        drop(table);
        Ok(Admitted {
            connection,
            place: Place {
                admission: self.clone(),
                id,
            },
            shed_another,
        })
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        // Every critical section leaves the table whole before it can panic.
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The open connections, oldest first, and how many each client address holds.
#[derive(Default)]
struct Table {
    /// By id: ids grow, so the oldest connection comes first.
    open: BTreeMap<u64, Open>,
    per_address: HashMap<IpAddr, usize>,
    next_id: u64,
}

struct Open {
    address: IpAddr,
    connection: Arc<OpenConnection>,
}

impl Table {
    fn connections_of(&self, address: IpAddr) -> usize {
        self.per_address.get(&address).copied().unwrap_or(0)
    }

    fn insert(&mut self, address: IpAddr, connection: Arc<OpenConnection>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.open.insert(
            id,
            Open {
                address,
                connection,
            },
        );
        *self.per_address.entry(address).or_default() += 1;
        id
    }

    /// Removes connection `id` if it is still open (it is not once shed).
    fn remove(&mut self, id: u64) -> Option<Arc<OpenConnection>> {
        let Open {
            address,
            connection,
        } = self.open.remove(&id)?;
        let count = self.per_address.get_mut(&address);
        debug_assert!(
            count.as_ref().is_some_and(|count| **count > 0),
            "an open connection is counted under its address"
        );
        if let Some(count) = count {
            *count -= 1;
            if *count == 0 {
                self.per_address.remove(&address);
            }
        }
        Some(connection)
    }

    /// Removes and returns the connection to shed: the oldest not busy that never sent a valid
    /// token, or else the oldest not busy.
    fn shed_oldest(&mut self) -> Option<Arc<OpenConnection>> {
        let mut oldest_authenticated = None;
        let mut chosen = None;
        for (id, open) in self.open.iter().take(SHED_CANDIDATES_MAX) {
            if open.connection.activity.is_busy() {
                continue;
            }
            if !open.connection.is_authenticated() {
                chosen = Some(*id);
                break;
            }
            oldest_authenticated.get_or_insert(*id);
        }
        self.remove(chosen.or(oldest_authenticated)?)
    }
}

/// The address a client's connections are counted under: an IPv4 address as it is (also when
/// it arrives mapped into IPv6), an IPv6 address by its /64.
fn client_address(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let host_bits = u128::BITS - IPV6_CLIENT_PREFIX_BITS;
                IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() >> host_bits << host_bits))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future as _;

    fn admission(
        connections_max: usize,
        per_address_max: usize,
        admin_reserved: usize,
    ) -> Arc<Admission> {
        Admission::new(AdmissionLimits {
            connections_max,
            per_address_max,
            admin_reserved,
        })
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// Whether `connection` was told it is shed (the one time: the task takes the notice).
    fn was_shed(connection: &OpenConnection) -> bool {
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        std::pin::pin!(connection.shed())
            .poll(&mut context)
            .is_ready()
    }

    #[test]
    fn an_address_past_its_cap_is_refused_and_others_are_not() {
        let admission = admission(100, 2, 0);
        let first = admission.admit(ip("10.0.0.1")).unwrap();
        let _second = admission.admit(ip("10.0.0.1")).unwrap();
        assert_eq!(
            admission.admit(ip("10.0.0.1")).err(),
            Some(Refusal::PerAddress)
        );
        assert!(admission.admit(ip("10.0.0.2")).is_ok());
        drop(first);
        assert!(
            admission.admit(ip("10.0.0.1")).is_ok(),
            "a closed connection frees its place"
        );
    }

    #[test]
    fn an_ipv6_client_counts_by_its_slash_64_and_a_mapped_ipv4_as_ipv4() {
        let admission = admission(100, 1, 0);
        let _one = admission.admit(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(
            admission.admit(ip("2001:db8:1:2:ffff::9")).err(),
            Some(Refusal::PerAddress)
        );
        assert!(admission.admit(ip("2001:db8:1:3::1")).is_ok());
        let _v4 = admission.admit(ip("192.0.2.7")).unwrap();
        assert_eq!(
            admission.admit(ip("::ffff:192.0.2.7")).err(),
            Some(Refusal::PerAddress)
        );
    }

    #[test]
    fn a_newcomer_at_the_cap_sheds_the_oldest_unauthenticated_connection_first() {
        let admission = admission(3, 10, 0);
        let authenticated = admission.admit(ip("10.0.0.1")).unwrap();
        ConnectionRef(authenticated.connection.clone())
            .check(&Ok(Principal::Tenant("acme".into())))
            .unwrap();
        let busy = admission.admit(ip("10.0.0.2")).unwrap();
        let _request = busy.connection.activity().request_started();
        let silent = admission.admit(ip("10.0.0.3")).unwrap();
        assert!(!silent.shed_another);

        let newcomer = admission.admit(ip("10.0.0.4")).unwrap();
        assert!(newcomer.shed_another);
        assert!(
            was_shed(&silent.connection),
            "never authenticated: shed first"
        );
        assert!(!was_shed(&authenticated.connection));
        assert!(!was_shed(&busy.connection));

        // The newcomer has sent nothing either, so it goes next, still before the older
        // authenticated connection; then the authenticated one, idle; never the busy one.
        assert!(admission.admit(ip("10.0.0.5")).unwrap().shed_another);
        assert!(was_shed(&newcomer.connection));
        assert!(!was_shed(&authenticated.connection));
    }

    #[test]
    fn an_idle_authenticated_connection_is_shed_when_no_other_can_be() {
        let admission = admission(2, 10, 0);
        let idle = admission.admit(ip("10.0.0.1")).unwrap();
        ConnectionRef(idle.connection.clone())
            .check(&Ok(Principal::Admin))
            .unwrap();
        let busy = admission.admit(ip("10.0.0.2")).unwrap();
        let request = busy.connection.activity().request_started();
        let newcomer = admission.admit(ip("10.0.0.3")).unwrap();
        assert!(newcomer.shed_another);
        assert!(was_shed(&idle.connection));
        assert!(!was_shed(&busy.connection));
        // A shed connection's place is free already; dropping it frees nothing twice.
        drop(idle);
        let _newcomer_request = newcomer.connection.activity().request_started();
        assert_eq!(admission.admit(ip("10.0.0.4")).err(), Some(Refusal::Full));
        drop(request);
        assert!(admission.admit(ip("10.0.0.4")).unwrap().shed_another);
        assert!(
            was_shed(&busy.connection),
            "idle once its request was answered"
        );
    }

    #[test]
    fn with_every_connection_busy_the_reserve_admits_admin_requests_only() {
        let admission = admission(3, 10, 1);
        let mut requests = Vec::new();
        let mut places = Vec::new();
        for last in 1..=2 {
            let admitted = admission.admit(ip(&format!("10.0.0.{last}"))).unwrap();
            requests.push(admitted.connection.activity().request_started());
            places.push(admitted);
        }
        let reserved = admission.admit(ip("10.0.0.3")).unwrap();
        assert!(!reserved.shed_another);
        let reserved = ConnectionRef(reserved.connection.clone());
        let refused = reserved
            .check(&Ok(Principal::Tenant("acme".into())))
            .unwrap_err();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            reserved
                .check(&Err(ApiError::bad_request("x", "y")))
                .is_err()
        );
        assert!(reserved.check(&Ok(Principal::Admin)).is_ok());
        // The reserve is taken; its one connection is idle and is shed for the next.
        let next = admission.admit(ip("10.0.0.4")).unwrap();
        assert!(next.shed_another);
        assert!(was_shed(&reserved.0));
        let _next_request = next.connection.activity().request_started();
        assert_eq!(admission.admit(ip("10.0.0.5")).err(), Some(Refusal::Full));
    }

    #[test]
    fn general_connections_do_not_take_the_reserve() {
        let admission = admission(3, 10, 1);
        let _first = admission.admit(ip("10.0.0.1")).unwrap();
        let _second = admission.admit(ip("10.0.0.2")).unwrap();
        // Two general places taken by connections that can be shed: the third sheds one
        // rather than take the reserve.
        let third = admission.admit(ip("10.0.0.3")).unwrap();
        assert!(third.shed_another);
        assert!(!third.connection.admin_only);
    }
}
