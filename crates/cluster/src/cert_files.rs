//! The certificate directory: `ca.pem` and `ca.key` for the cluster CA, `<node>.pem` and
//! `<node>.key` for each node. Key files are created with mode 0600 on unix, and no file is
//! ever overwritten. A node needs only `ca.pem` and its own pair ([`load_identity`]); the CA
//! key stays wherever certificates are issued.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::certs::{CertError, ClusterCa, NodeCertificate};
use super::node_name::validate_node_id;
use super::tls::TlsIdentity;

/// The CA certificate's file name.
pub const CA_CERT_FILE: &str = "ca.pem";

/// The CA key's file name.
pub const CA_KEY_FILE: &str = "ca.key";

/// The paths of one node's certificate and key in `directory`.
///
/// ```
/// use std::path::Path;
/// use tessera_cluster::node_cert_paths;
///
/// let (cert, key) = node_cert_paths(Path::new("/etc/tessera/certs"), "node-1");
/// assert_eq!(cert, Path::new("/etc/tessera/certs/node-1.pem"));
/// assert_eq!(key, Path::new("/etc/tessera/certs/node-1.key"));
/// ```
pub fn node_cert_paths(directory: &Path, node_id: &str) -> (PathBuf, PathBuf) {
    (
        directory.join(format!("{node_id}.pem")),
        directory.join(format!("{node_id}.key")),
    )
}

/// Creates a new cluster CA in `directory` (which is created if needed): `ca.pem` and
/// `ca.key`. Fails if either file exists.
///
/// ```
/// let directory = tempfile::tempdir().unwrap();
/// tessera_cluster::create_ca(directory.path()).unwrap();
/// assert!(directory.path().join("ca.key").exists());
/// assert!(tessera_cluster::create_ca(directory.path()).is_err());
/// ```
pub fn create_ca(directory: &Path) -> Result<ClusterCa, CertError> {
    create_directory(directory)?;
    let cert_path = directory.join(CA_CERT_FILE);
    let key_path = directory.join(CA_KEY_FILE);
    refuse_existing(&cert_path)?;
    refuse_existing(&key_path)?;
    let ca = ClusterCa::generate()?;
    write_new(&key_path, ca.key_pem().as_bytes(), true)?;
    write_new(&cert_path, ca.cert_pem().as_bytes(), false)?;
    Ok(ca)
}

/// Reads the cluster CA (certificate and key) from `directory`.
///
/// ```
/// let directory = tempfile::tempdir().unwrap();
/// let created = tessera_cluster::create_ca(directory.path()).unwrap();
/// let loaded = tessera_cluster::load_ca(directory.path()).unwrap();
/// assert_eq!(loaded.cert_pem(), created.cert_pem());
/// ```
pub fn load_ca(directory: &Path) -> Result<ClusterCa, CertError> {
    let cert_pem = read(&directory.join(CA_CERT_FILE))?;
    let key_pem = read(&directory.join(CA_KEY_FILE))?;
    ClusterCa::from_pem(&cert_pem, &key_pem)
}

/// Issues a certificate for `node_id` with the CA in `directory` and writes `<node>.pem` and
/// `<node>.key` there. Fails if either file exists.
///
/// ```
/// let directory = tempfile::tempdir().unwrap();
/// tessera_cluster::create_ca(directory.path()).unwrap();
/// tessera_cluster::issue_node_cert(directory.path(), "node-1").unwrap();
/// assert!(directory.path().join("node-1.pem").exists());
/// ```
pub fn issue_node_cert(directory: &Path, node_id: &str) -> Result<NodeCertificate, CertError> {
    validate_node_id(node_id)?;
    let ca = load_ca(directory)?;
    write_node_cert(directory, &ca, node_id)
}

/// A ready development cluster in `directory`: the CA (created unless it is there) and a
/// certificate for each node that has none yet. Running it again with more nodes adds
/// their certificates and keeps the rest.
///
/// ```
/// let directory = tempfile::tempdir().unwrap();
/// tessera_cluster::create_dev_cluster(directory.path(), &["node-1", "node-2"]).unwrap();
/// tessera_cluster::create_dev_cluster(directory.path(), &["node-1", "node-3"]).unwrap();
/// let identity = tessera_cluster::load_identity(directory.path(), "node-3").unwrap();
/// assert_eq!(identity.node_id(), "node-3");
/// ```
pub fn create_dev_cluster(directory: &Path, node_ids: &[&str]) -> Result<(), CertError> {
    for node_id in node_ids {
        validate_node_id(node_id)?;
    }
    let ca = if directory.join(CA_CERT_FILE).exists() {
        load_ca(directory)?
    } else {
        create_ca(directory)?
    };
    for node_id in node_ids {
        let (cert_path, key_path) = node_cert_paths(directory, node_id);
        if cert_path.exists() && key_path.exists() {
            continue;
        }
        write_node_cert(directory, &ca, node_id)?;
    }
    Ok(())
}

/// The TLS identity of `node_id`: `ca.pem`, `<node>.pem` and `<node>.key` from `directory`.
/// Checks that the certificate is signed by the CA and names the node.
///
/// ```
/// let directory = tempfile::tempdir().unwrap();
/// tessera_cluster::create_dev_cluster(directory.path(), &["node-1"]).unwrap();
/// assert!(tessera_cluster::load_identity(directory.path(), "node-1").is_ok());
/// assert!(tessera_cluster::load_identity(directory.path(), "node-2").is_err());
/// ```
pub fn load_identity(directory: &Path, node_id: &str) -> Result<TlsIdentity, CertError> {
    validate_node_id(node_id)?;
    let (cert_path, key_path) = node_cert_paths(directory, node_id);
    let ca_pem = read(&directory.join(CA_CERT_FILE))?;
    let cert_pem = read(&cert_path)?;
    let key_pem = read(&key_path)?;
    TlsIdentity::from_pem(node_id, &ca_pem, &cert_pem, &key_pem)
}

fn write_node_cert(
    directory: &Path,
    ca: &ClusterCa,
    node_id: &str,
) -> Result<NodeCertificate, CertError> {
    let (cert_path, key_path) = node_cert_paths(directory, node_id);
    refuse_existing(&cert_path)?;
    refuse_existing(&key_path)?;
    let node = ca.issue_node(node_id)?;
    write_new(&key_path, node.key_pem.as_bytes(), true)?;
    write_new(&cert_path, node.cert_pem.as_bytes(), false)?;
    Ok(node)
}

fn create_directory(directory: &Path) -> Result<(), CertError> {
    std::fs::create_dir_all(directory).map_err(|source| CertError::Io {
        path: directory.to_owned(),
        source,
    })
}

fn refuse_existing(path: &Path) -> Result<(), CertError> {
    if path.exists() {
        return Err(CertError::AlreadyExists {
            path: path.to_owned(),
        });
    }
    Ok(())
}

fn read(path: &Path) -> Result<String, CertError> {
    std::fs::read_to_string(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => CertError::Missing {
            path: path.to_owned(),
        },
        _ => CertError::Io {
            path: path.to_owned(),
            source,
        },
    })
}

/// Writes a file that must not exist yet; a secret one is readable by its owner only.
fn write_new(path: &Path, contents: &[u8], secret: bool) -> Result<(), CertError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    let io_error = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::AlreadyExists => CertError::AlreadyExists {
            path: path.to_owned(),
        },
        _ => CertError::Io {
            path: path.to_owned(),
            source,
        },
    };
    let mut file = options.open(path).map_err(io_error)?;
    file.write_all(contents).map_err(io_error)?;
    file.sync_all().map_err(io_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn key_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let directory = tempfile::tempdir().unwrap();
        create_dev_cluster(directory.path(), &["node-1"]).unwrap();
        for file in [CA_KEY_FILE, "node-1.key"] {
            let mode = std::fs::metadata(directory.path().join(file))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{file}");
        }
    }

    #[test]
    fn missing_files_are_named() {
        let directory = tempfile::tempdir().unwrap();
        let error = load_identity(directory.path(), "node-1").unwrap_err();
        assert!(
            matches!(&error, CertError::Missing { path } if path.ends_with(CA_CERT_FILE)),
            "{error}"
        );
        create_dev_cluster(directory.path(), &["node-1"]).unwrap();
        std::fs::remove_file(directory.path().join("node-1.key")).unwrap();
        let error = load_identity(directory.path(), "node-1").unwrap_err();
        assert!(error.to_string().contains("node-1.key"), "{error}");
    }

    #[test]
    fn a_corrupt_file_is_reported() {
        let directory = tempfile::tempdir().unwrap();
        create_dev_cluster(directory.path(), &["node-1"]).unwrap();
        std::fs::remove_file(directory.path().join("node-1.pem")).unwrap();
        std::fs::write(directory.path().join("node-1.pem"), "garbage").unwrap();
        let error = load_identity(directory.path(), "node-1").unwrap_err();
        assert!(matches!(error, CertError::Corrupt { .. }), "{error}");
    }

    #[test]
    fn a_certificate_for_another_node_is_refused() {
        let directory = tempfile::tempdir().unwrap();
        create_dev_cluster(directory.path(), &["node-1", "node-2"]).unwrap();
        std::fs::copy(
            directory.path().join("node-2.pem"),
            directory.path().join("node-1.pem"),
        )
        .unwrap();
        std::fs::copy(
            directory.path().join("node-2.key"),
            directory.path().join("node-1.key"),
        )
        .unwrap();
        let error = load_identity(directory.path(), "node-1").unwrap_err();
        assert!(matches!(error, CertError::WrongNode { .. }), "{error}");
    }
}
