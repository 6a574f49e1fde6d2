use std::io::Write;

use super::*;

fn records() -> Vec<Record> {
    vec![
        Record {
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::from_static(b"k1")),
            value: Some(Bytes::from_static(b"hello")),
            headers: vec![
                ("h".to_owned(), Some(Bytes::from_static(b"1"))),
                ("h".to_owned(), None),
            ],
        },
        Record {
            timestamp: 1_700_000_000_005,
            key: None,
            value: None,
            headers: vec![],
        },
    ]
}

/// A batch as a producer sends it: `records` with a producer id, compressed by `codec`.
fn produced(codec: i16, compress: impl Fn(&[u8]) -> Vec<u8>) -> Bytes {
    let mut plain = BytesMut::new();
    encode_batch(0, &records(), Timestamps::CreateTime, &mut plain);
    let mut batch = plain[..BATCH_HEADER_BYTES].to_vec();
    batch.extend_from_slice(&compress(&plain[BATCH_HEADER_BYTES..]));
    batch[21..23].copy_from_slice(&codec.to_be_bytes());
    batch[43..51].copy_from_slice(&7i64.to_be_bytes()); // producer id
    batch[51..53].copy_from_slice(&2i16.to_be_bytes()); // epoch
    batch[53..57].copy_from_slice(&10i32.to_be_bytes()); // base sequence
    reseal(&mut batch);
    Bytes::from(batch)
}

/// Rewrites the length and CRC after a change.
fn reseal(batch: &mut [u8]) {
    let length = (batch.len() - 12) as i32;
    batch[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

#[test]
fn an_encoded_batch_decodes_to_its_records_in_every_compression() {
    let gzip = |b: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    };
    let snappy = |b: &[u8]| snap::raw::Encoder::new().compress_vec(b).unwrap();
    let xerial = |b: &[u8]| {
        let block = snap::raw::Encoder::new().compress_vec(b).unwrap();
        let mut out = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        out.extend_from_slice(&(block.len() as u32).to_be_bytes());
        out.extend_from_slice(&block);
        out
    };
    let lz4 = |b: &[u8]| {
        let mut e = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
        e.write_all(b).unwrap();
        let (out, result) = e.finish();
        result.unwrap();
        out
    };
    let zstd = |b: &[u8]| zstd::encode_all(b, 1).unwrap();
    type Compress<'a> = &'a dyn Fn(&[u8]) -> Vec<u8>;
    let cases: [(i16, Compress<'_>); 6] = [
        (0, &|b: &[u8]| b.to_vec()),
        (1, &gzip),
        (2, &snappy),
        (2, &xerial),
        (3, &lz4),
        (4, &zstd),
    ];
    for (codec, compress) in cases {
        let mut budget = 1 << 20;
        let batches = decode_batches(produced(codec, compress), &mut budget).unwrap();
        assert_eq!(batches.len(), 1, "codec {codec}");
        let batch = &batches[0];
        assert_eq!(batch.records, records(), "codec {codec}");
        assert_eq!(
            (batch.producer_id, batch.producer_epoch, batch.base_sequence),
            (7, 2, 10)
        );
        assert!(!batch.transactional && !batch.control);
    }
}

#[test]
fn two_batches_back_to_back_decode_in_order() {
    let one = produced(0, |b| b.to_vec());
    let mut both = one.to_vec();
    both.extend_from_slice(&one);
    let mut budget = 0;
    assert_eq!(
        decode_batches(Bytes::from(both), &mut budget)
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn log_append_time_gives_every_record_the_batch_time() {
    let mut out = BytesMut::new();
    encode_batch(40, &records(), Timestamps::LogAppendTime(99), &mut out);
    let batch = decode_batches(out.freeze(), &mut 0).unwrap().remove(0);
    assert!(batch.records.iter().all(|r| r.timestamp == 99));
}

#[test]
fn broken_batches_are_refused_with_a_reason() {
    let good = produced(0, |b| b.to_vec()).to_vec();
    let reason = |bytes: Vec<u8>| {
        decode_batches(Bytes::from(bytes), &mut (1 << 20))
            .unwrap_err()
            .0
    };
    // A flipped byte in a record: the CRC.
    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 1;
    assert!(reason(flipped).contains("CRC"));
    // Truncated.
    assert!(reason(good[..good.len() - 3].to_vec()).contains("declares"));
    assert!(reason(good[..7].to_vec()).contains("header"));
    // Magic 1.
    let mut old = good.clone();
    old[16] = 1;
    assert!(reason(old).contains("magic 2"));
    // A record count far above what the bytes can hold.
    let mut lying = good.clone();
    lying[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
    reseal(&mut lying);
    assert!(reason(lying).contains("records in"));
    // One record fewer than the bytes hold.
    let mut short = good.clone();
    short[57..61].copy_from_slice(&1i32.to_be_bytes());
    reseal(&mut short);
    assert!(reason(short).contains("follow"));
    // A negative length.
    let mut negative = good.clone();
    negative[8..12].copy_from_slice(&(-5i32).to_be_bytes());
    assert!(reason(negative).contains("length"));
}

#[test]
fn a_compression_bomb_is_refused_at_the_budget() {
    let zeros = vec![0u8; 4 << 20];
    let bomb = |b: &[u8]| {
        let mut all = b.to_vec();
        all.extend_from_slice(&zeros);
        zstd::encode_all(&all[..], 3).unwrap()
    };
    let batch = produced(4, bomb);
    assert!(batch.len() < 64 << 10, "the bomb is small: {}", batch.len());
    let mut budget = 1 << 20;
    let error = decode_batches(batch, &mut budget).unwrap_err();
    assert!(error.0.contains("kafka.max_decompressed_bytes"), "{error}");
    let snappy = produced(2, |b| {
        let mut all = b.to_vec();
        all.extend_from_slice(&zeros);
        snap::raw::Encoder::new().compress_vec(&all).unwrap()
    });
    assert!(decode_batches(snappy, &mut (1 << 20)).is_err());
}
