//! The cluster's certificates, made in memory: a [`ClusterCa`] (a key and a self-signed CA
//! certificate) and the [`NodeCertificate`]s it issues, each naming its node by
//! `<node id>.tessera` plus `localhost` and `127.0.0.1`. `cert_files` keeps them in a
//! directory; `tls` turns them into rustls configs.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use thiserror::Error;
use time::{Duration, OffsetDateTime};

use super::node_name::{NodeIdError, node_dns_name};

/// How long a cluster CA is valid. Long, because replacing it means reissuing every node.
pub const CA_VALIDITY_DAYS: i64 = 3650;

/// How long a node certificate is valid. Shorter than the CA: a node is reissued more easily.
pub const NODE_CERT_VALIDITY_DAYS: i64 = 825;

/// How far back a new certificate's validity starts, so a peer whose clock is a little behind
/// still accepts it.
const CLOCK_SKEW_ALLOWANCE_DAYS: i64 = 1;

/// The common name of every cluster CA.
const CA_COMMON_NAME: &str = "Tessera cluster CA";

/// Why a certificate or key could not be made, read or written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CertError {
    /// The node id cannot name a node in a certificate.
    #[error(transparent)]
    NodeId(#[from] NodeIdError),
    /// A file that should exist does not.
    #[error("{path} does not exist (create it with `tessera certs`)")]
    Missing {
        /// The missing file.
        path: std::path::PathBuf,
    },
    /// A file that would be created already exists; it is never overwritten.
    #[error("{path} already exists; refusing to overwrite it")]
    AlreadyExists {
        /// The existing file.
        path: std::path::PathBuf,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// A PEM file does not hold what it should (wrong kind, damaged, or not PEM at all).
    #[error("{what} is not a valid PEM {kind}: {detail}")]
    Corrupt {
        /// Which file or input.
        what: String,
        /// What it should hold: "certificate" or "private key".
        kind: &'static str,
        /// What the parser said.
        detail: String,
    },
    /// The CA key does not belong to the CA certificate.
    #[error("the CA key does not match the CA certificate")]
    CaKeyMismatch,
    /// The node certificate does not name the node it is loaded for.
    #[error("the certificate does not name node {node_id:?} ({detail})")]
    WrongNode {
        /// The node the certificate was loaded for.
        node_id: String,
        /// What the check said.
        detail: String,
    },
    /// rustls refused the certificate or key when building a TLS config.
    #[error("cannot build the TLS configuration: {0}")]
    Tls(String),
    /// rcgen could not generate or sign.
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
}

/// A cluster certificate authority: it issues every node's certificate, and every node
/// trusts only it.
///
/// ```
/// use tessera_cluster::ClusterCa;
///
/// let ca = ClusterCa::generate().unwrap();
/// let node = ca.issue_node("node-1").unwrap();
/// assert!(node.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
/// let reloaded = ClusterCa::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
/// assert_eq!(reloaded.cert_pem(), ca.cert_pem());
/// ```
pub struct ClusterCa {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A node's certificate and private key, both PEM.
#[derive(Clone)]
pub struct NodeCertificate {
    /// The node the certificate names.
    pub node_id: String,
    /// The certificate, signed by the cluster CA.
    pub cert_pem: String,
    /// The node's private key (PKCS #8). Keep it secret.
    pub key_pem: String,
}

impl std::fmt::Debug for NodeCertificate {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("NodeCertificate")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl ClusterCa {
    /// A new CA with a fresh ECDSA P-256 key.
    pub fn generate() -> Result<ClusterCa, CertError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, CA_COMMON_NAME);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        set_validity(&mut params, CA_VALIDITY_DAYS);
        let cert = params.self_signed(&key)?;
        Ok(ClusterCa {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// A CA read back from its certificate and key; checks that they belong together.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<ClusterCa, CertError> {
        let cert_der = parse_certificate_pem("the CA certificate", cert_pem)?;
        let key = KeyPair::from_pem(key_pem).map_err(|error| CertError::Corrupt {
            what: "the CA key".into(),
            kind: "private key",
            detail: error.to_string(),
        })?;
        let corrupt = |detail: String| CertError::Corrupt {
            what: "the CA certificate".into(),
            kind: "certificate",
            detail,
        };
        let (_, parsed) = x509_parser::parse_x509_certificate(&cert_der)
            .map_err(|error| corrupt(error.to_string()))?;
        if parsed.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
            return Err(CertError::CaKeyMismatch);
        }
        let issuer =
            Issuer::from_ca_cert_der(&cert_der, key).map_err(|error| corrupt(error.to_string()))?;
        Ok(ClusterCa {
            cert_pem: cert_pem.to_owned(),
            issuer,
        })
    }

    /// The CA certificate, PEM: what every node trusts.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA private key, PEM (PKCS #8). Keep it secret; nodes do not need it.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// A certificate for `node_id` with a fresh key, signed by this CA. It names the node
    /// `<node id>.tessera`, `localhost` and `127.0.0.1`, and serves both ends of a
    /// connection (server and client authentication).
    pub fn issue_node(&self, node_id: &str) -> Result<NodeCertificate, CertError> {
        let names = vec![
            node_dns_name(node_id)?,
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ];
        let mut params = CertificateParams::new(names)?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, node_id);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        set_validity(&mut params, NODE_CERT_VALIDITY_DAYS);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(NodeCertificate {
            node_id: node_id.to_owned(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Validity from a little before now, for `days`, with a random serial number.
fn set_validity(params: &mut CertificateParams, days: i64) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::days(CLOCK_SKEW_ALLOWANCE_DAYS);
    params.not_after = now + Duration::days(days);
    let mut serial: [u8; 16] = rand::random();
    // A positive DER integer: the top bit clear.
    serial[0] &= 0x7f;
    params.serial_number = Some(SerialNumber::from_slice(&serial));
}

/// The first certificate in `pem`, as DER.
pub(crate) fn parse_certificate_pem(
    what: &str,
    pem: &str,
) -> Result<CertificateDer<'static>, CertError> {
    CertificateDer::from_pem_slice(pem.as_bytes()).map_err(|error| CertError::Corrupt {
        what: what.to_owned(),
        kind: "certificate",
        detail: error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reloaded_ca_issues_certificates_it_verifies() {
        let ca = ClusterCa::generate().unwrap();
        let reloaded = ClusterCa::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
        let node = reloaded.issue_node("node-7").unwrap();
        let identity = super::super::tls::TlsIdentity::from_pem(
            "node-7",
            ca.cert_pem(),
            &node.cert_pem,
            &node.key_pem,
        );
        assert!(identity.is_ok(), "{:?}", identity.err());
    }

    #[test]
    fn a_key_from_another_ca_is_refused() {
        let first = ClusterCa::generate().unwrap();
        let second = ClusterCa::generate().unwrap();
        let mixed = ClusterCa::from_pem(first.cert_pem(), &second.key_pem());
        assert!(matches!(mixed, Err(CertError::CaKeyMismatch)));
    }

    #[test]
    fn garbage_is_corrupt_not_a_panic() {
        let ca = ClusterCa::generate().unwrap();
        for (cert, key) in [
            ("not pem", ca.key_pem()),
            (ca.cert_pem(), "not pem".to_owned()),
            (
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                ca.key_pem(),
            ),
        ] {
            assert!(matches!(
                ClusterCa::from_pem(cert, &key),
                Err(CertError::Corrupt { .. })
            ));
        }
    }

    #[test]
    fn an_invalid_node_id_gets_no_certificate() {
        let ca = ClusterCa::generate().unwrap();
        assert!(matches!(ca.issue_node("Bad_Id"), Err(CertError::NodeId(_))));
    }
}
