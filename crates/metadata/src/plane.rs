//! The metadata plane: how a command reaches the catalog. [`MetadataPlane`] orders commands and
//! applies them on every replica, then tells the node's [`CatalogObserver`] what changed.
//! [`LocalPlane`] is the plane of a single node (commands applied in submission order, one
//! durable transaction each); the cluster's VSR plane implements the same trait.

use super::command::{Applied, Command};
use super::error::MetadataError;
use super::store::MetadataStore;
use std::sync::Arc;
use tessera_contract::BoxFuture;

/// Reacts to applied commands, in order, on every node (binds types, updates tenants).
pub trait CatalogObserver: Send + Sync + 'static {
    /// Called once per applied command, after it is durable, before the submitter hears back.
    fn applied<'a>(&'a self, applied: &'a Applied) -> BoxFuture<'a, ()>;
}

/// Orders and applies catalog commands.
pub trait MetadataPlane: Send + Sync + 'static {
    /// Applies `command` (on every replica); resolves with what it produced once it is durable
    /// and observed, or with why it was refused (then nothing changed).
    fn submit(&self, command: Command) -> BoxFuture<'static, Result<Applied, MetadataError>>;

    /// The catalog as applied on this node (reads).
    fn store(&self) -> &MetadataStore;

    /// Where the plane is: view, commit number, primary and voters.
    fn status(&self) -> PlaneStatus;
}

/// The metadata plane as one node sees it: view, commit number (catalog commands applied
/// here), primary and voters; a single node's plane has only a commit number.
pub type PlaneStatus = tessera_consensus::group::GroupStatus;

/// The metadata plane of one node: submissions are applied one at a time, in order.
///
/// ```
/// use std::sync::Arc;
/// use tessera_contract::BoxFuture;
/// use tessera_metadata::{Applied, CatalogObserver, Command, LocalPlane, MetadataPlane, MetadataStore, Quotas};
/// struct Quiet;
/// impl CatalogObserver for Quiet {
///     fn applied<'a>(&'a self, _: &'a Applied) -> BoxFuture<'a, ()> { Box::pin(async {}) }
/// }
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let dir = tempfile::tempdir().unwrap();
/// let database = Arc::new(redb::Database::create(dir.path().join("m.redb")).unwrap());
/// let plane = LocalPlane::new(MetadataStore::open(database).unwrap(), Arc::new(Quiet));
/// let command = Command::CreateTenant {
///     name: "acme".into(), token_sha256: "ab".into(), quotas: Quotas::default(), created_ms: 0,
/// };
/// assert!(matches!(plane.submit(command).await, Ok(Applied::Tenant(_))));
/// # });
/// ```
pub struct LocalPlane {
    inner: Arc<Inner>,
}

struct Inner {
    store: MetadataStore,
    observer: Arc<dyn CatalogObserver>,
    /// Serialises apply-then-observe, so observers see commands in the order they applied.
    order: tokio::sync::Mutex<()>,
}

impl LocalPlane {
    /// A plane over `store` that reports to `observer`.
    pub fn new(store: MetadataStore, observer: Arc<dyn CatalogObserver>) -> Self {
        LocalPlane {
            inner: Arc::new(Inner {
                store,
                observer,
                order: tokio::sync::Mutex::new(()),
            }),
        }
    }
}

impl MetadataPlane for LocalPlane {
    fn submit(&self, command: Command) -> BoxFuture<'static, Result<Applied, MetadataError>> {
        let inner = self.inner.clone();
        Box::pin(async move {
            let _in_order = inner.order.lock().await;
            let store = inner.store.clone();
            let applied = tokio::task::spawn_blocking(move || store.apply(command))
                .await
                .map_err(|error| MetadataError::Unavailable(error.to_string()))??;
            inner.observer.applied(&applied).await;
            Ok(applied)
        })
    }

    fn store(&self) -> &MetadataStore {
        &self.inner.store
    }

    fn status(&self) -> PlaneStatus {
        let commit = self.inner.store.applied_commands().unwrap_or_else(|error| {
            tracing::warn!(%error, "the catalog's commit number could not be read");
            0
        });
        PlaneStatus {
            commit,
            ..PlaneStatus::default()
        }
    }
}
