//! The user's CLI config (`$XDG_CONFIG_HOME/tessera/config.toml`, else
//! `~/.config/tessera/config.toml`): named profiles, each a node's URL and tokens, that
//! `tessera login` writes, so the client commands work from any directory. The directory is
//! kept mode 0700 and the file 0600 (it holds tokens), and the file is replaced whole, never
//! left half-written. [`stored_credentials`] decides which stored credentials a command uses
//! (the precedence is in `docs/cli.md`).

use super::credentials::{self, Credentials};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The profile used when none is named.
pub const DEFAULT_PROFILE: &str = "default";

/// The largest config file read, so a stray file cannot exhaust memory.
const CONFIG_BYTES_MAX: u64 = 1024 * 1024;

/// The longest profile name, so a name stays a readable TOML key.
const PROFILE_NAME_BYTES_MAX: usize = 64;

/// What the config file holds (TOML): `[profiles.NAME]` tables of [`Credentials`].
///
/// ```
/// use tessera_host::cli::{Credentials, CliConfig};
/// let mut config = CliConfig::default();
/// config.profiles.insert("prod".into(), Credentials { url: "https://tessera.example".into(), ..Default::default() });
/// let text = toml::to_string(&config).unwrap();
/// assert!(text.contains("[profiles.prod]"));
/// assert_eq!(toml::from_str::<CliConfig>(&text).unwrap(), config);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CliConfig {
    /// The profiles by name.
    pub profiles: BTreeMap<String, Credentials>,
}

/// The config file's path: `$XDG_CONFIG_HOME/tessera/config.toml` when that variable holds an
/// absolute path, else `$HOME/.config/tessera/config.toml`; `None` with neither.
pub fn config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|path| path.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|path| path.is_absolute())
                .map(|home| home.join(".config"))
        })?;
    Some(base.join("tessera").join("config.toml"))
}

/// Checks a profile name: 1 to 64 of `[A-Za-z0-9_-]`.
pub fn validate_profile(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= PROFILE_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "profile {name:?}: a profile name is 1 to {PROFILE_NAME_BYTES_MAX} letters, digits, \
             '-' or '_'"
        ))
    }
}

impl CliConfig {
    /// Reads the config file; an empty config when there is none.
    pub fn load(path: &Path) -> Result<CliConfig, String> {
        let metadata = match std::fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(CliConfig::default());
            }
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        if metadata.len() > CONFIG_BYTES_MAX {
            return Err(format!(
                "{} is too large to be a CLI config",
                path.display()
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        toml::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))
    }

    /// Writes the config file whole (a private temporary file renamed over it), its
    /// directory mode 0700 and the file 0600.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        let text = toml::to_string(self).map_err(|error| error.to_string())?;
        let directory = path
            .parent()
            .ok_or_else(|| format!("{} has no directory", path.display()))?;
        create_private_dir(directory)?;
        // tempfile creates the file with mode 0600.
        let mut file = tempfile::NamedTempFile::new_in(directory)
            .map_err(|error| format!("cannot write in {}: {error}", directory.display()))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.as_file().sync_all())
            .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
        file.persist(path)
            .map_err(|error| format!("cannot write {}: {}", path.display(), error.error))?;
        Ok(())
    }
}

/// Creates `directory` (and its missing parents) and makes it mode 0700.
fn create_private_dir(directory: &Path) -> Result<(), String> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        builder.mode(0o700);
        builder
            .create(directory)
            .map_err(|error| format!("cannot create {}: {error}", directory.display()))?;
        // An existing directory keeps its mode through `create`: make it private too.
        std::fs::set_permissions(directory, std::fs::Permissions::from_mode(0o700))
            .map_err(|error| format!("cannot restrict {}: {error}", directory.display()))
    }
    #[cfg(not(unix))]
    {
        builder
            .create(directory)
            .map_err(|error| format!("cannot create {}: {error}", directory.display()))
    }
}

/// The stored credentials a client command uses, before its flags and environment: the
/// profile named by `--profile` / `TESSERA_PROFILE` (an error if the config has none of that
/// name); else `./.tessera/credentials` (a `tessera up` in this directory); else the
/// `default` profile; else nothing.
pub(crate) fn stored_credentials(profile: Option<&str>) -> Result<Credentials, String> {
    if let Some(name) = profile {
        validate_profile(name)?;
        let path = config_path()
            .ok_or_else(|| format!("profile {name}: neither XDG_CONFIG_HOME nor HOME is set"))?;
        return CliConfig::load(&path)?
            .profiles
            .remove(name)
            .ok_or_else(|| {
                format!(
                    "no profile {name} in {}: run `tessera login URL --profile {name}`",
                    path.display()
                )
            });
    }
    if let Some(local) = Credentials::load(&credentials::default_path())? {
        return Ok(local);
    }
    let Some(path) = config_path() else {
        return Ok(Credentials::default());
    };
    Ok(CliConfig::load(&path)?
        .profiles
        .remove(DEFAULT_PROFILE)
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_saved_config_is_private_and_read_back() {
        let home = tempfile::tempdir().unwrap();
        let path = home
            .path()
            .join("config")
            .join("tessera")
            .join("config.toml");
        let mut config = CliConfig::default();
        config.profiles.insert(
            "prod".into(),
            Credentials {
                url: "https://tessera.example".into(),
                admin_token: Some("a".repeat(32)),
                ..Credentials::default()
            },
        );
        config.save(&path).unwrap();
        config.save(&path).unwrap();
        assert_eq!(CliConfig::load(&path).unwrap(), config);
        #[cfg(unix)]
        {
            assert_eq!(mode(&path), 0o600, "the file holds tokens");
            assert_eq!(mode(path.parent().unwrap()), 0o700);
        }
        let entries = std::fs::read_dir(path.parent().unwrap()).unwrap().count();
        assert_eq!(entries, 1, "no temporary file is left behind");
    }

    #[cfg(unix)]
    #[test]
    fn an_existing_open_directory_is_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        let directory = home.path().join("tessera");
        std::fs::create_dir(&directory).unwrap();
        std::fs::set_permissions(&directory, std::fs::Permissions::from_mode(0o755)).unwrap();
        CliConfig::default()
            .save(&directory.join("config.toml"))
            .unwrap();
        assert_eq!(mode(&directory), 0o700);
    }

    #[test]
    fn profile_names_are_checked() {
        assert!(validate_profile("prod-eu_1").is_ok());
        for bad in ["", "a b", "a.b", "../x", &"p".repeat(65)] {
            assert!(validate_profile(bad).is_err(), "{bad:?}");
        }
    }
}
