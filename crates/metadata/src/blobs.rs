//! The plugin blob store: component bytes by hex SHA-256, on this node's disk beside the
//! catalog but outside it. The catalog orders only a version's hash and size; the bytes never
//! enter the replicated log or its checkpoints (`docs/cluster.md`, "Plugin bytes"). Blobs are
//! kept in chunks of [`BLOB_CHUNK_BYTES`], so a peer's read of one chunk costs one chunk, and a
//! blob is written whole in one transaction only after its bytes hash to its name
//! ([`BlobAssembly`]): a node never holds, serves or runs bytes that are not what was deployed.
//! Blobs no version names any more are collected by [`BlobStore::collect_garbage`], a bounded
//! number per call.

use super::error::{MetadataError, storage};
use super::limits::quota_ceilings::PLUGIN_BYTES_MAX;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Bytes of one blob chunk, as stored and as sent between nodes: large enough that a 64 MiB
/// plugin crosses in 128 round trips, small enough that a chunk queued before a heartbeat or a
/// lease renewal delays it by well under a millisecond on a local link.
pub const BLOB_CHUNK_BYTES: usize = 512 << 10;

/// The most chunks one blob has: a plugin is at most [`PLUGIN_BYTES_MAX`].
pub const BLOB_CHUNKS_MAX: u32 = PLUGIN_BYTES_MAX.div_ceil(BLOB_CHUNK_BYTES) as u32;

/// Chunks by `(hex SHA-256, index)`.
const BLOB_CHUNKS: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("plugin_blobs");
/// Complete blobs: hex SHA-256 -> `(size in bytes, when stored in ms)`. A blob is usable only
/// once its row is here; it is written in the same transaction as its last chunk.
const BLOB_INDEX: TableDefinition<&str, (u64, u64)> = TableDefinition::new("plugin_blob_index");

/// Why a blob was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    /// The bytes do not hash to the name they were sent under.
    #[error("plugin bytes hash to {actual}, not {expected}")]
    Corrupt {
        /// The name they came under.
        expected: String,
        /// What they hash to.
        actual: String,
    },
    /// A chunk is not the next one, is empty, is larger than [`BLOB_CHUNK_BYTES`] or runs
    /// past the blob's size.
    #[error("bad plugin chunk: {0}")]
    BadChunk(String),
    /// A blob larger than [`PLUGIN_BYTES_MAX`] (or of no bytes).
    #[error("a plugin of {0} bytes is outside 1..={PLUGIN_BYTES_MAX}")]
    BadSize(u64),
    /// The disk failed.
    #[error(transparent)]
    Storage(#[from] MetadataError),
}

/// The hex SHA-256 of `bytes`: a blob's name.
///
/// ```
/// assert_eq!(&tessera_metadata::blob_name(b"")[..8], "e3b0c442");
/// ```
pub fn blob_name(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One blob received chunk by chunk, in order, held in memory (at most [`PLUGIN_BYTES_MAX`])
/// until it is complete and hashes to its name.
///
/// ```
/// use tessera_metadata::{BlobAssembly, blob_name};
/// let bytes = vec![7u8; 10];
/// let mut assembly = BlobAssembly::new(&blob_name(&bytes), 10).unwrap();
/// assembly.push(0, &bytes).unwrap();
/// assert_eq!(assembly.finish().unwrap(), bytes);
/// ```
#[derive(Debug)]
pub struct BlobAssembly {
    sha256: String,
    size_bytes: u64,
    bytes: Vec<u8>,
}

impl BlobAssembly {
    /// Starts receiving the blob `sha256` of `size_bytes`.
    pub fn new(sha256: &str, size_bytes: u64) -> Result<BlobAssembly, BlobError> {
        if size_bytes == 0 || size_bytes > PLUGIN_BYTES_MAX as u64 {
            return Err(BlobError::BadSize(size_bytes));
        }
        Ok(BlobAssembly {
            sha256: sha256.to_string(),
            size_bytes,
            bytes: Vec::new(),
        })
    }

    /// The index of the chunk it needs next.
    pub fn next_chunk(&self) -> u32 {
        (self.bytes.len() / BLOB_CHUNK_BYTES) as u32
    }

    /// Whether every byte has come.
    pub fn is_complete(&self) -> bool {
        self.bytes.len() as u64 == self.size_bytes
    }

    /// Takes chunk `index`: it must be the next one, hold at most [`BLOB_CHUNK_BYTES`], and be
    /// full unless it is the last.
    pub fn push(&mut self, index: u32, chunk: &[u8]) -> Result<(), BlobError> {
        if index != self.next_chunk() || self.is_complete() {
            return Err(BlobError::BadChunk(format!(
                "chunk {index} came where chunk {} was expected",
                self.next_chunk()
            )));
        }
        let remaining = self.size_bytes - self.bytes.len() as u64;
        let expected = remaining.min(BLOB_CHUNK_BYTES as u64);
        if chunk.len() as u64 != expected {
            return Err(BlobError::BadChunk(format!(
                "chunk {index} has {} bytes, not {expected}",
                chunk.len()
            )));
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// The whole blob, if it is complete and hashes to its name.
    pub fn finish(self) -> Result<Vec<u8>, BlobError> {
        if !self.is_complete() {
            return Err(BlobError::BadChunk(format!(
                "{} of {} bytes came",
                self.bytes.len(),
                self.size_bytes
            )));
        }
        let actual = blob_name(&self.bytes);
        if actual != self.sha256 {
            return Err(BlobError::Corrupt {
                expected: self.sha256,
                actual,
            });
        }
        Ok(self.bytes)
    }
}

/// This node's plugin blobs, in its redb database (tables apart from the catalog's).
///
/// ```
/// use tessera_metadata::{BlobStore, blob_name};
/// let database = redb::Database::builder()
///     .create_with_backend(redb::backends::InMemoryBackend::new()).unwrap();
/// let blobs = BlobStore::open(std::sync::Arc::new(database)).unwrap();
/// let bytes = b"component".to_vec();
/// blobs.put(&blob_name(&bytes), &bytes, 1).unwrap();
/// assert_eq!(blobs.get(&blob_name(&bytes)).unwrap(), Some(bytes));
/// ```
#[derive(Clone)]
pub struct BlobStore {
    database: Arc<Database>,
}

impl BlobStore {
    /// Opens the blob tables in `database`, creating them if needed.
    pub fn open(database: Arc<Database>) -> Result<BlobStore, MetadataError> {
        let transaction = database.begin_write().map_err(storage)?;
        transaction.open_table(BLOB_CHUNKS).map_err(storage)?;
        transaction.open_table(BLOB_INDEX).map_err(storage)?;
        transaction.commit().map_err(storage)?;
        Ok(BlobStore { database })
    }

    /// Stores `bytes` as `sha256` (stored at `now_ms`); a blob stored already is only marked
    /// stored at `now_ms`, so the collector keeps it for a deploy of it in flight. Refused,
    /// storing nothing, when they do not hash to `sha256` or are too large.
    pub fn put(&self, sha256: &str, bytes: &[u8], now_ms: u64) -> Result<(), BlobError> {
        let stored = self.size(sha256)?;
        let transaction = self.database.begin_write().map_err(storage)?;
        match stored {
            Some(size) if blob_name(bytes) == sha256 => {
                let mut index = transaction.open_table(BLOB_INDEX).map_err(storage)?;
                index.insert(sha256, (size, now_ms)).map_err(storage)?;
            }
            _ => write_blob(&transaction, sha256, bytes, now_ms)?,
        }
        transaction.commit().map_err(storage)?;
        Ok(())
    }

    /// The size of a stored blob, if it is stored.
    pub fn size(&self, sha256: &str) -> Result<Option<u64>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let index = transaction.open_table(BLOB_INDEX).map_err(storage)?;
        Ok(index.get(sha256).map_err(storage)?.map(|row| row.value().0))
    }

    /// One chunk of a stored blob, with the blob's size.
    pub fn chunk(&self, sha256: &str, chunk: u32) -> Result<Option<(u64, Vec<u8>)>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let index = transaction.open_table(BLOB_INDEX).map_err(storage)?;
        let Some(size) = index.get(sha256).map_err(storage)?.map(|row| row.value().0) else {
            return Ok(None);
        };
        let chunks = transaction.open_table(BLOB_CHUNKS).map_err(storage)?;
        let bytes = chunks.get((sha256, chunk)).map_err(storage)?;
        Ok(bytes.map(|bytes| (size, bytes.value().to_vec())))
    }

    /// A whole stored blob.
    pub fn get(&self, sha256: &str) -> Result<Option<Vec<u8>>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let index = transaction.open_table(BLOB_INDEX).map_err(storage)?;
        let Some(size) = index.get(sha256).map_err(storage)?.map(|row| row.value().0) else {
            return Ok(None);
        };
        let chunks = transaction.open_table(BLOB_CHUNKS).map_err(storage)?;
        let mut bytes = Vec::with_capacity(size.min(PLUGIN_BYTES_MAX as u64) as usize);
        for row in chunks
            .range((sha256, 0)..=(sha256, BLOB_CHUNKS_MAX))
            .map_err(storage)?
        {
            let (_, chunk) = row.map_err(storage)?;
            bytes.extend_from_slice(chunk.value());
        }
        Ok(Some(bytes))
    }

    /// Every stored blob: `(hex SHA-256, stored at ms)`, by name.
    pub fn list(&self) -> Result<Vec<(String, u64)>, MetadataError> {
        let transaction = self.database.begin_read().map_err(storage)?;
        let index = transaction.open_table(BLOB_INDEX).map_err(storage)?;
        let mut blobs = Vec::new();
        for row in index.iter().map_err(storage)? {
            let (name, value) = row.map_err(storage)?;
            blobs.push((name.value().to_string(), value.value().1));
        }
        Ok(blobs)
    }

    /// Removes a blob and its chunks.
    pub fn remove(&self, sha256: &str) -> Result<(), MetadataError> {
        let transaction = self.database.begin_write().map_err(storage)?;
        {
            let mut index = transaction.open_table(BLOB_INDEX).map_err(storage)?;
            index.remove(sha256).map_err(storage)?;
            let mut chunks = transaction.open_table(BLOB_CHUNKS).map_err(storage)?;
            chunks
                .retain_in((sha256, 0)..=(sha256, BLOB_CHUNKS_MAX), |_, _| false)
                .map_err(storage)?;
        }
        transaction.commit().map_err(storage)
    }

    /// Removes at most `max` blobs that `used` says no version names and that were stored
    /// before `stored_before_ms` (a blob pushed for a deploy not committed yet is young, and
    /// kept). Returns how many went.
    pub fn collect_garbage(
        &self,
        used: impl Fn(&str) -> bool,
        stored_before_ms: u64,
        max: usize,
    ) -> Result<usize, MetadataError> {
        let mut removed = 0;
        for (sha256, stored_ms) in self.list()? {
            if removed == max {
                break;
            }
            if stored_ms < stored_before_ms && !used(&sha256) {
                self.remove(&sha256)?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// Writes `bytes` as blob `sha256` in `transaction`, if they hash to it and fit.
pub(crate) fn write_blob(
    transaction: &WriteTransaction,
    sha256: &str,
    bytes: &[u8],
    now_ms: u64,
) -> Result<(), BlobError> {
    if bytes.is_empty() || bytes.len() > PLUGIN_BYTES_MAX {
        return Err(BlobError::BadSize(bytes.len() as u64));
    }
    let actual = blob_name(bytes);
    if actual != sha256 {
        return Err(BlobError::Corrupt {
            expected: sha256.to_string(),
            actual,
        });
    }
    let mut chunks = transaction.open_table(BLOB_CHUNKS).map_err(storage)?;
    for (index, chunk) in bytes.chunks(BLOB_CHUNK_BYTES).enumerate() {
        chunks
            .insert((sha256, index as u32), chunk)
            .map_err(storage)?;
    }
    let mut index = transaction.open_table(BLOB_INDEX).map_err(storage)?;
    index
        .insert(sha256, (bytes.len() as u64, now_ms))
        .map_err(storage)?;
    Ok(())
}

#[cfg(test)]
mod tests;
