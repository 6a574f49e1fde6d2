//! Targets `wal_object` and `committed_object`: the two object layouts of s3stream, read back the
//! way recovery (a WAL object whole), compaction (a committed object whole) and the read path
//! (footer from the tail, then the index, then each block by its range) read them; and
//! `stream_manifest`: a stream's manifest or a batch of them, as a rebuild reads them.

use bytes::Bytes;
use mink_s3stream::StreamBatch;
use mink_s3stream::format::manifest::{MANIFEST_BATCH_VERSION, MAX_LABEL_LEN, StreamManifest};
use mink_s3stream::format::object::{
    self, BLOCK_HEADER_LEN, BlockEntry, FOOTER_LEN, INDEX_ENTRY_LEN, ObjectBuilder,
};
use mink_s3stream::format::wal::{self, SECTION_TRAILER_LEN, WalRecord};

use crate::{put_u32, u32_at, u64_at};

/// A WAL object: decoded whole, and checked against its reading as a committed object.
pub fn run_wal(data: &[u8]) {
    check_wal(&Bytes::copy_from_slice(data));
    let mut sealed = data.to_vec();
    seal(&mut sealed, true);
    check_wal(&Bytes::from(sealed));
}

/// A committed object: read as the read path and as compaction read it.
pub fn run_committed(data: &[u8]) {
    check_committed(&Bytes::copy_from_slice(data));
    let mut sealed = data.to_vec();
    seal(&mut sealed, false);
    check_committed(&Bytes::from(sealed));
}

fn check_wal(object: &Bytes) {
    let Ok(records) = wal::decode(object) else {
        return;
    };
    // A WAL object is a committed object: the same blocks give the same batches.
    let (_, index) =
        object::decode_object_index(object).expect("a decoded WAL object has an index");
    let mut from_blocks = Vec::new();
    for entry in &index {
        from_blocks.extend(decode_entry_block(object, entry).expect("a decoded WAL block decodes"));
    }
    assert_eq!(records.len(), from_blocks.len());
    let mut payload_bytes = 0usize;
    for (record, batch) in records.iter().zip(&from_blocks) {
        assert_eq!(record.base_offset, batch.base_offset);
        assert_eq!(record.count, batch.count);
        assert_eq!(record.payload, batch.payload);
        assert!(record.count > 0, "a WAL record covers at least one offset");
        payload_bytes += record.payload.len();
    }
    assert!(
        payload_bytes <= object.len(),
        "payloads are slices of the object"
    );
}

fn check_committed(object: &Bytes) {
    // Compaction reads the whole object.
    let whole = object::decode_object_index(object);
    // The read path reads the footer from the tail with the size the metadata names...
    let size = object.len() as u64;
    let tail = object
        .get(object.len().saturating_sub(FOOTER_LEN)..)
        .unwrap_or_default();
    let by_tail = object::decode_footer(tail, size).and_then(|range| {
        let crc = object::footer_index_crc(tail)?;
        // decode_footer promises a range that ends at the footer.
        assert_eq!(range.end, size - FOOTER_LEN as u64);
        let index = &object[range.start as usize..range.end as usize];
        Ok((
            range.clone(),
            object::decode_index(index, crc, range.start)?,
        ))
    });
    assert_eq!(
        whole.as_ref().ok(),
        by_tail.as_ref().ok(),
        "the whole-object and the tail reading agree"
    );
    // ...and a size that disagrees with the bytes (a damaged record) is an error, not a panic.
    let _ = object::decode_footer(tail, size.wrapping_mul(3) / 2);
    let Ok((range, entries)) = whole else {
        return;
    };
    for entry in &entries {
        assert!(
            entry.range().end <= range.start,
            "blocks lie before the index"
        );
        let Ok(batches) = decode_entry_block(object, entry) else {
            continue;
        };
        let mut expected = entry.start_offset;
        for batch in &batches {
            assert_eq!(
                batch.base_offset, expected,
                "batches of a block are contiguous"
            );
            assert!(batch.count > 0);
            expected = batch.end_offset();
        }
        assert_eq!(
            expected, entry.end_offset,
            "a block's batches end where its entry says"
        );
    }
}

/// The block an index entry names, cut from the object as the read path fetches it; decoded
/// whole, and as the block cache hands it out (slices of pages, here cut every 13 bytes), which
/// must read the same.
fn decode_entry_block(
    object: &Bytes,
    entry: &BlockEntry,
) -> Result<Vec<StreamBatch>, object::ObjectFormatError> {
    let block = object.slice(entry.position as usize..entry.range().end as usize);
    let whole = object::decode_block(&block, entry);
    let parts: Vec<Bytes> = (0..block.len())
        .step_by(13)
        .map(|at| block.slice(at..(at + 13).min(block.len())))
        .collect();
    let in_parts = object::decode_block_parts(&parts, entry);
    assert_eq!(
        whole.as_ref().ok(),
        in_parts.as_ref().ok(),
        "a block reads the same whole and in parts"
    );
    whole
}

/// Recomputes every CRC the footer leads to: the WAL section's (when `wal`), each block's the
/// index names, and the index's. Fields that point outside the bytes are left alone.
fn seal(bytes: &mut [u8], wal: bool) {
    let Some(footer) = bytes.len().checked_sub(FOOTER_LEN) else {
        return;
    };
    let (Some(position), Some(len)) = (u64_at(bytes, footer), u32_at(bytes, footer + 8)) else {
        return;
    };
    let Some(end) = position
        .checked_add(u64::from(len))
        .filter(|&e| e <= footer as u64)
    else {
        return;
    };
    let (start, end) = (position as usize, end as usize);
    if wal && let Some(trailer) = start.checked_sub(SECTION_TRAILER_LEN) {
        let count = u32_at(bytes, trailer).unwrap_or(0) as usize;
        if let Some(section) = trailer.checked_sub(count * 8) {
            let crc = crc32c::crc32c(&bytes[section..trailer + 4]);
            put_u32(bytes, trailer + 4, crc);
        }
    }
    let entries: Vec<(usize, usize)> = bytes[start..end]
        .chunks_exact(INDEX_ENTRY_LEN)
        .filter_map(|e| Some((u64_at(e, 24)? as usize, u32_at(e, 32)? as usize)))
        .collect();
    for (block, block_len) in entries {
        let Some(header) = block
            .checked_add(BLOCK_HEADER_LEN)
            .filter(|&h| h <= start && block_len >= BLOCK_HEADER_LEN)
        else {
            continue;
        };
        let body_len = u32_at(bytes, block + 24).unwrap_or(0) as usize;
        let Some(body_end) = header.checked_add(body_len).filter(|&b| b <= start) else {
            continue;
        };
        let crc = crc32c::crc32c_append(
            crc32c::crc32c(&bytes[block..block + 28]),
            &bytes[header..body_end],
        );
        put_u32(bytes, block + 28, crc);
    }
    let crc = crc32c::crc32c(&bytes[start..end]);
    put_u32(bytes, footer + 12, crc);
}

fn record(stream_id: u64, epoch: u64, base_offset: u64, count: u32, payload: &[u8]) -> WalRecord {
    WalRecord {
        stream_id,
        epoch,
        base_offset,
        count,
        payload: Bytes::copy_from_slice(payload),
        payload_crc: None,
    }
}

/// WAL objects of one group commit: empty, one record, several streams and epochs cut into
/// small blocks, offsets near the top of the range.
pub fn wal_seeds() -> Vec<Vec<u8>> {
    let groups = [
        vec![],
        vec![record(1, 1, 0, 1, b"x")],
        vec![
            record(9, 1, 0, 1, b""),
            record(7, 2, 100, 3, b"first batch"),
            record(9, 1, 1, 2, b"second of 9"),
            record(7, 2, 103, 1, b"next of 7"),
            record(7, 3, 100, 2, b"a newer epoch of 7"),
        ],
        (0..12)
            .map(|i| record(3 + i % 2, 1, i / 2 * 10, 10, &[i as u8; 40]))
            .collect(),
        vec![record(2, u64::MAX, u64::MAX - 8, 4, b"high offsets")],
    ];
    groups
        .into_iter()
        .flat_map(|records| {
            [64, 1 << 20].map(|block_bytes| wal::encode(records.clone(), block_bytes).0.to_vec())
        })
        .collect()
}

/// Committed objects: one stream in one block, several streams cut into many blocks.
pub fn committed_seeds() -> Vec<Vec<u8>> {
    let batches = |from: u64, n: u64, len: usize| -> Vec<StreamBatch> {
        (0..n)
            .map(|i| StreamBatch {
                base_offset: from + i * 2,
                count: 2,
                payload: Bytes::from(vec![i as u8; len]),
            })
            .collect()
    };
    let mut out = Vec::new();
    for block_bytes in [48, 200, 1 << 20] {
        let mut builder = ObjectBuilder::new(block_bytes);
        builder.add_stream(1, &batches(10, 6, 20));
        builder.add_stream(4, &batches(0, 2, 3));
        builder.add_stream(u64::MAX, &batches(u64::MAX - 20, 3, 1));
        out.push(builder.finish().0.to_vec());
    }
    out.push(ObjectBuilder::new(64).finish().0.to_vec());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_decode_and_survive_sealing() {
        for seed in wal_seeds() {
            assert!(wal::decode(&Bytes::from(seed.clone())).is_ok());
            let mut sealed = seed.clone();
            seal(&mut sealed, true);
            assert_eq!(sealed, seed, "sealing a valid object changes nothing");
            run_wal(&seed);
        }
        for seed in committed_seeds() {
            assert!(object::decode_object_index(&seed).is_ok());
            let mut sealed = seed.clone();
            seal(&mut sealed, false);
            assert_eq!(sealed, seed);
            run_committed(&seed);
        }
    }
}

/// A stream manifest (version 1) or a batch of them (version 2): decoded as a rebuild does, then
/// again with the trailing CRC recomputed.
pub fn run_manifest(data: &[u8]) {
    check_manifest(data);
    if let Some(at) = data.len().checked_sub(4) {
        let mut sealed = data.to_vec();
        let crc = crc32c::crc32c(&sealed[..at]);
        put_u32(&mut sealed, at, crc);
        check_manifest(&sealed);
    }
}

fn check_manifest(data: &[u8]) {
    let Ok(manifests) = StreamManifest::decode_any(data) else {
        return;
    };
    assert!(
        !manifests.is_empty(),
        "a decoded manifest object names a stream"
    );
    assert!(manifests.iter().all(|m| m.label.len() <= MAX_LABEL_LEN));
    // What decodes is exactly what the encoder of its version writes.
    let again = if data.get(4) == Some(&MANIFEST_BATCH_VERSION) {
        StreamManifest::encode_batch(&manifests)
    } else {
        manifests[0].encode()
    };
    assert_eq!(
        again.as_ref(),
        data,
        "a decoded manifest re-encodes to its bytes"
    );
}

/// A manifest, a batch of one and a batch of several.
pub fn manifest_seeds() -> Vec<Vec<u8>> {
    let manifest = |id: u64, label: &str| StreamManifest {
        stream_id: id,
        label: Bytes::from(label.to_owned()),
    };
    let one = manifest(
        7,
        r#"{"tablet":{"table":"t","incarnation":1,"partition":"p","bucket":0}}"#,
    );
    let several: Vec<StreamManifest> = (0..5).map(|i| manifest(100 + i, "x")).collect();
    vec![
        one.encode().to_vec(),
        StreamManifest::encode_batch(std::slice::from_ref(&one)).to_vec(),
        StreamManifest::encode_batch(&several).to_vec(),
    ]
}
