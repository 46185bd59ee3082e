//! The backup file's error cases: every damaged file is refused with its own error, before a
//! record of it is used.

use super::*;
use tessera_state::ShardPart;
use tessera_state::shard_transfer::{EntityRecord, StateRow};

fn header() -> Header {
    Header {
        created_ms: 1,
        node: "n1".into(),
        catalog_commit: 9,
        num_shards: 16,
        tenant: None,
    }
}

fn shard(value: &[u8]) -> Record {
    let entity = EntityRecord {
        id: "c-1".into(),
        meta: Some((1, 5)),
        state: vec![StateRow {
            key: "value".into(),
            value: value.to_vec(),
        }],
        ..EntityRecord::default()
    };
    Record::Shard(ShardRecord {
        tenant: "acme".into(),
        entity_type: "counter".into(),
        shard: 3,
        node: "n1".into(),
        generation: 4,
        part: ShardPart {
            index: 0,
            last: true,
            entities: vec![entity],
            remembered: vec!["c-1".into()],
        },
    })
}

fn backup(records: &[Record]) -> Vec<u8> {
    let mut writer = Writer::new(Vec::new(), &header()).expect("header");
    for record in records {
        writer.write(record).expect("record");
    }
    writer.finish(Summary::default()).expect("end")
}

fn read_all(bytes: &[u8]) -> Result<Vec<Record>, BackupError> {
    let mut reader = Reader::open(bytes)?;
    let mut records = Vec::new();
    while let Some(record) = reader.next_record()? {
        records.push(record);
    }
    Ok(records)
}

#[test]
fn a_whole_backup_reads_back_record_for_record() {
    let records = vec![shard(b"one"), shard(b"two")];
    let bytes = backup(&records);
    let mut reader = Reader::open(bytes.as_slice()).expect("opens");
    assert_eq!(reader.header(), &header());
    let mut read = Vec::new();
    while let Some(record) = reader.next_record().expect("reads") {
        read.push(record);
    }
    assert_eq!(read, records);
    assert_eq!(reader.summary().map(|summary| summary.records), Some(3));
}

#[test]
fn a_file_that_is_not_a_backup_is_refused() {
    let error = read_all(b"{\"not\": \"a backup\"}").expect_err("refused");
    assert!(matches!(error, BackupError::NotABackup), "{error}");
}

#[test]
fn a_file_of_a_future_format_is_refused_before_its_records() {
    let mut bytes = backup(&[shard(b"one")]);
    bytes[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_be_bytes());
    let error = read_all(&bytes).expect_err("refused");
    assert!(
        matches!(error, BackupError::FutureVersion { found, supported } if found == FORMAT_VERSION + 1 && supported == FORMAT_VERSION),
        "{error}"
    );
}

#[test]
fn a_truncated_file_is_refused_wherever_it_is_cut() {
    let bytes = backup(&[shard(b"one"), shard(b"two")]);
    // Cut inside the header, inside a record, between records, and just before the end record.
    let end_frame = encode_frame(&Record::End(Summary {
        records: 3,
        ..Summary::default()
    }))
    .expect("frame")
    .len();
    for cut in [14, 40, bytes.len() - end_frame, bytes.len() - 1] {
        let error = read_all(&bytes[..cut]).expect_err("refused");
        assert!(
            matches!(error, BackupError::Truncated { .. }),
            "cut at {cut}: {error}"
        );
    }
}

#[test]
fn a_flipped_byte_is_caught_by_its_record_checksum() {
    let clean = backup(&[shard(b"one-value")]);
    let at = clean
        .windows(9)
        .position(|window| window == b"one-value")
        .expect("the value is in the file");
    let mut bytes = clean.clone();
    bytes[at] ^= 0x20;
    let error = read_all(&bytes).expect_err("refused");
    assert!(
        matches!(error, BackupError::Corrupt { record: 1, .. }),
        "{error}"
    );
}

#[test]
fn an_oversized_record_length_is_refused_without_reading_it() {
    let mut bytes = backup(&[]);
    let body_at = bytes.len()
        - encode_frame(&Record::End(Summary::default()))
            .expect("frame")
            .len();
    bytes.truncate(body_at);
    bytes.extend_from_slice(&(RECORD_BYTES_MAX as u32 + 1).to_be_bytes());
    bytes.extend_from_slice(&[0; 4]);
    let error = read_all(&bytes).expect_err("refused");
    assert!(matches!(error, BackupError::TooLarge { .. }), "{error}");
}

#[test]
fn an_end_record_that_miscounts_is_refused() {
    let mut writer = Writer::new(Vec::new(), &header()).expect("header");
    writer.write(&shard(b"one")).expect("record");
    let mut bytes = writer.finish(Summary::default()).expect("end");
    let end = encode_frame(&Record::End(Summary {
        records: 2,
        ..Summary::default()
    }))
    .expect("frame");
    bytes.truncate(bytes.len() - end.len());
    bytes.extend_from_slice(
        &encode_frame(&Record::End(Summary {
            records: 5,
            ..Summary::default()
        }))
        .expect("frame"),
    );
    let error = read_all(&bytes).expect_err("refused");
    assert!(matches!(error, BackupError::Corrupt { .. }), "{error}");
}
