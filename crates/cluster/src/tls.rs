//! Mutual TLS between nodes. A [`TlsIdentity`] holds the two rustls configs a node needs: a
//! server config that requires a client certificate signed by the cluster CA, and a client
//! config that trusts only the cluster CA and presents the node's own certificate. Both sides
//! of every connection are authenticated; there is no plaintext mode. Which node a
//! certificate names is checked by `certificate_names_node`.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::certs::{CertError, parse_certificate_pem};
use super::node_name::node_dns_name;
use tessera_contract::NodeId;

/// A node's TLS identity: who it is, and the configs it accepts and dials with. Cheap to
/// clone.
///
/// ```
/// use tessera_cluster::{ClusterCa, TlsIdentity};
///
/// let ca = ClusterCa::generate().unwrap();
/// let node = ca.issue_node("node-1").unwrap();
/// let identity = TlsIdentity::from_pem("node-1", ca.cert_pem(), &node.cert_pem, &node.key_pem)
///     .unwrap();
/// assert_eq!(identity.node_id(), "node-1");
/// // A certificate is only good for the node it names.
/// assert!(TlsIdentity::from_pem("node-2", ca.cert_pem(), &node.cert_pem, &node.key_pem).is_err());
/// ```
#[derive(Clone)]
pub struct TlsIdentity {
    node_id: NodeId,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("TlsIdentity")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl TlsIdentity {
    /// The identity of `node_id` from PEM text: the cluster CA certificate, the node's
    /// certificate and its private key. Fails unless the certificate is signed by the CA,
    /// names the node and matches the key.
    pub fn from_pem(
        node_id: &str,
        ca_cert_pem: &str,
        cert_pem: &str,
        key_pem: &str,
    ) -> Result<TlsIdentity, CertError> {
        let ca = parse_certificate_pem("the CA certificate", ca_cert_pem)?;
        let cert = parse_certificate_pem("the node certificate", cert_pem)?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|error| {
            CertError::Corrupt {
                what: "the node key".into(),
                kind: "private key",
                detail: error.to_string(),
            }
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots.add(ca).map_err(|error| CertError::Corrupt {
            what: "the CA certificate".into(),
            kind: "certificate",
            detail: error.to_string(),
        })?;
        let roots = Arc::new(roots);
        check_issued_to(node_id, &cert, &roots, &provider)?;
        let server = server_config(&roots, &provider, &cert, &key)?;
        let client = client_config(&roots, &provider, &cert, key)?;
        Ok(TlsIdentity {
            node_id: node_id.to_owned(),
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }

    /// The node this identity names.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    pub(crate) fn server_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.server)
    }

    pub(crate) fn client_config(&self) -> Arc<ClientConfig> {
        Arc::clone(&self.client)
    }
}

/// Whether the (already chain-verified) certificate `cert` names `node_id`.
pub(crate) fn certificate_names_node(cert: &CertificateDer<'_>, node_id: &str) -> bool {
    let Ok(name) = node_dns_name(node_id) else {
        return false;
    };
    let Ok(server_name) = ServerName::try_from(name) else {
        return false;
    };
    let Ok(end_entity) = webpki::EndEntityCert::try_from(cert) else {
        return false;
    };
    end_entity
        .verify_is_valid_for_subject_name(&server_name)
        .is_ok()
}

/// The name a dialer expects the acceptor's certificate to carry.
pub(crate) fn server_name_of(node_id: &str) -> Option<ServerName<'static>> {
    let name = node_dns_name(node_id).ok()?;
    ServerName::try_from(name).ok()
}

/// Fails unless `cert` chains to the CA and names `node_id`, so a misplaced file is caught
/// when it is loaded rather than at the first connection.
fn check_issued_to(
    node_id: &str,
    cert: &CertificateDer<'static>,
    roots: &Arc<RootCertStore>,
    provider: &Arc<CryptoProvider>,
) -> Result<(), CertError> {
    let wrong_node = |detail: String| CertError::WrongNode {
        node_id: node_id.to_owned(),
        detail,
    };
    let server_name = ServerName::try_from(node_dns_name(node_id)?)
        .map_err(|error| wrong_node(error.to_string()))?;
    let verifier =
        WebPkiServerVerifier::builder_with_provider(Arc::clone(roots), Arc::clone(provider))
            .build()
            .map_err(|error| wrong_node(error.to_string()))?;
    verifier
        .verify_server_cert(cert, &[], &server_name, &[], UnixTime::now())
        .map_err(|error| wrong_node(error.to_string()))?;
    Ok(())
}

fn server_config(
    roots: &Arc<RootCertStore>,
    provider: &Arc<CryptoProvider>,
    cert: &CertificateDer<'static>,
    key: &PrivateKeyDer<'static>,
) -> Result<ServerConfig, CertError> {
    let client_verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::clone(roots), Arc::clone(provider))
            .build()
            .map_err(|error| CertError::Tls(error.to_string()))?;
    ServerConfig::builder_with_provider(Arc::clone(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|error| CertError::Tls(error.to_string()))?
        .with_client_cert_verifier(client_verifier)
        .with_single_cert(vec![cert.clone()], key.clone_key())
        .map_err(|error| CertError::Tls(error.to_string()))
}

fn client_config(
    roots: &Arc<RootCertStore>,
    provider: &Arc<CryptoProvider>,
    cert: &CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
) -> Result<ClientConfig, CertError> {
    ClientConfig::builder_with_provider(Arc::clone(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|error| CertError::Tls(error.to_string()))?
        .with_root_certificates(Arc::clone(roots))
        .with_client_auth_cert(vec![cert.clone()], key)
        .map_err(|error| CertError::Tls(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClusterCa;

    #[test]
    fn a_certificate_names_only_its_node() {
        let ca = ClusterCa::generate().unwrap();
        let node = ca.issue_node("node-1").unwrap();
        let cert = parse_certificate_pem("test", &node.cert_pem).unwrap();
        assert!(certificate_names_node(&cert, "node-1"));
        assert!(!certificate_names_node(&cert, "node-2"));
        assert!(!certificate_names_node(&cert, "localhost"));
        assert!(!certificate_names_node(&cert, "Node-1"));
    }

    #[test]
    fn a_certificate_from_another_ca_is_refused() {
        let ca = ClusterCa::generate().unwrap();
        let other = ClusterCa::generate().unwrap();
        let node = other.issue_node("node-1").unwrap();
        let identity =
            TlsIdentity::from_pem("node-1", ca.cert_pem(), &node.cert_pem, &node.key_pem);
        assert!(matches!(identity, Err(CertError::WrongNode { .. })));
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let ca = ClusterCa::generate().unwrap();
        let node = ca.issue_node("node-1").unwrap();
        let other = ca.issue_node("node-1").unwrap();
        let identity =
            TlsIdentity::from_pem("node-1", ca.cert_pem(), &node.cert_pem, &other.key_pem);
        assert!(identity.is_err());
    }
}
