//! The simulated disk ([`MemoryDisk`]): a redb storage backend in memory that outlives the
//! database opened on it, so a simulated crash can drop the whole node (database included) and
//! a restart reopens what was written — without a file or an fsync per commit, which would make
//! a thousand seeds take minutes. What the node committed before the crash is durable, as on a
//! real disk after its fsync; redb's own recovery runs on reopen.

use redb::StorageBackend;
use redb::backends::InMemoryBackend;
use std::sync::Arc;

/// A disk in memory; clones share the bytes.
#[derive(Clone, Debug, Default)]
pub(crate) struct MemoryDisk {
    bytes: Arc<InMemoryBackend>,
}

impl MemoryDisk {
    /// Opens (or creates) the database on this disk.
    pub(crate) fn open(&self) -> Result<redb::Database, redb::DatabaseError> {
        redb::Database::builder().create_with_backend(self.clone())
    }
}

impl StorageBackend for MemoryDisk {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.bytes.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.bytes.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.bytes.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.bytes.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.bytes.write(offset, data)
    }
}
