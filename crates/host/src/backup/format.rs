//! The backup file: [`MAGIC`], the format version (a big-endian `u32`), then frames — each a
//! big-endian `u32` length, a big-endian `u32` checksum (the first four bytes of the body's
//! SHA-256) and the body, one [`Record`] in MessagePack. The first record is the [`Header`],
//! the last an [`Record::End`] counting the records before it, so a file cut short is told
//! from a whole one. Nodes stream shards to the client in the same frames (without the magic).
//! Reading checks every bound before allocating: a frame longer than [`RECORD_BYTES_MAX`] is
//! refused, never buffered.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use tessera_metadata::{Tenant, VersionRecord};
use tessera_state::ShardPart;

/// The first eight bytes of every backup file.
pub const MAGIC: &[u8; 8] = b"TSRBAK\r\n";

/// The format this build writes and the newest it reads. A file of a later version is
/// refused (its records may mean what this build cannot know), never half-read.
pub const FORMAT_VERSION: u32 = 1;

/// The most bytes one record's body may hold: a plugin (the API takes uploads of at most
/// 64 MiB by default) with room to spare; a shard travels in parts of at most 4 MiB
/// ([`tessera_state::SHARD_PART_BYTES_MAX`]). A reader holds one record at a time, so this is
/// also what reading a backup holds in memory.
pub const RECORD_BYTES_MAX: usize = 96 << 20;

/// Bytes of a frame before its body: length and checksum.
const FRAME_HEAD_BYTES: usize = 8;

/// One record of a backup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Record {
    /// What the backup is of; always the first record.
    Header(Header),
    /// A tenant with its token hash and quotas (cluster backups only).
    Tenant(Tenant),
    /// One version of a type with its plugin; versions of a type come in order, from 1.
    Version {
        /// The tenant.
        tenant: String,
        /// The type.
        entity_type: String,
        /// The version's record (its plugin named by hash).
        version: VersionRecord,
        /// The plugin's bytes.
        #[serde(with = "serde_bytes")]
        plugin: Vec<u8>,
    },
    /// The version a type runs, after all of its versions.
    Active {
        /// The tenant.
        tenant: String,
        /// The type.
        entity_type: String,
        /// The active version.
        version: u32,
    },
    /// One part of a shard's state; a shard's parts come together and in order.
    Shard(ShardRecord),
    /// The last record.
    End(Summary),
}

/// What a backup is of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// When the backup started (ms since the Unix epoch).
    pub created_ms: u64,
    /// The node the backup was planned on.
    pub node: String,
    /// The catalog commit the catalog was read at.
    pub catalog_commit: u64,
    /// Shards per type in the backed-up cluster: a restore needs the same number.
    pub num_shards: u32,
    /// The tenant of a tenant export; `None` for a whole cluster.
    pub tenant: Option<String>,
}

/// One part of a shard's state, as its owner read it from one snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRecord {
    /// The tenant.
    pub tenant: String,
    /// The entity type.
    pub entity_type: String,
    /// The shard.
    pub shard: u32,
    /// The node that exported it.
    pub node: String,
    /// The shard's allocation generation on that node.
    pub generation: u64,
    /// The rows.
    pub part: ShardPart,
}

impl ShardRecord {
    /// Entities whose committed state starts in this part (each entity's version row lies in
    /// exactly one part).
    pub fn entities(&self) -> u64 {
        self.part
            .entities
            .iter()
            .filter(|record| record.meta.is_some())
            .count() as u64
    }
}

/// What a backup (or one node's stream of shards) held, in its last record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Records before this one.
    pub records: u64,
    /// Shards.
    pub shards: u64,
    /// Entities with committed state.
    pub entities: u64,
}

/// Why a backup could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    /// The file does not start with [`MAGIC`].
    #[error("not a Tessera backup (it does not start with the backup magic)")]
    NotABackup,
    /// The file was written by a newer format.
    #[error("the backup is format version {found}; this build reads up to version {supported}")]
    FutureVersion {
        /// The file's version.
        found: u32,
        /// [`FORMAT_VERSION`].
        supported: u32,
    },
    /// The file ends before its last record.
    #[error(
        "the backup is truncated: it ends after {records} whole records, without its end record"
    )]
    Truncated {
        /// Whole records read.
        records: u64,
    },
    /// A record's checksum or contents are wrong.
    #[error("record {record} of the backup is corrupt: {reason}")]
    Corrupt {
        /// Which record, from 0.
        record: u64,
        /// What is wrong.
        reason: String,
    },
    /// A record is larger than [`RECORD_BYTES_MAX`].
    #[error("record {record} of the backup is {bytes} bytes; at most {RECORD_BYTES_MAX} are read")]
    TooLarge {
        /// Which record, from 0.
        record: u64,
        /// Its length.
        bytes: u64,
    },
    /// Reading or writing failed.
    #[error("backup file: {0}")]
    Io(#[from] std::io::Error),
}

/// `record` as one frame: length, checksum, MessagePack body.
pub fn encode_frame(record: &Record) -> Result<Vec<u8>, BackupError> {
    let body = rmp_serde::to_vec_named(record).map_err(|error| BackupError::Corrupt {
        record: 0,
        reason: format!("cannot encode: {error}"),
    })?;
    if body.len() > RECORD_BYTES_MAX {
        return Err(BackupError::TooLarge {
            record: 0,
            bytes: body.len() as u64,
        });
    }
    let mut frame = Vec::with_capacity(FRAME_HEAD_BYTES + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&checksum(&body).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

fn checksum(body: &[u8]) -> u32 {
    let digest = Sha256::digest(body);
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// Reads frames and decodes their records, checking lengths and checksums.
pub struct FrameReader<R> {
    inner: R,
    records: u64,
}

impl<R: Read> FrameReader<R> {
    /// Frames from `inner`, from its current position.
    pub fn new(inner: R) -> Self {
        FrameReader { inner, records: 0 }
    }

    /// Whole records read so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The next record and its frame (to copy as it came), or `None` at a clean end of input
    /// (between frames). An end inside a frame is [`BackupError::Truncated`].
    pub fn next_frame(&mut self) -> Result<Option<(Record, Vec<u8>)>, BackupError> {
        let mut head = [0u8; FRAME_HEAD_BYTES];
        match read_full(&mut self.inner, &mut head)? {
            0 => return Ok(None),
            FRAME_HEAD_BYTES => {}
            _ => return Err(self.truncated()),
        }
        let length = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let sum = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        if length > RECORD_BYTES_MAX {
            return Err(BackupError::TooLarge {
                record: self.records,
                bytes: length as u64,
            });
        }
        let mut frame = vec![0u8; FRAME_HEAD_BYTES + length];
        frame[..FRAME_HEAD_BYTES].copy_from_slice(&head);
        if read_full(&mut self.inner, &mut frame[FRAME_HEAD_BYTES..])? < length {
            return Err(self.truncated());
        }
        let body = &frame[FRAME_HEAD_BYTES..];
        if checksum(body) != sum {
            return Err(self.corrupt("its checksum does not match its bytes".into()));
        }
        let record = rmp_serde::from_slice(body)
            .map_err(|error| self.corrupt(format!("it does not decode: {error}")))?;
        self.records += 1;
        Ok(Some((record, frame)))
    }

    fn truncated(&self) -> BackupError {
        BackupError::Truncated {
            records: self.records,
        }
    }

    fn corrupt(&self, reason: String) -> BackupError {
        BackupError::Corrupt {
            record: self.records,
            reason,
        }
    }
}

/// Reads until `buffer` is full or the input ends; how many bytes it read.
fn read_full(reader: &mut impl Read, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(count) => filled += count,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// Reads a backup file: checks its magic and version, gives its [`Header`], then its records
/// one at a time up to (not including) the end record, whose count it checks.
///
/// ```
/// use tessera_host::backup::{Header, Reader, Record, Summary, Writer};
/// let header = Header {
///     created_ms: 1, node: "n1".into(), catalog_commit: 7, num_shards: 16, tenant: None,
/// };
/// let mut file = Vec::new();
/// let writer = Writer::new(&mut file, &header).unwrap();
/// writer.finish(Summary::default()).unwrap();
/// let mut reader = Reader::open(file.as_slice()).unwrap();
/// assert_eq!(reader.header(), &header);
/// assert!(reader.next_record().unwrap().is_none());
/// ```
pub struct Reader<R> {
    frames: FrameReader<R>,
    header: Header,
    summary: Option<Summary>,
}

impl<R: Read> Reader<R> {
    /// Opens a backup: its magic, version and header.
    pub fn open(mut inner: R) -> Result<Self, BackupError> {
        let mut start = [0u8; 12];
        if read_full(&mut inner, &mut start)? < start.len() || &start[..8] != MAGIC {
            return Err(BackupError::NotABackup);
        }
        let found = u32::from_be_bytes([start[8], start[9], start[10], start[11]]);
        if found > FORMAT_VERSION {
            return Err(BackupError::FutureVersion {
                found,
                supported: FORMAT_VERSION,
            });
        }
        let mut frames = FrameReader::new(inner);
        let header = match frames.next_frame()? {
            Some((Record::Header(header), _)) => header,
            Some(_) => {
                return Err(BackupError::Corrupt {
                    record: 0,
                    reason: "the first record is not the header".into(),
                });
            }
            None => return Err(BackupError::Truncated { records: 0 }),
        };
        Ok(Reader {
            frames,
            header,
            summary: None,
        })
    }

    /// What the backup is of.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The end record, once [`Reader::next_record`] reached it.
    pub fn summary(&self) -> Option<&Summary> {
        self.summary.as_ref()
    }

    /// The next record with its frame's bytes, or `None` after the end record (whose count of
    /// records it checked).
    pub fn next_frame(&mut self) -> Result<Option<(Record, Vec<u8>)>, BackupError> {
        if self.summary.is_some() {
            return Ok(None);
        }
        let record = self.frames.records();
        match self.frames.next_frame()? {
            None => Err(BackupError::Truncated { records: record }),
            Some((Record::End(summary), _)) if summary.records == record => {
                self.summary = Some(summary);
                Ok(None)
            }
            Some((Record::End(summary), _)) => Err(BackupError::Corrupt {
                record,
                reason: format!(
                    "the end record counts {} records before it; the file has {record}",
                    summary.records
                ),
            }),
            Some((Record::Header(_), _)) => Err(BackupError::Corrupt {
                record,
                reason: "a second header".into(),
            }),
            Some(next) => Ok(Some(next)),
        }
    }

    /// The next record, or `None` after the end record.
    pub fn next_record(&mut self) -> Result<Option<Record>, BackupError> {
        Ok(self.next_frame()?.map(|(record, _)| record))
    }
}

/// Writes a backup file: magic, version and header at once, then records, then the end
/// record ([`Writer::finish`]).
pub struct Writer<W: Write> {
    inner: W,
    records: u64,
    bytes: u64,
}

impl<W: Write> Writer<W> {
    /// Starts a backup of `header` on `inner`.
    pub fn new(mut inner: W, header: &Header) -> Result<Self, BackupError> {
        inner.write_all(MAGIC)?;
        inner.write_all(&FORMAT_VERSION.to_be_bytes())?;
        let mut writer = Writer {
            inner,
            records: 0,
            bytes: (MAGIC.len() + 4) as u64,
        };
        writer.write(&Record::Header(header.clone()))?;
        Ok(writer)
    }

    /// Appends `record`.
    pub fn write(&mut self, record: &Record) -> Result<(), BackupError> {
        let frame = encode_frame(record)?;
        self.write_frame(&frame)
    }

    /// Appends a frame read and checked by a [`FrameReader`], as it came.
    pub fn write_frame(&mut self, frame: &[u8]) -> Result<(), BackupError> {
        self.inner.write_all(frame)?;
        self.records += 1;
        self.bytes += frame.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Writes the end record (counting the records before it) and flushes; the writer's
    /// output.
    pub fn finish(mut self, summary: Summary) -> Result<W, BackupError> {
        let summary = Summary {
            records: self.records,
            ..summary
        };
        self.write(&Record::End(summary))?;
        self.inner.flush()?;
        Ok(self.inner)
    }
}
