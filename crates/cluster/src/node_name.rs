//! Node ids as certificate names. A node's certificate names it by the DNS name
//! `<node id>.tessera`, so a node id must be one lowercase DNS label; [`validate_node_id`]
//! checks that once, where an id enters the cluster layer, and [`node_dns_name`] builds the
//! name that TLS checks on both sides of a connection.

use thiserror::Error;

/// The DNS zone every node name lives in. Keeps node names apart from `localhost` and from
/// any real host name that a certificate also lists.
pub const NODE_DNS_ZONE: &str = "tessera";

/// The longest node id: one DNS label.
pub const NODE_ID_BYTES_MAX: usize = 63;

/// Why a string cannot be a node id.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum NodeIdError {
    /// The id is empty.
    #[error("a node id must not be empty")]
    Empty,
    /// The id is longer than one DNS label.
    #[error("node id {id:?} is longer than {NODE_ID_BYTES_MAX} bytes")]
    TooLong {
        /// The id.
        id: String,
    },
    /// The id has a character a DNS label cannot hold, an upper-case letter (DNS names
    /// ignore case, node ids do not), or a leading or trailing `-`.
    #[error("node id {id:?} must be lowercase letters, digits and inner '-' (one DNS label)")]
    NotADnsLabel {
        /// The id.
        id: String,
    },
}

/// Checks that `node_id` is one lowercase DNS label, so it can name a node in a certificate.
///
/// ```
/// use tessera_cluster::validate_node_id;
///
/// assert!(validate_node_id("node-1").is_ok());
/// assert!(validate_node_id("Node-1").is_err());
/// assert!(validate_node_id("-node").is_err());
/// ```
pub fn validate_node_id(node_id: &str) -> Result<(), NodeIdError> {
    if node_id.is_empty() {
        return Err(NodeIdError::Empty);
    }
    if node_id.len() > NODE_ID_BYTES_MAX {
        return Err(NodeIdError::TooLong {
            id: node_id.to_owned(),
        });
    }
    let allowed = node_id
        .bytes()
        .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-');
    if !allowed || node_id.starts_with('-') || node_id.ends_with('-') {
        return Err(NodeIdError::NotADnsLabel {
            id: node_id.to_owned(),
        });
    }
    Ok(())
}

/// The DNS name a node's certificate carries: `<node id>.tessera`.
///
/// ```
/// use tessera_cluster::node_dns_name;
///
/// assert_eq!(node_dns_name("node-1").unwrap(), "node-1.tessera");
/// ```
pub fn node_dns_name(node_id: &str) -> Result<String, NodeIdError> {
    validate_node_id(node_id)?;
    Ok(format!("{node_id}.{NODE_DNS_ZONE}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_dns_labels() {
        for id in ["a", "node-1", "n0", &"x".repeat(NODE_ID_BYTES_MAX)] {
            assert_eq!(validate_node_id(id), Ok(()), "{id}");
        }
    }

    #[test]
    fn rejects_what_is_not_one_lowercase_label() {
        assert_eq!(validate_node_id(""), Err(NodeIdError::Empty));
        let too_long = "x".repeat(NODE_ID_BYTES_MAX + 1);
        assert!(matches!(
            validate_node_id(&too_long),
            Err(NodeIdError::TooLong { .. })
        ));
        for id in ["Node", "a.b", "-a", "a-", "a_b", "é", "a b", "localhost\0"] {
            assert!(
                matches!(validate_node_id(id), Err(NodeIdError::NotADnsLabel { .. })),
                "{id}"
            );
        }
    }
}
