//! A TCP forwarder for tests that cut links between node processes: a [`Proxy`] listens on
//! a loopback address of its own and forwards every connection to one target, until it is
//! [cut](Proxy::cut) — its connections closed and new ones refused (accepted and closed at
//! once) — or cut only for the connections one process dialed ([`Proxy::cut_from`]), and
//! [healed](Proxy::heal). A connection's dialing process is found by its port through
//! Linux's `/proc` (the socket table and the process's descriptors): nodes on one loopback
//! cannot be told apart by their addresses. One thread accepts; two copy each connection's
//! bytes, one per direction.

use crate::processes::free_address;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Connections one proxy carries at once: a node keeps one to each peer, so a few dozen
/// cover every redial; more are refused, so a test that leaks connections fails instead of
/// exhausting threads.
pub const PROXY_CONNECTIONS_MAX: usize = 64;

/// Bytes copied per read: a buffer per direction of each connection.
const COPY_BUFFER_BYTES: usize = 16 * 1024;

/// How long dialing the target may take before the connection is given up.
const TARGET_DIAL_TIMEOUT: Duration = Duration::from_secs(2);

/// Which connections the proxy refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    /// None: it forwards everything.
    Healed,
    /// Every connection.
    All,
    /// Those dialed by the process with this id.
    From(u32),
}

/// One forwarded connection: the dialer's side and the target's.
struct Link {
    id: u64,
    /// The dialer's port (on loopback).
    client_port: u16,
    client: TcpStream,
    target: TcpStream,
}

impl Link {
    fn close(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.target.shutdown(Shutdown::Both);
    }
}

struct State {
    cut: Cut,
    links: Vec<Link>,
    next_id: u64,
}

struct Shared {
    listen: SocketAddr,
    target: SocketAddr,
    state: Mutex<State>,
    stopped: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether `cut` refuses the connection from `client_port`.
    fn refuses(&self, cut: Cut, client_port: u16) -> bool {
        match cut {
            Cut::Healed => false,
            Cut::All => true,
            Cut::From(pid) => dialed_by(pid, client_port, self.listen.port()),
        }
    }
}

/// A forwarder from its own loopback address to a target; stops when dropped.
pub struct Proxy {
    shared: Arc<Shared>,
}

impl Proxy {
    /// Forwards connections to `target` from a free loopback address ([`Proxy::address`]).
    ///
    /// ```no_run
    /// use tessera_tests::proxy::Proxy;
    /// let node: std::net::SocketAddr = "127.0.0.1:7171".parse().unwrap();
    /// let proxy = Proxy::start(node);
    /// // Peers dial `proxy.address()` instead of the node's own address.
    /// proxy.cut();
    /// proxy.heal();
    /// ```
    pub fn start(target: SocketAddr) -> Proxy {
        let listen = free_address();
        let listener = TcpListener::bind(listen).expect("the proxy's address");
        let shared = Arc::new(Shared {
            listen,
            target,
            state: Mutex::new(State {
                cut: Cut::Healed,
                links: Vec::new(),
                next_id: 0,
            }),
            stopped: AtomicBool::new(false),
        });
        let accepting = shared.clone();
        std::thread::spawn(move || accept(&accepting, &listener));
        Proxy { shared }
    }

    /// The address to dial instead of the target.
    pub fn address(&self) -> SocketAddr {
        self.shared.listen
    }

    /// Closes every connection and refuses new ones until [`Proxy::heal`].
    pub fn cut(&self) {
        self.cut_where(Cut::All);
    }

    /// Closes the connections process `pid` dialed and refuses its new ones until
    /// [`Proxy::heal`]; other processes' connections go on.
    pub fn cut_from(&self, pid: u32) {
        self.cut_where(Cut::From(pid));
    }

    /// Forwards new connections again (the ones a cut closed stay closed: dialers redial).
    pub fn heal(&self) {
        self.shared.lock().cut = Cut::Healed;
    }

    fn cut_where(&self, cut: Cut) {
        let mut state = self.shared.lock();
        state.cut = cut;
        let (refused, kept): (Vec<Link>, Vec<Link>) = std::mem::take(&mut state.links)
            .into_iter()
            .partition(|link| self.shared.refuses(cut, link.client_port));
        state.links = kept;
        refused.iter().for_each(Link::close);
    }

    /// Connections carried now.
    pub fn connections(&self) -> usize {
        self.shared.lock().links.len()
    }

    /// Connections carried now that process `pid` dialed.
    pub fn connections_from(&self, pid: u32) -> usize {
        let listen = self.shared.listen.port();
        let state = self.shared.lock();
        state
            .links
            .iter()
            .filter(|link| dialed_by(pid, link.client_port, listen))
            .count()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::Release);
        std::mem::take(&mut self.shared.lock().links)
            .iter()
            .for_each(Link::close);
        // Wakes the accepting thread, which sees `stopped` and ends.
        let _ = TcpStream::connect_timeout(&self.shared.listen, TARGET_DIAL_TIMEOUT);
    }
}

/// Accepts until the proxy stops; forwards what the cut and the bound allow.
fn accept(shared: &Arc<Shared>, listener: &TcpListener) {
    for client in listener.incoming() {
        if shared.stopped.load(Ordering::Acquire) {
            return;
        }
        let Ok(client) = client else { continue };
        let Ok(client_port) = client.peer_addr().map(|address| address.port()) else {
            continue;
        };
        let cut = shared.lock().cut;
        if shared.refuses(cut, client_port) {
            continue; // dropped: closed at once
        }
        let Ok(target) = TcpStream::connect_timeout(&shared.target, TARGET_DIAL_TIMEOUT) else {
            continue;
        };
        let (Ok(client_copy), Ok(target_copy)) = (client.try_clone(), target.try_clone()) else {
            continue;
        };
        let id = {
            let mut state = shared.lock();
            // A cut that came while the target was dialed applies too.
            if state.links.len() >= PROXY_CONNECTIONS_MAX || state.cut != cut {
                continue;
            }
            state.next_id += 1;
            let id = state.next_id;
            state.links.push(Link {
                id,
                client_port,
                client: client_copy,
                target: target_copy,
            });
            id
        };
        for (from, to) in [(&client, &target), (&target, &client)] {
            let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                forget(shared, id);
                break;
            };
            let shared = shared.clone();
            std::thread::spawn(move || {
                copy(from, to);
                forget(&shared, id);
            });
        }
    }
}

/// Copies `from` into `to` until either side closes, then closes both.
fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = vec![0; COPY_BUFFER_BYTES];
    while let Ok(read) = from.read(&mut buffer) {
        if read == 0 || to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Closes connection `id` and stops counting it.
fn forget(shared: &Shared, id: u64) {
    let mut state = shared.lock();
    if let Some(position) = state.links.iter().position(|link| link.id == id) {
        state.links.swap_remove(position).close();
    }
}

/// Whether process `pid` holds the loopback socket from `client_port` to `server_port`:
/// its inode from the socket table (`/proc/net/tcp`), found among the process's descriptors.
fn dialed_by(pid: u32, client_port: u16, server_port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let port_of = |address: &str| {
        let port = address.rsplit(':').next()?;
        u16::from_str_radix(port, 16).ok()
    };
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local = port_of(fields.get(1)?)?;
            let remote = port_of(fields.get(2)?)?;
            let inode = fields.get(9)?;
            (local == client_port && remote == server_port).then(|| format!("socket:[{inode}]"))
        })
        .collect();
    if inodes.is_empty() {
        return false;
    }
    let Ok(descriptors) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    descriptors.flatten().any(|descriptor| {
        std::fs::read_link(descriptor.path()).is_ok_and(|target| {
            inodes
                .iter()
                .any(|inode| target.as_os_str() == inode.as_str())
        })
    })
}
