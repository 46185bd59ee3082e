//! The blob store and chunk assembly: only bytes that hash to their name are kept.

use super::*;

fn blobs() -> BlobStore {
    let database = Database::builder()
        .create_with_backend(redb::backends::InMemoryBackend::new())
        .unwrap();
    BlobStore::open(Arc::new(database)).unwrap()
}

/// A blob of `chunks` full chunks and a short last one, not all one byte.
fn bytes(chunks: usize) -> Vec<u8> {
    (0..chunks * BLOB_CHUNK_BYTES + 17)
        .map(|i| (i % 251) as u8)
        .collect()
}

#[test]
fn a_blob_is_stored_in_chunks_and_read_back_whole_and_by_chunk() {
    let blobs = blobs();
    let bytes = bytes(2);
    let name = blob_name(&bytes);
    blobs.put(&name, &bytes, 5).unwrap();
    assert_eq!(blobs.get(&name).unwrap().as_deref(), Some(&bytes[..]));
    assert_eq!(blobs.size(&name).unwrap(), Some(bytes.len() as u64));
    let (size, last) = blobs.chunk(&name, 2).unwrap().unwrap();
    assert_eq!(size, bytes.len() as u64);
    assert_eq!(last, bytes[2 * BLOB_CHUNK_BYTES..]);
    assert_eq!(blobs.chunk(&name, 3).unwrap(), None, "past the last chunk");
    assert_eq!(blobs.list().unwrap(), vec![(name.clone(), 5)]);
    blobs.put(&name, &bytes, 9).unwrap();
    assert_eq!(
        blobs.list().unwrap(),
        vec![(name, 9)],
        "stored again: marked fresh, for the collector"
    );
}

#[test]
fn bytes_that_do_not_hash_to_their_name_are_refused_and_nothing_is_stored() {
    let blobs = blobs();
    let bytes = bytes(1);
    let name = blob_name(b"something else");
    assert!(matches!(
        blobs.put(&name, &bytes, 1),
        Err(BlobError::Corrupt { .. })
    ));
    assert_eq!(blobs.size(&name).unwrap(), None);
    assert!(blobs.list().unwrap().is_empty());
}

#[test]
fn an_assembly_refuses_a_corrupt_chunk_at_the_end() {
    let bytes = bytes(1);
    let mut assembly = BlobAssembly::new(&blob_name(&bytes), bytes.len() as u64).unwrap();
    assembly.push(0, &bytes[..BLOB_CHUNK_BYTES]).unwrap();
    let mut corrupt = bytes[BLOB_CHUNK_BYTES..].to_vec();
    corrupt[0] ^= 1;
    assembly.push(1, &corrupt).unwrap();
    assert!(matches!(assembly.finish(), Err(BlobError::Corrupt { .. })));
}

#[test]
fn an_assembly_takes_only_the_next_chunk_of_the_right_size() {
    let bytes = bytes(2);
    let mut assembly = BlobAssembly::new(&blob_name(&bytes), bytes.len() as u64).unwrap();
    let chunk = |index: usize| &bytes[index * BLOB_CHUNK_BYTES..(index + 1) * BLOB_CHUNK_BYTES];
    assert!(matches!(
        assembly.push(1, chunk(1)),
        Err(BlobError::BadChunk(_))
    ));
    assert!(matches!(
        assembly.push(0, &bytes[..BLOB_CHUNK_BYTES + 1]),
        Err(BlobError::BadChunk(_))
    ));
    assert!(matches!(
        assembly.push(0, &bytes[..10]),
        Err(BlobError::BadChunk(_))
    ));
    assembly.push(0, chunk(0)).unwrap();
    assembly.push(1, chunk(1)).unwrap();
    assert!(matches!(
        assembly.push(2, &bytes[2 * BLOB_CHUNK_BYTES..][..16]),
        Err(BlobError::BadChunk(_))
    ));
    assembly.push(2, &bytes[2 * BLOB_CHUNK_BYTES..]).unwrap();
    assert!(assembly.is_complete());
    assert!(assembly.push(3, &[1]).is_err(), "nothing past the end");
    assert_eq!(assembly.finish().unwrap(), bytes);
}

#[test]
fn a_blob_is_bounded_in_size() {
    assert!(matches!(
        BlobAssembly::new("x", 0),
        Err(BlobError::BadSize(0))
    ));
    let over = PLUGIN_BYTES_MAX as u64 + 1;
    assert!(matches!(
        BlobAssembly::new("x", over),
        Err(BlobError::BadSize(_))
    ));
}

#[test]
fn garbage_collection_takes_unused_old_blobs_a_bounded_number_at_a_time() {
    let blobs = blobs();
    let names: Vec<String> = (0..4u8)
        .map(|i| {
            let bytes = vec![i; 10];
            blobs.put(&blob_name(&bytes), &bytes, u64::from(i)).unwrap();
            blob_name(&bytes)
        })
        .collect();
    let used = |name: &str| name == names[0];
    // Blob 3 is too young; blob 0 is used; of 1 and 2 only one goes per call.
    assert_eq!(blobs.collect_garbage(used, 3, 1).unwrap(), 1);
    assert_eq!(blobs.collect_garbage(used, 3, 1).unwrap(), 1);
    assert_eq!(blobs.collect_garbage(used, 3, 1).unwrap(), 0);
    let left: Vec<String> = blobs.list().unwrap().into_iter().map(|(n, _)| n).collect();
    let mut expected = vec![names[0].clone(), names[3].clone()];
    expected.sort();
    assert_eq!(left, expected);
    assert_eq!(
        blobs.chunk(&names[1], 0).unwrap(),
        None,
        "its chunks went too"
    );
}
