//! Batches whose Arrow body uses the IPC format's own compression (LZ4_FRAME, ZSTD): they round
//! trip, keep their header fields when compressed again, shrink a compressible column, and a
//! forged uncompressed length (a decompression bomb, a negative one, a wrong one) is an error
//! before anything is decompressed, never a panic.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use mink_codec::header::{CRC_START, pos};
use mink_codec::{
    BatchMeta, BatchView, ChangeType, Compression, Encoder, Error, MAX_UNCOMPRESSED_BODY,
    Projection, batch_from_message, decode_ipc_stream, encode_batch,
};
use proptest::prelude::*;

const CODECS: [Compression; 3] = [
    Compression::Lz4Frame,
    Compression::ZSTD,
    Compression::Zstd { level: 19 },
];

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("line", DataType::Utf8, true),
    ]))
}

/// `n` rows of a log-like text column (every seventh null).
fn log_rows(n: usize) -> RecordBatch {
    let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n as i64));
    let lines: ArrayRef = Arc::new(StringArray::from_iter((0..n).map(|i| {
        (i % 7 != 3).then(|| {
            format!(
                "2026-01-01T00:00:{:02}Z INFO request handled path=/v1/tables/t{}/records status=200 bytes={}",
                i % 60,
                i % 13,
                i * 31 % 4096
            )
        })
    })));
    RecordBatch::try_new(schema(), vec![ids, lines]).unwrap()
}

fn compressed(rows: &RecordBatch, codec: Compression, meta: BatchMeta) -> Vec<u8> {
    Encoder::new()
        .with_compression(Some(codec))
        .unwrap()
        .encode(rows, None, meta)
        .unwrap()
}

fn reseal(buf: &mut [u8]) {
    let crc = crc32c::crc32c(&buf[CRC_START..]);
    buf[pos::CRC..pos::CRC + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Where each non-empty buffer of the batch's Arrow body starts, in the batch.
fn buffer_starts(batch: &[u8]) -> Vec<(usize, usize)> {
    let view = BatchView::new(batch).unwrap();
    let (meta, body) = view.message_parts().unwrap().unwrap();
    let message = arrow_ipc::root_as_message(&batch[meta]).unwrap();
    let rb = message.header_as_record_batch().unwrap();
    rb.buffers()
        .unwrap()
        .iter()
        .filter(|b| b.length() > 0)
        .map(|b| (body.start + b.offset() as usize, b.length() as usize))
        .collect()
}

#[test]
fn both_codecs_round_trip_and_shrink_a_log_column() {
    let rows = log_rows(2000);
    let plain = encode_batch(&rows, None, BatchMeta::new(1)).unwrap();
    for codec in CODECS {
        let bytes = compressed(&rows, codec, BatchMeta::new(1).with_writer(5, 9));
        let view = BatchView::new(Bytes::from(bytes.clone())).unwrap();
        view.validate().unwrap();
        assert_eq!(
            view.compression().unwrap().map(|c| c.name()),
            Some(codec.name())
        );
        assert_eq!((view.writer_id(), view.batch_sequence()), (5, 9));
        let (decoded, changes) = view.decode(&schema()).unwrap();
        assert_eq!(decoded, rows);
        assert_eq!(changes, None);
        assert!(
            bytes.len() * 4 < plain.len(),
            "{codec:?}: {} bytes compressed, {} plain",
            bytes.len(),
            plain.len()
        );
    }
    assert_eq!(
        BatchView::new(&plain[..]).unwrap().compression().unwrap(),
        None
    );
}

#[test]
fn a_zstd_level_outside_its_range_is_refused() {
    assert!(matches!(
        Encoder::new().with_compression(Some(Compression::Zstd { level: 99 })),
        Err(Error::Encode { .. })
    ));
}

#[test]
fn compressing_a_batch_again_keeps_its_header_and_change_types() {
    let rows = log_rows(50);
    let changes: Vec<ChangeType> = (0..50)
        .map(|i| ChangeType::ALL[i % ChangeType::ALL.len()])
        .collect();
    let meta = BatchMeta::new(4).with_writer(77, 123).counting_records();
    let plain = encode_batch(&rows, Some(&changes), meta).unwrap();
    let view = BatchView::new(&plain[..]).unwrap();
    let mut zstd = Encoder::new()
        .with_compression(Some(Compression::ZSTD))
        .unwrap();
    let again = zstd.compress_batch(&view, &schema()).unwrap().unwrap();
    let out = BatchView::new(&again[..]).unwrap();
    assert_eq!(out.compression().unwrap(), Some(Compression::ZSTD));
    let (h, s) = (out.header(), view.header());
    assert_eq!(
        (
            h.schema_id,
            h.attributes,
            h.writer_id,
            h.batch_sequence,
            h.record_count
        ),
        (
            s.schema_id,
            s.attributes,
            s.writer_id,
            s.batch_sequence,
            s.record_count
        )
    );
    assert_eq!(
        out.decode(&schema()).unwrap(),
        (rows.clone(), Some(changes))
    );
    // Already compressed, any codec: kept as it is. A plain encoder leaves batches alone.
    assert_eq!(zstd.compress_batch(&out, &schema()).unwrap(), None);
    let lz4 = compressed(&rows, Compression::Lz4Frame, BatchMeta::new(1));
    let lz4_view = BatchView::new(&lz4[..]).unwrap();
    assert_eq!(zstd.compress_batch(&lz4_view, &schema()).unwrap(), None);
    assert_eq!(
        Encoder::new().compress_batch(&view, &schema()).unwrap(),
        None
    );
    // A damaged batch is not compressed again: its CRC is checked first.
    let mut bad = plain.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let bad_view = BatchView::new(&bad[..]).unwrap();
    assert!(matches!(
        zstd.compress_batch(&bad_view, &schema()),
        Err(Error::CrcMismatch { .. })
    ));
}

#[test]
fn a_decompression_bomb_is_refused_before_anything_is_decompressed() {
    let rows = log_rows(100);
    for codec in CODECS {
        let good = compressed(&rows, codec, BatchMeta::new(1));
        for (claim, (at, _)) in [(1i64 << 40, 0), (MAX_UNCOMPRESSED_BODY as i64 + 1, 1)]
            .into_iter()
            .map(|(claim, i)| (claim, buffer_starts(&good)[i]))
        {
            let mut bomb = good.clone();
            bomb[at..at + 8].copy_from_slice(&claim.to_le_bytes());
            reseal(&mut bomb);
            let view = BatchView::new(Bytes::from(bomb)).unwrap();
            for result in [
                view.validate(),
                view.decode(&schema()).map(|_| ()),
                Projection::new(schema(), &[1])
                    .unwrap()
                    .project(&view)
                    .map(|_| ()),
            ] {
                let e = result.unwrap_err();
                assert!(
                    matches!(e, Error::Decompression { max, .. } if max == MAX_UNCOMPRESSED_BODY),
                    "{codec:?} claiming {claim}: {e}"
                );
                assert!(e.to_string().contains("decompressed"), "{e}");
            }
        }
    }
}

#[test]
fn a_forged_uncompressed_length_is_an_error() {
    let rows = log_rows(100);
    for codec in CODECS {
        let good = compressed(&rows, codec, BatchMeta::new(1));
        let starts = buffer_starts(&good);
        // The `id` values: 800 bytes once decompressed.
        let (at, _) = starts[0];
        let declared = i64::from_le_bytes(good[at..at + 8].try_into().unwrap());
        for forged in [-2i64, i64::MIN, 0, 799, 801, 808, declared * 2] {
            if forged == declared {
                continue;
            }
            let mut bad = good.clone();
            bad[at..at + 8].copy_from_slice(&forged.to_le_bytes());
            reseal(&mut bad);
            let view = BatchView::new(&bad[..]).unwrap();
            assert!(
                view.decode(&schema()).is_err(),
                "{codec:?}: uncompressed length {forged} instead of {declared} decoded"
            );
        }
        // A buffer too short for its prefix.
        let mut short = good.clone();
        let view = BatchView::new(&good[..]).unwrap();
        let (meta, _) = view.message_parts().unwrap().unwrap();
        let (at, length) = starts[0];
        let needle = [
            ((at - view.message_parts().unwrap().unwrap().1.start) as i64).to_le_bytes(),
            (length as i64).to_le_bytes(),
        ]
        .concat();
        let entry = short[meta.clone()]
            .windows(16)
            .position(|w| w == needle)
            .expect("the buffer's entry in the metadata");
        let length_at = meta.start + entry + 8;
        short[length_at..length_at + 8].copy_from_slice(&4i64.to_le_bytes());
        reseal(&mut short);
        let e = BatchView::new(&short[..])
            .unwrap()
            .decode(&schema())
            .unwrap_err();
        assert!(matches!(e, Error::Truncated { .. }), "{e}");
    }
}

#[test]
fn compressed_message_parts_make_a_batch_as_they_are() {
    let rows = log_rows(30);
    let stored = compressed(&rows, Compression::Lz4Frame, BatchMeta::new(2));
    let view = BatchView::new(&stored[..]).unwrap();
    let (message, body) = view.message_parts().unwrap().unwrap();
    let rebuilt = batch_from_message(BatchMeta::new(2), &stored[message], &stored[body]).unwrap();
    assert_eq!(rebuilt, stored);
}

fn ipc_stream(rows: &RecordBatch, codec: Option<arrow_ipc::CompressionType>) -> Vec<u8> {
    let options = IpcWriteOptions::default()
        .try_with_compression(codec)
        .unwrap();
    let mut writer =
        StreamWriter::try_new_with_options(Vec::new(), &rows.schema(), options).unwrap();
    writer.write(rows).unwrap();
    writer.write(&rows.slice(10, 20)).unwrap();
    writer.finish().unwrap();
    writer.into_inner().unwrap()
}

#[test]
fn a_compressed_arrow_stream_decodes_within_its_byte_bound() {
    let rows = log_rows(500);
    let plain = ipc_stream(&rows, None);
    let expected = decode_ipc_stream(&plain, &schema(), 10_000, usize::MAX).unwrap();
    for codec in [
        arrow_ipc::CompressionType::LZ4_FRAME,
        arrow_ipc::CompressionType::ZSTD,
    ] {
        let stream = ipc_stream(&rows, Some(codec));
        assert!(stream.len() * 3 < plain.len());
        let decoded = decode_ipc_stream(&stream, &schema(), 10_000, usize::MAX).unwrap();
        assert_eq!(decoded, expected);
        // The bound counts bytes once decompressed, not the bytes sent.
        let e = decode_ipc_stream(&stream, &schema(), 10_000, stream.len()).unwrap_err();
        assert!(matches!(e, Error::Decompression { .. }), "{e}");
    }
    // An uncompressed stream counts its bodies as they are.
    let e = decode_ipc_stream(&plain, &schema(), 10_000, plain.len() / 2).unwrap_err();
    assert!(matches!(e, Error::Decompression { .. }), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any 8 bytes written over any uncompressed-length prefix give an error or the same rows'
    /// shape, never a panic or an allocation past the bound.
    #[test]
    fn any_forged_prefix_is_handled(
        codec in 0..CODECS.len(),
        pick in any::<prop::sample::Index>(),
        forged in any::<i64>(),
        rows in 1usize..200,
    ) {
        let good = compressed(&log_rows(rows), CODECS[codec], BatchMeta::new(1));
        let starts = buffer_starts(&good);
        let (at, _) = starts[pick.index(starts.len())];
        let mut bad = good.clone();
        bad[at..at + 8].copy_from_slice(&forged.to_le_bytes());
        reseal(&mut bad);
        let view = BatchView::new(Bytes::from(bad)).unwrap();
        if let Ok((decoded, _)) = view.decode(&schema()) {
            prop_assert_eq!(decoded.num_rows(), rows);
        }
        let _ = Projection::new(schema(), &[1, 0]).unwrap().project(&view);
    }
}
