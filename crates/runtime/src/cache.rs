//! The on-disk cache of compiled plugins, keyed by the component's content hash and the
//! engine's compatibility hash, so a restart does not recompile.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Compiled artifacts in one directory.
pub(crate) struct CompiledCache {
    directory: PathBuf,
    engine_key: String,
}

impl CompiledCache {
    pub(crate) fn new(directory: PathBuf, engine: &Engine) -> std::io::Result<Self> {
        std::fs::create_dir_all(&directory)?;
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(CompiledCache {
            directory,
            engine_key: format!("{:016x}", hasher.finish()),
        })
    }

    fn path(&self, content_hash: &str) -> PathBuf {
        self.directory
            .join(format!("{content_hash}-{}.cwasm", self.engine_key))
    }

    /// The cached component for `content_hash`, if a usable one is on disk.
    pub(crate) fn load(&self, engine: &Engine, content_hash: &str) -> Option<Component> {
        let path = self.path(content_hash);
        if !path.exists() {
            return None;
        }
        // SAFETY: the file was written by `store` below from `Component::serialize` of this
        // engine configuration (the engine key is in its name), inside the node's own data
        // directory. A file that fails to load is recompiled and replaced.
        match unsafe { Component::deserialize_file(engine, &path) } {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "discarding unusable compiled plugin");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Writes `component` for `content_hash` (atomically: a temporary file then a rename).
    pub(crate) fn store(&self, content_hash: &str, component: &Component) -> std::io::Result<()> {
        let bytes = component
            .serialize()
            .map_err(|error| std::io::Error::other(error.to_string()))?;
        let path = self.path(content_hash);
        let temporary = path.with_extension("cwasm.tmp");
        std::fs::write(&temporary, bytes)?;
        std::fs::rename(&temporary, &path)
    }

    pub(crate) fn contains(&self, content_hash: &str) -> bool {
        Path::exists(&self.path(content_hash))
    }
}
