//! Random bytes and mutated valid batches (CRC recomputed so the Arrow parser is reached) never panic the
//! view, validate, decode or projection; they either succeed or return an error.

mod common;

use arrow_schema::SchemaRef;
use bytes::Bytes;
use mink_codec::header::{CRC_START, pos};
use mink_codec::{
    BatchMeta, BatchView, ChangeType, Projection, batch_from_message, batches, encode_batch,
};
use proptest::prelude::*;

fn exercise(buf: &[u8], schema: &SchemaRef, projection: &mut Projection) -> usize {
    let mut ok = 0;
    for view in batches(Bytes::copy_from_slice(buf)).flatten() {
        let _ = view.check_header();
        // Framing only, no checks first: it must hold on any bytes too.
        let _ = view.message_parts();
        if view.validate().is_ok() {
            ok += 1;
        }
        if let Ok((rows, _)) = view.decode(schema) {
            // Anything decode accepts must be fully usable.
            let _ = format!("{rows:?}");
        }
        let _ = projection.project(&view);
    }
    if let Ok(view) = BatchView::new(buf) {
        let _ = view.decode(schema);
    }
    ok
}

#[derive(Debug, Clone)]
enum Mutation {
    Set { at: usize, value: u8 },
    Flip { at: usize, bit: u8 },
    SetI32 { at: usize, value: i32 },
    Truncate { at: usize },
    Insert { at: usize, value: u8 },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<prop::sample::Index>().prop_map(|i| i.index(1 << 20));
    prop_oneof![
        (at.clone(), any::<u8>()).prop_map(|(at, value)| Mutation::Set { at, value }),
        (at.clone(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (
            at.clone(),
            prop_oneof![
                Just(0),
                Just(-1),
                Just(i32::MAX),
                Just(i32::MIN),
                any::<i32>(),
                0i32..300
            ]
        )
            .prop_map(|(at, value)| Mutation::SetI32 { at, value }),
        at.clone().prop_map(|at| Mutation::Truncate { at }),
        (at, any::<u8>()).prop_map(|(at, value)| Mutation::Insert { at, value }),
    ]
}

fn apply(buf: &mut Vec<u8>, m: &Mutation) {
    let n = buf.len().max(1);
    match *m {
        Mutation::Set { at, value } => {
            if let Some(b) = buf.get_mut(at % n) {
                *b = value;
            }
        }
        Mutation::Flip { at, bit } => {
            if let Some(b) = buf.get_mut(at % n) {
                *b ^= 1 << bit;
            }
        }
        Mutation::SetI32 { at, value } => {
            let at = at % n;
            if let Some(dst) = buf.get_mut(at..at + 4) {
                dst.copy_from_slice(&value.to_le_bytes());
            }
        }
        Mutation::Truncate { at } => buf.truncate(at % n),
        Mutation::Insert { at, value } => buf.insert(at % n, value),
    }
}

fn reseal(buf: &mut [u8]) {
    if buf.len() >= 52 {
        let crc = crc32c::crc32c(&buf[CRC_START..]);
        buf[pos::CRC..pos::CRC + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(buf in prop::collection::vec(any::<u8>(), 0..400)) {
        let rb = common::make_batch(&common::fixed_columns(), 1, 0);
        let mut projection = Projection::new(rb.schema(), &[4, 6]).unwrap();
        exercise(&buf, &rb.schema(), &mut projection);
    }

    #[test]
    fn mutated_valid_batches_never_panic(
        rows in 0usize..12,
        seed in any::<u64>(),
        append_only in any::<bool>(),
        mutations in prop::collection::vec(mutation(), 1..6),
        fix_length in any::<bool>(),
    ) {
        let rb = common::make_batch(&common::fixed_columns(), rows, seed);
        let ct = vec![ChangeType::UpdateAfter; rows];
        let mut buf = encode_batch(&rb, (!append_only).then_some(&ct[..]), BatchMeta::new(1)).unwrap();
        for m in &mutations {
            apply(&mut buf, m);
        }
        if fix_length && buf.len() >= 12 {
            let len = (buf.len() - 12) as i32;
            buf[pos::LENGTH..pos::LENGTH + 4].copy_from_slice(&len.to_le_bytes());
        }
        reseal(&mut buf);
        let mut projection = Projection::new(rb.schema(), &[6, 0, 4]).unwrap();
        exercise(&buf, &rb.schema(), &mut projection);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// A record batch that arrives as a flatbuffer message and a body apart (Arrow Flight), both
    /// mutated: assembling it never panics, and a batch it assembles validates, decodes or errors.
    #[test]
    fn mutated_message_parts_never_panic(
        rows in 1usize..12,
        seed in any::<u64>(),
        message_mutations in prop::collection::vec(mutation(), 0..4),
        body_mutations in prop::collection::vec(mutation(), 0..4),
    ) {
        let rb = common::make_batch(&common::fixed_columns(), rows, seed);
        let stored = encode_batch(&rb, None, BatchMeta::new(1)).unwrap();
        let view = BatchView::new(&stored[..]).unwrap();
        let (message, body) = view.message_parts().unwrap().unwrap();
        let (mut message, mut body) = (stored[message].to_vec(), stored[body].to_vec());
        for m in &message_mutations {
            apply(&mut message, m);
        }
        for m in &body_mutations {
            apply(&mut body, m);
        }
        if let Ok(batch) = batch_from_message(BatchMeta::new(1), &message, &body) {
            let mut projection = Projection::new(rb.schema(), &[4, 6]).unwrap();
            prop_assert_eq!(exercise(&batch, &rb.schema(), &mut projection), 1, "an assembled batch frames and validates");
        }
    }
}

/// Mutations in the Arrow metadata region specifically (where arrow's reader is most fragile): every
/// single-byte value at every metadata position, CRC recomputed.
#[test]
fn every_byte_value_at_every_metadata_position_is_handled() {
    let rb = common::make_batch(&common::fixed_columns(), 3, 5);
    let schema = rb.schema();
    let good = encode_batch(&rb, None, BatchMeta::new(1)).unwrap();
    let meta_len = i32::from_le_bytes(good[56..60].try_into().unwrap()) as usize;
    let mut projection = Projection::new(schema.clone(), &[1, 5]).unwrap();
    let mut accepted = 0;
    for at in 52..60 + meta_len {
        for value in [0u8, 1, 0x7F, 0x80, 0xFF, good[at].wrapping_add(8)] {
            let mut buf = good.clone();
            buf[at] = value;
            reseal(&mut buf);
            accepted += exercise(&buf, &schema, &mut projection);
        }
    }
    assert!(
        accepted > 0,
        "some mutations (e.g. in padding) leave the batch valid"
    );
}

/// Inputs the `decode` fuzz target once crashed on (kept in `tests/fuzz_regressions/`), replayed as the
/// fuzz target runs them: raw, then with every framed batch's CRC recomputed.
#[test]
fn fuzz_regressions_return_errors() {
    let rb = common::make_batch(&common::fixed_columns(), 1, 0);
    let schema = rb.schema();
    let mut projection = Projection::new(schema.clone(), &[6, 0, 4]).unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let mut replayed = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        exercise(&data, &schema, &mut projection);
        let mut sealed = data.clone();
        let spans: Vec<(usize, usize)> = batches(data.as_slice())
            .flatten()
            .map(|v| (v.position(), v.len()))
            .collect();
        for (at, len) in spans {
            reseal(&mut sealed[at..at + len]);
        }
        exercise(&sealed, &schema, &mut projection);
        replayed += 1;
    }
    assert!(replayed > 0);
}
