//! The credentials file `tessera up` writes (`.tessera/credentials`, mode 0600) and the client
//! commands read by default: the node's URL, the admin token and the default tenant's token.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where `tessera up` keeps its data, relative to the working directory.
pub const DEV_DATA_DIR: &str = ".tessera";

/// The credentials file's name inside the data directory.
pub const CREDENTIALS_FILE: &str = "credentials";

/// The largest credentials file read, so a stray file cannot exhaust memory.
const CREDENTIALS_BYTES_MAX: u64 = 64 * 1024;

/// What the credentials file holds (TOML).
///
/// ```
/// use tessera_host::cli::Credentials;
/// let credentials = Credentials { url: "http://127.0.0.1:7070".into(), ..Default::default() };
/// let text = toml::to_string(&credentials).unwrap();
/// assert_eq!(toml::from_str::<Credentials>(&text).unwrap(), credentials);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Credentials {
    /// The node's base URL.
    pub url: String,
    /// The admin token.
    pub admin_token: Option<String>,
    /// The default tenant's name.
    pub tenant: Option<String>,
    /// The default tenant's token.
    pub tenant_token: Option<String>,
}

/// The default credentials path: `./.tessera/credentials`.
pub fn default_path() -> PathBuf {
    Path::new(DEV_DATA_DIR).join(CREDENTIALS_FILE)
}

impl Credentials {
    /// Reads a credentials file; `Ok(None)` when there is none.
    pub fn load(path: &Path) -> Result<Option<Credentials>, String> {
        let metadata = match std::fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        if metadata.len() > CREDENTIALS_BYTES_MAX {
            return Err(format!(
                "{} is too large to be a credentials file",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        toml::from_str(&text)
            .map(Some)
            .map_err(|error| format!("{}: {error}", path.display()))
    }

    /// Writes the file readable by its owner only.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let text = toml::to_string(self).map_err(|error| error.to_string())?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|error| format!("cannot create {}: {error}", parent.display()))?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options
            .open(path)
            .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(|error| format!("cannot restrict {}: {error}", path.display()))?;
        }
        file.write_all(text.as_bytes())
            .map_err(|error| format!("cannot write {}: {error}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_credentials_are_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials");
        let credentials = Credentials {
            url: "http://127.0.0.1:1".into(),
            admin_token: Some("a".repeat(32)),
            tenant: Some("default".into()),
            tenant_token: Some("tsr_x".into()),
        };
        credentials.save(&path).unwrap();
        assert_eq!(Credentials::load(&path).unwrap(), Some(credentials));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(Credentials::load(&dir.path().join("none")).unwrap(), None);
    }
}
