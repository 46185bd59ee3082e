//! Tests of [`FileJournal`] against real files: torn tails, torn superblock copies, corrupt
//! synced records, directory creation, compaction, and a replica recovering from disk.

use super::*;
use crate::config::Config;
use crate::message::{CHECKSUM_ROOT, Message, OpNumber, Request};
use crate::replica::Replica;
use crate::state_machine::{KeyValue, KeyValueOperation};

fn entry(op: OpNumber, parent: u64) -> Entry {
    let request = Request {
        client: 1,
        request_number: op,
        operation: vec![op as u8],
    };
    Entry::new(op, 0, parent, vec![request])
}

fn superblock(view: u64, commit: OpNumber, op_head: OpNumber, head: u64) -> Superblock {
    Superblock {
        view,
        log_view: view,
        commit,
        op_head,
        head_checksum: head,
        checkpoint_op: 0,
        checkpoint_state_checksum: 0,
        forgetful: false,
    }
}

fn overwrite(path: &Path, offset: u64, bytes: &[u8]) {
    let mut file = OpenOptions::new().write(true).open(path).expect("open");
    file.seek(SeekFrom::Start(offset)).expect("seek");
    file.write_all(bytes).expect("overwrite");
}

fn put(replica: &mut Replica<FileJournal, KeyValue>, number: u64) {
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

#[test]
fn unsynced_writes_are_lost_and_a_torn_tail_is_cut() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("journal");
    let first = entry(1, CHECKSUM_ROOT);
    {
        let mut journal = FileJournal::open(&path).expect("open");
        journal.append_entry(&first);
        journal.write_superblock(&superblock(0, 1, 1, first.checksum));
        journal.sync();
        let second = entry(2, first.checksum);
        journal.append_entry(&second);
        journal.write_superblock(&superblock(0, 2, 2, second.checksum));
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
fn a_torn_superblock_copy_recovers_from_the_other() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("journal");
    let first = entry(1, CHECKSUM_ROOT);
    let newest_slot = {
        let mut journal = FileJournal::open(&path).expect("open");
        journal.append_entry(&first);
        journal.write_superblock(&superblock(1, 1, 1, first.checksum));
        journal.sync();
        journal.write_superblock(&superblock(2, 1, 1, first.checksum));
        journal.sync();
        journal.sequence % 2
    };
    overwrite(&path, newest_slot * SUPERBLOCK_SLOT_BYTES + 20, &[0xff; 16]);

    let mut journal = FileJournal::open(&path).expect("reopen");
    let recovered = journal.recover().expect("the other copy is intact");
    assert_eq!(recovered.superblock.view, 1);
    assert_eq!(recovered.log, vec![first.clone()]);
    journal.write_superblock(&superblock(3, 1, 1, first.checksum));
    journal.sync();
    let recovered = FileJournal::open(&path)
        .expect("reopen")
        .recover()
        .expect("recover");
    assert_eq!(recovered.superblock.view, 3, "the torn slot was rewritten");
}

#[test]
fn a_corrupt_synced_record_refuses_to_start_and_names_file_and_offset() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("journal");
    let first = entry(1, CHECKSUM_ROOT);
    let second = entry(2, first.checksum);
    {
        let mut journal = FileJournal::open(&path).expect("open");
        journal.append_entry(&first);
        journal.append_entry(&second);
        journal.write_superblock(&superblock(0, 2, 2, second.checksum));
        journal.sync();
    }
    let mut first_frame = Vec::new();
    append_frame(&mut first_frame, &Record::Entry(first));
    let second_offset = RECORDS_START + first_frame.len() as u64;
    overwrite(&path, second_offset + 12, &[0x55]);

    let error = FileJournal::open(&path)
        .expect("reopen")
        .recover()
        .expect_err("corruption in the synced region is refused");
    match &error {
        JournalError::Corrupt { location, offset } => {
            assert_eq!(*offset, second_offset);
            assert!(location.ends_with("journal"));
        }
        other => panic!("expected a corruption error, got {other:?}"),
    }
    let message = error.to_string();
    assert!(message.contains(&second_offset.to_string()) && message.contains("journal"));
}

#[test]
fn creating_a_journal_creates_and_syncs_its_directory() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("replica-0").join("journal");
    let journal = FileJournal::open(&path).expect("open creates the directory");
    assert!(path.exists());
    assert_eq!(journal.directory_syncs(), 1);
    drop(journal);
    let reopened = FileJournal::open(&path).expect("reopen");
    assert_eq!(
        reopened.directory_syncs(),
        0,
        "an existing file needs no directory sync"
    );
}

#[test]
fn the_file_stays_bounded_over_many_checkpoints() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("journal");
    let mut config = Config::new(1, 0);
    config.checkpoint_interval_ops = 16;
    config.batch_requests_max = 1;
    let journal = FileJournal::open(&path).expect("open");
    let mut replica = Replica::format(config, journal, KeyValue::default()).expect("format");
    let mut size_max = 0;
    for number in 1..=600 {
        put(&mut replica, number);
        size_max = size_max.max(std::fs::metadata(&path).expect("metadata").len());
    }
    assert_eq!(replica.commit(), 600);
    assert!(replica.checkpoint().op >= 592);
    assert!(
        replica.journal_mut().directory_syncs() >= 30,
        "one rename per checkpoint"
    );
    assert!(
        size_max < 64 * 1024,
        "the journal stays a few intervals long: {size_max} bytes"
    );
    drop(replica);

    let journal = FileJournal::open(&path).expect("reopen");
    let recovered = Replica::open(config, journal, KeyValue::default(), 1).expect("recover");
    assert_eq!(recovered.commit(), 600);
    assert_eq!(recovered.state_machine().get(0), Some(600));
    assert_eq!(recovered.state_machine().get(2), Some(599));
}

#[test]
fn a_replica_on_disk_recovers_its_committed_state_after_a_crash() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("journal");
    let journal = FileJournal::open(&path).expect("open");
    let mut replica =
        Replica::format(Config::new(1, 0), journal, KeyValue::default()).expect("format");
    for number in 1..=20 {
        put(&mut replica, number);
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

#[test]
fn a_journal_created_but_never_written_is_blank_and_a_written_one_is_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("replica.journal");
    assert!(FileJournal::is_blank(&path).expect("readable"), "no file");
    // The file open() makes, as a crash before the first superblock leaves it.
    drop(FileJournal::open(&path).expect("opens"));
    assert!(FileJournal::is_blank(&path).expect("readable"));
    assert!(
        FileJournal::open(&path).expect("opens").recover().is_err(),
        "it holds no superblock to recover from"
    );
    // A first superblock write torn part way: still blank.
    overwrite(&path, 0, &[0x5a; 40]);
    assert!(FileJournal::is_blank(&path).expect("readable"));
    let journal = FileJournal::open(&path).expect("opens");
    let mut replica =
        Replica::start_empty(Config::new(1, 0), journal, KeyValue::default(), 7).expect("formats");
    put(&mut replica, 1);
    drop(replica);
    assert!(!FileJournal::is_blank(&path).expect("readable"));
    // Its superblocks zeroed by corruption: not blank (records follow), so refused, not
    // started empty.
    overwrite(&path, 0, &[0; 2 * SUPERBLOCK_SLOT_BYTES as usize]);
    assert!(!FileJournal::is_blank(&path).expect("readable"));
}
