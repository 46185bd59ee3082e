//! Where a peer is dialed: [`PeerAddress`], `host:port` with the host an IP address or a DNS
//! name. A name is resolved again at every dial, never once for good, so a peer whose name
//! moves to another address (a Kubernetes pod restarted with a new IP behind its stable
//! StatefulSet name) is found at the new one from the next redial on.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The longest host name accepted (DNS's limit on a name).
pub const PEER_HOST_BYTES_MAX: usize = 253;

/// A peer's address as `host:port`: a socket address (`10.0.0.2:7171`, `[::1]:7171`) or a DNS
/// name and a port (`tessera-1.tessera.prod.svc.cluster.local:7171`), resolved at each dial
/// within the handshake timeout.
///
/// ```
/// use tessera_cluster::PeerAddress;
/// let named: PeerAddress = "tessera-1.tessera:7171".parse().unwrap();
/// assert_eq!(named.to_string(), "tessera-1.tessera:7171");
/// let literal = PeerAddress::from(std::net::SocketAddr::from(([10, 0, 0, 2], 7171)));
/// assert_eq!(literal.to_string(), "10.0.0.2:7171");
/// assert!("no-port".parse::<PeerAddress>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PeerAddress(String);

/// Why a text is not a peer address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a peer address (host:port, the host an IP address or a DNS name): {why}")]
pub struct PeerAddressError {
    text: String,
    why: &'static str,
}

impl PeerAddress {
    /// The address as `host:port`, as the dialer resolves it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for PeerAddress {
    type Err = PeerAddressError;

    fn from_str(text: &str) -> Result<PeerAddress, PeerAddressError> {
        if text.parse::<SocketAddr>().is_ok() {
            return Ok(PeerAddress(text.to_owned()));
        }
        let refuse = |why| PeerAddressError {
            text: text.to_owned(),
            why,
        };
        let (host, port) = text.rsplit_once(':').ok_or_else(|| refuse("no :port"))?;
        match port.parse::<u16>() {
            Ok(0) | Err(_) => return Err(refuse("the port is not 1 to 65535")),
            Ok(_) => {}
        }
        if host.is_empty() || host.len() > PEER_HOST_BYTES_MAX {
            return Err(refuse("the host is empty or longer than 253 bytes"));
        }
        let label_ok = |label: &str| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
        };
        if !host.split('.').all(label_ok) {
            return Err(refuse("the host is neither an IP address nor a DNS name"));
        }
        Ok(PeerAddress(text.to_owned()))
    }
}

impl TryFrom<String> for PeerAddress {
    type Error = PeerAddressError;

    fn try_from(text: String) -> Result<PeerAddress, PeerAddressError> {
        text.parse()
    }
}

impl From<PeerAddress> for String {
    fn from(address: PeerAddress) -> String {
        address.0
    }
}

impl From<SocketAddr> for PeerAddress {
    fn from(address: SocketAddr) -> PeerAddress {
        PeerAddress(address.to_string())
    }
}

impl fmt::Display for PeerAddress {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_socket_addresses_parse_and_the_rest_is_refused() {
        for good in [
            "127.0.0.1:7171",
            "[::1]:7171",
            "localhost:1",
            "tessera-0.tessera.prod.svc.cluster.local:7171",
        ] {
            assert_eq!(good.parse::<PeerAddress>().unwrap().as_str(), good);
        }
        for bad in [
            "",
            "localhost",
            "localhost:0",
            "localhost:65536",
            ":7171",
            "-bad.host:7171",
            "a..b:7171",
            "a b:7171",
            "http://x:7171",
        ] {
            assert!(bad.parse::<PeerAddress>().is_err(), "{bad:?} is refused");
        }
        let long = format!("{}:1", "a".repeat(PEER_HOST_BYTES_MAX + 1));
        assert!(
            long.parse::<PeerAddress>().is_err(),
            "a name over 253 bytes"
        );
    }
}
