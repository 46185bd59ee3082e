//! The on-disk journal: one append-only file of checksummed records (log entries and
//! superblocks), synced with `fdatasync`. Recovery reads records up to the first torn or
//! corrupt one, cuts the file there, and applies the shared rule of [`super::journal`]: the
//! newest intact superblock whose log walks back whole. Nothing is overwritten in place, so a
//! crash in the middle of a write can only damage the unsynced tail.
//!
//! Compaction is not implemented: records of truncated suffixes and old superblocks stay in
//! the file until a checkpoint mechanism exists (see `docs/consensus.md`).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use super::journal::{Journal, JournalError, Record, Recovered, Superblock, recover_from_records};
use super::message::Entry;

/// Largest record accepted when reading back: a length above this is corruption, not a record
/// to allocate for (a full batch of maximal requests is far below it).
pub const RECORD_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Bytes before each record's payload: its length and its CRC32, both little endian.
const RECORD_HEADER_BYTES: usize = 8;

/// A [`Journal`] in one file.
///
/// ```
/// use tessera_host::consensus::durable::FileJournal;
/// use tessera_host::consensus::journal::{Journal, Superblock};
/// use tessera_host::consensus::message::CHECKSUM_ROOT;
///
/// let directory = tempfile::tempdir()?;
/// let path = directory.path().join("journal");
/// let mut journal = FileJournal::open(&path)?;
/// journal.append_superblock(&Superblock::new(3, 3, 0, 0, CHECKSUM_ROOT));
/// journal.sync();
/// drop(journal);
/// let recovered = FileJournal::open(&path)?.recover()?;
/// assert_eq!(recovered.superblock.view, 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FileJournal {
    file: File,
    unsynced: Vec<u8>,
}

impl FileJournal {
    /// Opens (creating if needed) the journal file at `path`.
    pub fn open(path: &Path) -> Result<FileJournal, JournalError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        Ok(FileJournal {
            file,
            unsynced: Vec::new(),
        })
    }

    fn append_record(&mut self, record: &Record) {
        let payload = rmp_serde::to_vec(record)
            .unwrap_or_else(|error| panic!("journal record always encodes: {error}"));
        let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        self.unsynced.extend_from_slice(&length.to_le_bytes());
        self.unsynced
            .extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        self.unsynced.extend_from_slice(&payload);
    }

    /// Reads every intact record from the start and cuts the file after the last one.
    fn read_records(&mut self) -> Result<Vec<Record>, JournalError> {
        let mut bytes = Vec::new();
        self.file.seek(SeekFrom::Start(0))?;
        self.file.read_to_end(&mut bytes)?;
        let (records, valid_bytes) = parse_records(&bytes);
        if valid_bytes < bytes.len() {
            self.file.set_len(valid_bytes as u64)?;
            self.file.sync_all()?;
        }
        self.file.seek(SeekFrom::End(0))?;
        Ok(records)
    }
}

/// Parses records until the first one that is short, oversized, corrupt or undecodable;
/// returns them with the length of the intact prefix.
fn parse_records(bytes: &[u8]) -> (Vec<Record>, usize) {
    let mut records = Vec::new();
    let mut offset = 0;
    while let Some(header) = bytes.get(offset..offset + RECORD_HEADER_BYTES) {
        let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let checksum = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let start = offset + RECORD_HEADER_BYTES;
        let Some(payload) = bytes.get(start..start.saturating_add(length)) else {
            break;
        };
        if length > RECORD_BYTES_MAX || crc32fast::hash(payload) != checksum {
            break;
        }
        let Ok(record) = rmp_serde::from_slice::<Record>(payload) else {
            break;
        };
        records.push(record);
        offset = start + length;
    }
    (records, offset)
}

impl Journal for FileJournal {
    fn append_entry(&mut self, entry: &Entry) {
        self.append_record(&Record::Entry(entry.clone()));
    }

    fn append_superblock(&mut self, superblock: &Superblock) {
        self.append_record(&Record::Superblock(*superblock));
    }

    fn sync(&mut self) {
        let result = self
            .file
            .write_all(&self.unsynced)
            .and_then(|()| self.file.sync_data());
        if let Err(error) = result {
            panic!("journal sync failed; the replica cannot keep its promises: {error}");
        }
        self.unsynced.clear();
    }

    fn recover(&mut self) -> Result<Recovered, JournalError> {
        self.unsynced.clear();
        let records = self.read_records()?;
        recover_from_records(records.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::config::Config;
    use crate::consensus::message::{CHECKSUM_ROOT, Message, Request};
    use crate::consensus::replica::Replica;
    use crate::consensus::state_machine::{KeyValue, KeyValueOperation};

    fn entry(op: u64, parent: u64) -> Entry {
        let request = Request {
            client: 1,
            request_number: op,
            operation: vec![op as u8],
        };
        Entry::new(op, 0, parent, vec![request])
    }

    #[test]
    fn unsynced_writes_are_lost_and_a_torn_tail_is_cut() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path().join("journal");
        let first = entry(1, CHECKSUM_ROOT);
        {
            let mut journal = FileJournal::open(&path).expect("open");
            journal.append_entry(&first);
            journal.append_superblock(&Superblock::new(0, 0, 1, 1, first.checksum));
            journal.sync();
            let second = entry(2, first.checksum);
            journal.append_entry(&second);
            journal.append_superblock(&Superblock::new(0, 0, 2, 2, second.checksum));
        }
        let synced_length = std::fs::metadata(&path).expect("metadata").len();
        let mut file = OpenOptions::new().append(true).open(&path).expect("append");
        file.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, 5])
            .expect("torn tail");
        drop(file);

        let mut journal = FileJournal::open(&path).expect("reopen");
        let recovered = journal.recover().expect("recover");
        assert_eq!(recovered.log, vec![first]);
        assert_eq!(recovered.superblock.commit, 1);
        assert_eq!(
            std::fs::metadata(&path).expect("metadata").len(),
            synced_length
        );
    }

    #[test]
    fn a_replica_on_disk_recovers_its_committed_state_after_a_crash() {
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path().join("journal");
        let journal = FileJournal::open(&path).expect("open");
        let mut replica =
            Replica::format(Config::new(1, 0), journal, KeyValue::default()).expect("format");
        for number in 1..=20 {
            let operation = KeyValueOperation::Put {
                key: number % 3,
                value: number,
            }
            .encode();
            let request = Request {
                client: 5,
                request_number: number,
                operation,
            };
            replica.on_message(Message::Request(request));
        }
        assert_eq!(replica.commit(), 20);
        drop(replica);

        let journal = FileJournal::open(&path).expect("reopen");
        let recovered =
            Replica::open(Config::new(1, 0), journal, KeyValue::default(), 1).expect("recover");
        assert_eq!(recovered.commit(), 20);
        assert_eq!(recovered.state_machine().get(2), Some(20));
        assert_eq!(recovered.state_machine().get(0), Some(18));
    }
}
