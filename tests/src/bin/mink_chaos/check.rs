//! The checks of one bucket's final log against the acknowledgements and its reader's view:
//! nothing acknowledged lost, nothing duplicated, offsets contiguous, readers never ahead of the
//! truth.

use std::collections::{BTreeMap, HashMap};

use crate::final_read::LoggedBatch;
use crate::journal::{Ack, SeenBatch};

#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) acked_rows: u64,
    pub(crate) acked_batches: u64,
    pub(crate) lost: u64,
    pub(crate) duplicated: u64,
    pub(crate) logged_rows: u64,
    /// Acknowledged batches wholly below the final log start (retention trimmed them).
    pub(crate) trimmed_batches: u64,
}

/// Checks one bucket's final log, which begins at `log_start` (0 unless retention trimmed it),
/// against the acknowledgements and the reader's view. What lies below the log start is gone
/// by design; everything acknowledged at or above it must be there.
pub(crate) fn check_bucket(
    bucket: u32,
    log: &[LoggedBatch],
    log_start: u64,
    acks: &[&Ack],
    reader: Option<&Vec<SeenBatch>>,
    tally: &mut Tally,
) -> Vec<String> {
    let mut problems = Vec::new();
    // Offsets contiguous from the log start.
    let mut expected = log_start;
    for b in log {
        if b.batch.base_offset != expected {
            problems.push(format!(
                "bucket {bucket}: offsets not contiguous: expected a batch at {expected}, found \
                 one at {} (writer {} sequence {})",
                b.batch.base_offset, b.batch.writer_id, b.batch.sequence
            ));
        }
        if b.rows.len() as u64 != b.batch.record_count {
            problems.push(format!(
                "bucket {bucket}: the batch at {} says {} records and holds {} rows",
                b.batch.base_offset,
                b.batch.record_count,
                b.rows.len()
            ));
        }
        expected = b.batch.base_offset + b.batch.record_count;
    }
    // Row ids exactly once.
    let mut where_row: HashMap<i64, Vec<u64>> = HashMap::new();
    for b in log {
        for (i, id) in b.rows.iter().enumerate() {
            where_row
                .entry(*id)
                .or_default()
                .push(b.batch.base_offset + i as u64);
        }
        tally.logged_rows += b.rows.len() as u64;
    }
    let mut duplicated: BTreeMap<i64, &Vec<u64>> = BTreeMap::new();
    for (id, offsets) in &where_row {
        if offsets.len() > 1 {
            duplicated.insert(*id, offsets);
        }
    }
    tally.duplicated += duplicated.values().map(|o| o.len() as u64 - 1).sum::<u64>();
    for (id, offsets) in duplicated.iter().take(20) {
        problems.push(format!(
            "bucket {bucket}: row {id} is in the log {} times, at offsets {offsets:?}",
            offsets.len()
        ));
    }
    // Every acknowledged batch where its acknowledgement said; every logged batch acknowledged.
    let by_offset: HashMap<u64, &LoggedBatch> =
        log.iter().map(|b| (b.batch.base_offset, b)).collect();
    let mut acked_keys = HashMap::new();
    let mut lost_rows = Vec::new();
    for ack in acks {
        tally.acked_batches += 1;
        tally.acked_rows += ack.rows.len() as u64;
        let end = ack.base_offset + ack.rows.len() as u64;
        if end <= log_start {
            tally.trimmed_batches += 1;
            continue;
        }
        if ack.base_offset < log_start {
            problems.push(format!(
                "bucket {bucket}: the log starts at {log_start}, inside the batch acknowledged at \
                 {}..{end} (writer {} sequence {}): a trim cut a batch",
                ack.base_offset, ack.writer_id, ack.sequence
            ));
            continue;
        }
        if let Some(previous) = acked_keys.insert((ack.writer_id, ack.sequence), ack.base_offset)
            && previous != ack.base_offset
        {
            problems.push(format!(
                "bucket {bucket}: writer {} sequence {} was acknowledged at offset {previous} and \
                 again at {}",
                ack.writer_id, ack.sequence, ack.base_offset
            ));
        }
        for (i, id) in ack.rows.iter().enumerate() {
            let at = ack.base_offset + i as u64;
            match where_row.get(id) {
                None => lost_rows.push((*id, at)),
                Some(offsets) if !offsets.contains(&at) => problems.push(format!(
                    "bucket {bucket}: row {id} was acknowledged at offset {at} but is at \
                     {offsets:?}"
                )),
                Some(_) => {}
            }
        }
        match by_offset.get(&ack.base_offset) {
            Some(b) if b.batch.writer_id == ack.writer_id && b.batch.sequence == ack.sequence => {}
            Some(b) => problems.push(format!(
                "bucket {bucket}: offset {} was acknowledged to writer {} sequence {} but holds \
                 writer {} sequence {}",
                ack.base_offset, ack.writer_id, ack.sequence, b.batch.writer_id, b.batch.sequence
            )),
            None => problems.push(format!(
                "bucket {bucket}: no batch starts at offset {}, acknowledged to writer {} \
                 sequence {}",
                ack.base_offset, ack.writer_id, ack.sequence
            )),
        }
    }
    tally.lost += lost_rows.len() as u64;
    for (id, at) in lost_rows.iter().take(20) {
        problems.push(format!(
            "bucket {bucket}: acknowledged row {id} (offset {at}) is lost"
        ));
    }
    for b in log {
        if !acked_keys.contains_key(&(b.batch.writer_id, b.batch.sequence)) {
            problems.push(format!(
                "bucket {bucket}: the batch at {} (writer {} sequence {}) was never acknowledged \
                 to anyone",
                b.batch.base_offset, b.batch.writer_id, b.batch.sequence
            ));
        }
    }
    // The reader saw a prefix of the final log (from its log start: what the reader read
    // below it was trimmed since).
    if let Some(seen) = reader {
        let seen: Vec<&SeenBatch> = seen.iter().filter(|s| s.base_offset >= log_start).collect();
        for (i, s) in seen.iter().enumerate() {
            match log.get(i) {
                Some(b) if b.batch == **s => {}
                other => {
                    problems.push(format!(
                        "bucket {bucket}: the reader's batch #{i} {s:?} differs from the final \
                         log's {:?}",
                        other.map(|b| &b.batch)
                    ));
                    break;
                }
            }
        }
        if seen.len() != log.len() {
            problems.push(format!(
                "bucket {bucket}: the reader read {} batches, the log holds {}",
                seen.len(),
                log.len()
            ));
        }
    } else {
        problems.push(format!("bucket {bucket}: the reader did not finish"));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base: u64, writer_id: i64, sequence: i32, rows: &[i64]) -> LoggedBatch {
        LoggedBatch {
            batch: SeenBatch {
                base_offset: base,
                record_count: rows.len() as u64,
                writer_id,
                sequence,
            },
            rows: rows.to_vec(),
        }
    }

    fn ack(base: u64, writer_id: i64, sequence: i32, rows: &[i64]) -> Ack {
        Ack {
            bucket: 0,
            writer_id,
            sequence,
            base_offset: base,
            rows: rows.to_vec(),
        }
    }

    fn check(log: &[LoggedBatch], acks: &[Ack], reader: &[SeenBatch]) -> (Vec<String>, Tally) {
        let mut tally = Tally::default();
        let acks: Vec<&Ack> = acks.iter().collect();
        let reader = reader.to_vec();
        let start = log.first().map_or(0, |b| b.batch.base_offset);
        let problems = check_bucket(0, log, start, &acks, Some(&reader), &mut tally);
        (problems, tally)
    }

    #[test]
    fn below_a_moved_log_start_only_whole_acknowledged_batches_may_be_gone() {
        // Retention trimmed to 3: the first batch is gone, the one at 3 must be there.
        let log = [batch(3, 2, 0, &[20]), batch(4, 3, 0, &[30])];
        let acks = [
            ack(0, 1, 0, &[10, 11, 12]),
            ack(3, 2, 0, &[20]),
            ack(4, 3, 0, &[30]),
        ];
        let seen = [
            SeenBatch {
                base_offset: 0,
                record_count: 3,
                writer_id: 1,
                sequence: 0,
            },
            log[0].batch.clone(),
            log[1].batch.clone(),
        ];
        let (problems, tally) = check(&log, &acks, &seen);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!((tally.trimmed_batches, tally.lost), (1, 0));
        // A log start inside an acknowledged batch, and a lost batch above it, are reported.
        let log = [batch(4, 3, 0, &[30])];
        let acks = [
            ack(2, 1, 0, &[10, 11, 12]),
            ack(5, 2, 0, &[20]),
            ack(4, 3, 0, &[30]),
        ];
        let (problems, tally) = check(&log, &acks, &[]);
        let text = problems.join("\n");
        assert!(text.contains("a trim cut a batch"), "{text}");
        assert!(
            text.contains("acknowledged row 20 (offset 5) is lost"),
            "{text}"
        );
        assert_eq!(tally.lost, 1);
    }

    #[test]
    fn a_clean_log_passes() {
        let log = [batch(0, 1, 0, &[10, 11]), batch(2, 2, 0, &[20])];
        let acks = [ack(0, 1, 0, &[10, 11]), ack(2, 2, 0, &[20])];
        let seen: Vec<SeenBatch> = log.iter().map(|b| b.batch.clone()).collect();
        let (problems, tally) = check(&log, &acks, &seen);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!((tally.acked_rows, tally.lost, tally.duplicated), (3, 0, 0));
    }

    #[test]
    fn a_duplicated_row_a_lost_row_and_a_gap_are_reported() {
        // Writer 1's batch was appended twice (a retry not recognised as a duplicate), writer
        // 2's acknowledged batch is missing, and offset 4 is skipped.
        let log = [
            batch(0, 1, 0, &[10, 11]),
            batch(2, 1, 0, &[10, 11]),
            batch(5, 3, 0, &[30]),
        ];
        let acks = [
            ack(0, 1, 0, &[10, 11]),
            ack(4, 2, 0, &[20]),
            ack(5, 3, 0, &[30]),
        ];
        let seen: Vec<SeenBatch> = log.iter().map(|b| b.batch.clone()).collect();
        let (problems, tally) = check(&log, &acks, &seen);
        assert_eq!((tally.lost, tally.duplicated), (1, 2));
        let text = problems.join("\n");
        assert!(text.contains("row 10 is in the log 2 times"), "{text}");
        assert!(
            text.contains("acknowledged row 20 (offset 4) is lost"),
            "{text}"
        );
        assert!(text.contains("expected a batch at 4"), "{text}");
    }

    #[test]
    fn a_reader_that_saw_data_the_log_no_longer_holds_is_reported() {
        let log = [batch(0, 1, 0, &[10])];
        let acks = [ack(0, 1, 0, &[10])];
        let phantom = SeenBatch {
            base_offset: 0,
            record_count: 1,
            writer_id: 9,
            sequence: 0,
        };
        let (problems, _) = check(&log, &acks, &[phantom]);
        assert!(
            problems
                .iter()
                .any(|p| p.contains("differs from the final log")),
            "{problems:?}"
        );
    }
}
