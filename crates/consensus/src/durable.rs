//! The on-disk journal: one file holding two superblock slots followed by checksummed records
//! (log entries and checkpoints), synced with `fdatasync`.
//!
//! A sync appends the records and syncs them, then overwrites the older superblock slot with
//! the next copy (sequence number, end of the synced records, superblock) and syncs again. A
//! crash can therefore tear only unsynced records or the slot being written, never the other
//! slot. On open, recovery takes the newest intact copy; every record before the end it names
//! was synced, so one that fails its CRC there is corruption and the journal refuses to start
//! (naming the file and offset), while anything after it is an unsynced tail and is cut.
//! Whenever a superblock names a newer checkpoint the file is compacted: the checkpoint and the
//! log above it are written to a new file, synced, renamed over the old one and the directory
//! synced, so the file stays a few checkpoint intervals long however long the replica lives.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::journal::{
    Checkpoint, Journal, JournalError, Record, Recovered, Superblock, SuperblockCopy,
    compacted_records, copies_newest_first, recover_log,
};
use super::message::Entry;

/// Largest record accepted when reading back: a length above this is corruption, not a record
/// to allocate for (a full batch of maximal requests, or a checkpoint, is below it).
pub const RECORD_BYTES_MAX: usize = 512 * 1024 * 1024;

/// Bytes reserved for each superblock copy at the start of the file: one disk sector's worth
/// of pages, far more than an encoded copy needs.
pub const SUPERBLOCK_SLOT_BYTES: u64 = 4096;

/// Where the records start: after the two superblock slots.
const RECORDS_START: u64 = 2 * SUPERBLOCK_SLOT_BYTES;

/// Bytes before each frame's payload: its length and its CRC32, both little endian.
const FRAME_HEADER_BYTES: usize = 8;

/// The suffix of the file a compaction writes before renaming it over the journal.
const COMPACTING_SUFFIX: &str = "compacting";

/// A [`Journal`] in one file.
///
/// ```
/// use tessera_consensus::durable::FileJournal;
/// use tessera_consensus::journal::{Journal, Superblock};
/// use tessera_consensus::message::CHECKSUM_ROOT;
///
/// let directory = tempfile::tempdir()?;
/// let path = directory.path().join("replica-0").join("journal");
/// let mut journal = FileJournal::open(&path)?;
/// journal.write_superblock(&Superblock {
///     view: 3,
///     log_view: 3,
///     commit: 0,
///     op_head: 0,
///     head_checksum: CHECKSUM_ROOT,
///     checkpoint_op: 0,
///     checkpoint_state_checksum: 0,
///     forgetful: false,
/// });
/// journal.sync();
/// drop(journal);
/// let recovered = FileJournal::open(&path)?.recover()?;
/// assert_eq!(recovered.superblock.view, 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FileJournal {
    path: PathBuf,
    file: File,
    unsynced: Vec<u8>,
    /// Where the next record goes: the end of the synced records.
    records_end: u64,
    staged_superblock: Option<Superblock>,
    sequence: u64,
    compacted_checkpoint_op: u64,
    directory_syncs: u64,
}

impl FileJournal {
    /// Opens the journal file at `path`, creating it (and its directory) if needed; a new file
    /// and its directory entry are synced before this returns.
    pub fn open(path: &Path) -> Result<FileJournal, JournalError> {
        let directory = parent_directory(path);
        std::fs::create_dir_all(&directory)?;
        let compacting = compacting_path(path);
        if compacting.exists() {
            // A compaction that crashed before its rename: the journal itself is intact.
            std::fs::remove_file(&compacting)?;
        }
        let created = !path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let mut directory_syncs = 0;
        if created {
            file.set_len(RECORDS_START)?;
            file.sync_all()?;
            sync_directory(path)?;
            directory_syncs += 1;
        }
        let bytes = read_all(&mut file)?;
        let sequence = read_copies(&bytes)
            .iter()
            .flatten()
            .map(|copy| copy.sequence)
            .max()
            .unwrap_or(0);
        Ok(FileJournal {
            path: path.to_path_buf(),
            file,
            unsynced: Vec::new(),
            records_end: (bytes.len() as u64).max(RECORDS_START),
            staged_superblock: None,
            sequence,
            compacted_checkpoint_op: 0,
            directory_syncs,
        })
    }

    /// Whether the journal at `path` was never formatted: no file, or the file
    /// [`FileJournal::open`] creates — only the superblock slots — with no intact superblock in
    /// them, as a crash before or during the replica's first superblock write
    /// (`Replica::start_empty` formats it) leaves it. A replica syncs a superblock before it
    /// appends any record and writes the two slots in turn, so a formatted journal always holds
    /// an intact copy (or records after the slots). A replica on a blank journal promised
    /// nothing and starts as a new one; any other journal without an intact superblock is
    /// refused.
    pub fn is_blank(path: &Path) -> Result<bool, JournalError> {
        let mut file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(true),
            Err(error) => return Err(error.into()),
        };
        if file.metadata()?.len() > RECORDS_START {
            return Ok(false);
        }
        let bytes = read_all(&mut file)?;
        Ok(read_copies(&bytes).iter().all(Option::is_none))
    }

    /// Times the directory was synced (at creation and after each compaction).
    pub fn directory_syncs(&self) -> u64 {
        self.directory_syncs
    }

    fn append_record(&mut self, record: &Record) {
        append_frame(&mut self.unsynced, record);
    }

    fn write_copy(&mut self, superblock: Superblock) -> std::io::Result<()> {
        self.sequence += 1;
        let copy = SuperblockCopy::new(self.sequence, self.records_end, superblock);
        write_slot(&mut self.file, &copy)?;
        self.file.sync_data()?;
        if superblock.checkpoint_op > self.compacted_checkpoint_op {
            self.compact(superblock)?;
        }
        Ok(())
    }

    /// Rewrites the journal as the checkpoint and the log above it, with both slots naming
    /// them, into a new file that replaces the old one atomically.
    fn compact(&mut self, superblock: Superblock) -> std::io::Result<()> {
        let bytes = read_all(&mut self.file)?;
        let end = usize::try_from(self.records_end).unwrap_or(usize::MAX);
        let records = parse_records(&bytes, RECORDS_START as usize, end).map_err(|offset| {
            let path = self.path.display();
            invalid_data(format!(
                "{path}: synced record at offset {offset} reads back corrupt"
            ))
        })?;
        let Some(recovered) = recover_log(&superblock, &records) else {
            let path = self.path.display();
            return Err(invalid_data(format!(
                "{path}: superblock names records it lacks"
            )));
        };
        let mut region = Vec::new();
        for record in compacted_records(&recovered) {
            append_frame(&mut region, &record);
        }
        let compacting = compacting_path(&self.path);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&compacting)?;
        file.set_len(RECORDS_START)?;
        file.seek(SeekFrom::Start(RECORDS_START))?;
        file.write_all(&region)?;
        let records_end = RECORDS_START + region.len() as u64;
        for _ in 0..2 {
            self.sequence += 1;
            write_slot(
                &mut file,
                &SuperblockCopy::new(self.sequence, records_end, superblock),
            )?;
        }
        file.sync_all()?;
        std::fs::rename(&compacting, &self.path)?;
        sync_directory(&self.path)?;
        self.directory_syncs += 1;
        self.file = file;
        self.records_end = records_end;
        self.compacted_checkpoint_op = superblock.checkpoint_op;
        Ok(())
    }

    fn corrupt(&self, offset: u64) -> JournalError {
        JournalError::Corrupt {
            location: self.path.display().to_string(),
            offset,
        }
    }
}

fn parent_directory(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn invalid_data(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

/// Makes the journal's directory entry (a creation or a rename) durable.
fn sync_directory(path: &Path) -> std::io::Result<()> {
    File::open(parent_directory(path))?.sync_all()
}

fn compacting_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(COMPACTING_SUFFIX);
    PathBuf::from(name)
}

fn read_all(file: &mut File) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn append_frame<T: Serialize>(buffer: &mut Vec<u8>, value: &T) {
    let payload = rmp_serde::to_vec(value)
        .unwrap_or_else(|error| panic!("journal records always encode: {error}"));
    let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    buffer.extend_from_slice(&length.to_le_bytes());
    buffer.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    buffer.extend_from_slice(&payload);
}

/// Decodes the frame at `offset`; its end, or `None` if it is short, oversized, corrupt or
/// undecodable.
fn parse_frame<T: DeserializeOwned>(bytes: &[u8], offset: usize) -> Option<(T, usize)> {
    let header = bytes.get(offset..offset.checked_add(FRAME_HEADER_BYTES)?)?;
    let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let checksum = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let start = offset + FRAME_HEADER_BYTES;
    if length > RECORD_BYTES_MAX {
        return None;
    }
    let payload = bytes.get(start..start.checked_add(length)?)?;
    if crc32fast::hash(payload) != checksum {
        return None;
    }
    let value = rmp_serde::from_slice(payload).ok()?;
    Some((value, start + length))
}

/// Parses the records in `start..end`; the offset of the first bad one otherwise.
fn parse_records(bytes: &[u8], start: usize, end: usize) -> Result<Vec<Record>, u64> {
    let mut records = Vec::new();
    let mut offset = start;
    while offset < end {
        match parse_frame::<Record>(bytes, offset) {
            Some((record, next)) if next <= end => {
                records.push(record);
                offset = next;
            }
            _ => return Err(offset as u64),
        }
    }
    Ok(records)
}

fn read_copies(bytes: &[u8]) -> [Option<SuperblockCopy>; 2] {
    [0, 1].map(|slot| {
        let offset = (slot * SUPERBLOCK_SLOT_BYTES) as usize;
        parse_frame::<SuperblockCopy>(bytes, offset)
            .filter(|(copy, end)| {
                *end as u64 <= (slot + 1) * SUPERBLOCK_SLOT_BYTES && copy.sequence % 2 == slot
            })
            .map(|(copy, _)| copy)
    })
}

fn write_slot(file: &mut File, copy: &SuperblockCopy) -> std::io::Result<()> {
    let mut frame = Vec::new();
    append_frame(&mut frame, copy);
    assert!(
        frame.len() as u64 <= SUPERBLOCK_SLOT_BYTES,
        "a superblock copy fits its slot"
    );
    file.seek(SeekFrom::Start((copy.sequence % 2) * SUPERBLOCK_SLOT_BYTES))?;
    file.write_all(&frame)
}

impl Journal for FileJournal {
    fn append_entry(&mut self, entry: &Entry) {
        self.append_record(&Record::Entry(entry.clone()));
    }

    fn append_checkpoint(&mut self, checkpoint: &Checkpoint) {
        self.append_record(&Record::Checkpoint(checkpoint.clone()));
    }

    fn write_superblock(&mut self, superblock: &Superblock) {
        self.staged_superblock = Some(*superblock);
    }

    fn sync(&mut self) {
        let mut result = Ok(());
        if !self.unsynced.is_empty() {
            result = self
                .file
                .seek(SeekFrom::Start(self.records_end))
                .and_then(|_| self.file.write_all(&self.unsynced))
                .and_then(|()| self.file.sync_data());
            self.records_end += self.unsynced.len() as u64;
            self.unsynced.clear();
        }
        if let (Ok(()), Some(superblock)) = (&result, self.staged_superblock.take()) {
            result = self.write_copy(superblock);
        }
        if let Err(error) = result {
            panic!("journal sync failed; the replica cannot keep its promises: {error}");
        }
    }

    fn recover(&mut self) -> Result<Recovered, JournalError> {
        self.unsynced.clear();
        self.staged_superblock = None;
        let bytes = read_all(&mut self.file)?;
        for copy in copies_newest_first(&read_copies(&bytes)) {
            let Ok(end) = usize::try_from(copy.records_length) else {
                return Err(self.corrupt(copy.records_length));
            };
            if end > bytes.len() || end < RECORDS_START as usize {
                return Err(self.corrupt(bytes.len() as u64));
            }
            let records = parse_records(&bytes, RECORDS_START as usize, end)
                .map_err(|offset| self.corrupt(offset))?;
            let Some(recovered) = recover_log(&copy.superblock, &records) else {
                continue;
            };
            if end < bytes.len() {
                self.file.set_len(end as u64)?;
                self.file.sync_all()?;
            }
            self.records_end = end as u64;
            self.sequence = copy.sequence;
            self.compacted_checkpoint_op = copy.superblock.checkpoint_op;
            return Ok(recovered);
        }
        Err(JournalError::NoSuperblock)
    }
}

#[cfg(test)]
#[path = "durable_tests.rs"]
mod tests;
