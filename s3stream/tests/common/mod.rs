//! Helpers of the engine's integration tests: manual compaction, appends of numbered batches
//! and reads of everything back.

use std::time::Duration;

use bytes::Bytes;
use mink_s3stream::{CompactionSettings, EngineSettings, ReadBound, Stream};

/// How long a test waits for an append to be durable.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// Settings with the background compactor effectively off, so tests decide when it runs.
pub(crate) fn manual() -> EngineSettings {
    EngineSettings {
        compaction: CompactionSettings {
            interval: Duration::from_secs(3600),
            trigger_bytes: u64::MAX,
            ..CompactionSettings::default()
        },
        ..EngineSettings::default()
    }
}

/// The payload of the batch at `offset`.
pub(crate) fn payload(offset: u64) -> Bytes {
    Bytes::from(format!("batch at {offset}").into_bytes())
}

/// Appends `n` batches of 2 offsets each and waits until all are durable.
pub(crate) async fn append_n(stream: &Stream, n: u64) {
    for _ in 0..n {
        let next = stream.offsets().next;
        let pending = stream.append_at(next, 2, payload(next)).await.unwrap();
        assert_eq!(pending.base_offset, next);
        tokio::time::timeout(WAIT, pending.durable())
            .await
            .unwrap()
            .unwrap();
    }
}

/// Reads everything up to the confirm offset and checks it is contiguous from `from`.
pub(crate) async fn read_all(stream: &Stream, from: u64) -> Vec<(u64, Bytes)> {
    let confirm = stream.offsets().confirm;
    let mut out = Vec::new();
    let mut cursor = from;
    while cursor < confirm {
        let batches = stream
            .fetch(cursor, u64::MAX, 1 << 20, ReadBound::Confirmed)
            .await
            .unwrap();
        assert!(!batches.is_empty(), "no data at {cursor} below {confirm}");
        for batch in batches {
            assert!(batch.base_offset <= cursor && cursor < batch.end_offset());
            out.push((batch.base_offset, batch.payload.clone()));
            cursor = batch.end_offset();
        }
    }
    out
}

/// The batches [`append_n`] wrote from `from` to `to`.
pub(crate) fn expected(from: u64, to: u64) -> Vec<(u64, Bytes)> {
    (from..to).step_by(2).map(|o| (o, payload(o))).collect()
}
