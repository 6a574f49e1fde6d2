//! Targets `writer_snapshot` and `tablet_registry`: the two values the tablet keeps in the
//! metadata KV, decoded as opening a tablet decodes them.

use std::collections::HashSet;

use mink_tablet::registry;
use mink_tablet::writers::WINDOW;
use mink_tablet::writers::snapshot::decode_states;

use crate::put_u32;

/// A writer snapshot (the opaque bytes of a `WriterSnapshot` record).
pub fn run_snapshot(data: &[u8]) {
    check_snapshot(data);
    let mut sealed = data.to_vec();
    if sealed.len() >= 9 {
        let crc = crc32c::crc32c(&sealed[9..]);
        put_u32(&mut sealed, 5, crc);
    }
    check_snapshot(&sealed);
}

fn check_snapshot(raw: &[u8]) {
    let Ok((states, _last_timestamp)) = decode_states(raw) else {
        return;
    };
    let mut seen = HashSet::new();
    for state in &states {
        assert!(seen.insert(state.writer_id), "a writer appears once");
        assert!(!state.batches.is_empty() && state.batches.len() <= WINDOW);
        assert!(state.batches.iter().all(|b| b.record_count >= 1));
        let _ = state.next_sequence();
    }
}

/// A tablet registry value.
pub fn run_registry(data: &[u8]) {
    let _ = registry::decode("mink/tablets/t/default/0", data);
    if data.len() == 17 {
        let mut sealed = data.to_vec();
        let crc = crc32c::crc32c(&sealed[..13]);
        put_u32(&mut sealed, 13, crc);
        if sealed[..5] == *b"MKTR\x01" {
            let id = registry::decode("k", &sealed).expect("a sealed value of version 1 decodes");
            assert_eq!(id.to_le_bytes(), sealed[5..13]);
        }
    }
}

/// One writer's entries: `(sequence, base_offset, offset_delta, timestamp)`.
type Window = Vec<(i32, u64, i32, i64)>;

/// A snapshot laid out as `writers::snapshot` documents it (the tablet's encoder is private).
fn snapshot(last_timestamp: i64, writers: &[(i64, Window)]) -> Vec<u8> {
    let mut body = last_timestamp.to_le_bytes().to_vec();
    body.extend_from_slice(&(writers.len() as u32).to_le_bytes());
    for (writer_id, entries) in writers {
        body.extend_from_slice(&writer_id.to_le_bytes());
        body.push(entries.len() as u8);
        for &(sequence, base_offset, delta, timestamp) in entries {
            body.extend_from_slice(&sequence.to_le_bytes());
            body.extend_from_slice(&base_offset.to_le_bytes());
            body.extend_from_slice(&delta.to_le_bytes());
            body.extend_from_slice(&timestamp.to_le_bytes());
        }
    }
    let mut out = b"MKWW\x01".to_vec();
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Snapshots with no writer, one, and several with full windows and a wrapping sequence.
pub fn snapshot_seeds() -> Vec<Vec<u8>> {
    vec![
        snapshot(i64::MIN, &[]),
        snapshot(
            1_700_000_000_000,
            &[(5, vec![(0, 0, 0, 1_700_000_000_000)])],
        ),
        snapshot(
            99,
            &[
                (
                    1,
                    (0..5)
                        .map(|s| (s, s as u64 * 3, 2, 90 + i64::from(s)))
                        .collect(),
                ),
                (
                    i64::MAX,
                    vec![
                        (i32::MAX - 1, 1000, 0, 95),
                        (i32::MAX, 1001, 9, 96),
                        (0, 1011, 0, 99),
                    ],
                ),
            ],
        ),
    ]
}

/// A registry value naming stream 42.
pub fn registry_seeds() -> Vec<Vec<u8>> {
    let mut value = b"MKTR\x01".to_vec();
    value.extend_from_slice(&42u64.to_le_bytes());
    value.extend_from_slice(&crc32c::crc32c(&value).to_le_bytes());
    vec![value]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_decode() {
        for seed in snapshot_seeds() {
            decode_states(&seed).unwrap();
            run_snapshot(&seed);
        }
        assert_eq!(registry::decode("k", &registry_seeds()[0]).unwrap(), 42);
    }
}
