//! The test proxy itself (`tessera_tests::proxy`): it forwards both ways; a cut closes its
//! connections and refuses new ones until healed; and a cut of one process's connections
//! closes only those that process dialed, which the cut-link test relies on to isolate a node
//! whose peers share its proxies.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;
use tessera_tests::proxy::Proxy;

/// A server that echoes every connection's bytes back.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buffer = [0; 256];
                while let Ok(read) = stream.read(&mut buffer) {
                    if read == 0 || stream.write_all(&buffer[..read]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
}

/// A connection through `proxy`.
fn dial(proxy: &Proxy) -> TcpStream {
    let stream = TcpStream::connect(proxy.address()).expect("the proxy accepts");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    stream
}

/// Whether `stream` still carries bytes both ways.
fn echoes(stream: &mut TcpStream) -> bool {
    if stream.write_all(b"ping").is_err() {
        return false;
    }
    let mut answer = [0; 4];
    stream.read_exact(&mut answer).is_ok() && &answer == b"ping"
}

#[test]
fn a_cut_closes_the_links_it_names_and_refuses_new_ones_until_healed() {
    let proxy = Proxy::start(echo_server());
    let mut first = dial(&proxy);
    assert!(echoes(&mut first), "forwarded both ways");

    // Another process's cut leaves this one's connection alone.
    let mut other = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("another process");
    proxy.cut_from(other.id());
    assert!(
        echoes(&mut first),
        "another process's cut spares this connection"
    );
    assert_eq!(proxy.connections_from(std::process::id()), 1);
    proxy.heal();
    let _ = other.kill();
    let _ = other.wait();

    // Its own cut closes it, and refuses it again.
    proxy.cut_from(std::process::id());
    assert!(!echoes(&mut first), "this process's connection closed");
    assert!(!echoes(&mut dial(&proxy)), "a new one refused");
    assert_eq!(proxy.connections(), 0);
    proxy.heal();
    let mut second = dial(&proxy);
    assert!(echoes(&mut second), "healed: forwarded again");

    // A whole cut closes everything.
    proxy.cut();
    assert!(!echoes(&mut second), "closed by the cut");
    assert!(!echoes(&mut dial(&proxy)), "refused while cut");
    proxy.heal();
    assert!(echoes(&mut dial(&proxy)), "healed again");
}
