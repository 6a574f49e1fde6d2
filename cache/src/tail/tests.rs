//! Tail cache behaviour: contiguous reads, misses, gaps and superseding appends, eviction keeping
//! the index consistent, trims, per-stream removal.

use super::*;

fn cache(capacity_bytes: u64) -> TailCache {
    TailCache::new(&TailCacheSettings { capacity_bytes })
}

fn batch_bytes(stream_id: u64, base_offset: u64, len: usize) -> Bytes {
    let tag = (stream_id * 31 + base_offset) as u8;
    Bytes::from(vec![tag; len])
}

/// Appends `count` batches of `records` records and `len` bytes each, starting at offset `from`.
fn fill(cache: &TailCache, stream_id: u64, from: u64, count: u64, records: u64, len: usize) {
    for i in 0..count {
        let base = from + i * records;
        cache
            .append(
                stream_id,
                base,
                base + records,
                batch_bytes(stream_id, base, len),
            )
            .expect("append");
    }
}

fn bases(read: &TailRead) -> Vec<u64> {
    read.batches.iter().map(|b| b.base_offset).collect()
}

#[test]
fn reads_contiguous_batches_from_the_one_containing_the_offset() {
    let tail = cache(1 << 20);
    fill(&tail, 1, 0, 10, 10, 100);

    let all = tail.get(1, 0, usize::MAX).expect("hit");
    assert_eq!(bases(&all), (0..10).map(|i| i * 10).collect::<Vec<_>>());
    assert_eq!(all.next_offset(), 100);
    for batch in &all.batches {
        assert_eq!(batch.end_offset, batch.base_offset + 10);
        assert_eq!(batch.bytes, batch_bytes(1, batch.base_offset, 100));
    }

    let mid = tail.get(1, 35, usize::MAX).expect("hit inside a batch");
    assert_eq!(
        bases(&mid)[0],
        30,
        "the batch containing offset 35 comes first"
    );
    assert_eq!(mid.next_offset(), 100);

    let limited = tail.get(1, 20, 250).expect("hit");
    assert_eq!(
        bases(&limited),
        vec![20, 30],
        "two 100-byte batches fit in 250 bytes"
    );
    assert_eq!(limited.byte_len(), 200);

    let tiny = tail.get(1, 20, 1).expect("hit");
    assert_eq!(
        bases(&tiny),
        vec![20],
        "the first batch is returned even when larger than max_bytes"
    );
    assert_eq!(tail.metrics().tail_hits, 4);
}

#[test]
fn misses_below_and_at_or_above_the_cached_range() {
    let tail = cache(1 << 20);
    fill(&tail, 1, 100, 5, 10, 50);
    assert_eq!(tail.cached_range(1), Some(100..150));
    assert!(
        tail.get(1, 99, usize::MAX).is_none(),
        "below the first batch"
    );
    assert!(tail.get(1, 150, usize::MAX).is_none(), "at the end");
    assert!(tail.get(1, 1_000, usize::MAX).is_none(), "above the end");
    assert!(tail.get(2, 100, usize::MAX).is_none(), "unknown stream");
    assert!(tail.get(1, 149, usize::MAX).is_some(), "last record");
    let metrics = tail.metrics();
    assert_eq!((metrics.tail_hits, metrics.tail_misses), (1, 4));
}

#[test]
fn a_gap_ends_the_read_and_an_overlapping_append_supersedes_the_old_suffix() {
    let tail = cache(1 << 20);
    fill(&tail, 1, 0, 3, 10, 10); // 0..30
    fill(&tail, 1, 40, 2, 10, 10); // 40..60, gap at 30..40
    assert_eq!(tail.get(1, 0, usize::MAX).expect("hit").next_offset(), 30);
    assert!(tail.get(1, 35, usize::MAX).is_none());

    // The log is rewritten from offset 10: batches 10..20 and later are superseded.
    let rewritten = Bytes::from_static(b"rewritten");
    tail.append(1, 10, 25, rewritten.clone()).expect("append");
    let read = tail.get(1, 0, usize::MAX).expect("hit");
    assert_eq!(bases(&read), vec![0, 10]);
    assert_eq!(read.batches[1].bytes, rewritten);
    assert_eq!(tail.cached_range(1), Some(0..25));
    assert!(
        tail.get(1, 45, usize::MAX).is_none(),
        "superseded batch is gone"
    );
    tail.run_pending_tasks();
    assert_eq!(tail.indexed_batches(), 2);
    assert_eq!(tail.cached_batches(), 2);
}

#[test]
fn eviction_under_the_byte_budget_keeps_the_index_consistent() {
    // Room for about ten 1000-byte batches.
    let tail = cache(10 * (1000 + ENTRY_OVERHEAD));
    fill(&tail, 1, 0, 60, 1, 1000);
    fill(&tail, 2, 0, 60, 1, 1000);
    tail.run_pending_tasks();

    assert!(tail.weighted_size() <= 10 * (1000 + ENTRY_OVERHEAD));
    let cached = tail.cached_batches();
    assert!(cached > 0 && cached <= 10, "{cached} batches cached");
    assert_eq!(
        tail.indexed_batches() as u64,
        cached,
        "the index names exactly the cached batches"
    );
    // Every batch the index names is readable, and the most recent ones survived.
    for stream_id in [1, 2] {
        if let Some(range) = tail.cached_range(stream_id) {
            for offset in range {
                if let Some(read) = tail.get(stream_id, offset, 1) {
                    assert_eq!(read.batches[0].bytes, batch_bytes(stream_id, offset, 1000));
                }
            }
        }
    }
    assert!(tail.get(2, 59, 1).is_some(), "the newest batch is kept");
    assert!(tail.get(1, 0, 1).is_none(), "the oldest batch is evicted");
}

#[test]
fn trim_drops_batches_entirely_below_the_new_start() {
    let tail = cache(1 << 20);
    fill(&tail, 1, 0, 10, 10, 10);
    tail.trim(1, 45);
    assert!(tail.get(1, 39, usize::MAX).is_none());
    let read = tail
        .get(1, 45, usize::MAX)
        .expect("the batch straddling the new start is kept");
    assert_eq!(bases(&read)[0], 40);
    assert_eq!(tail.cached_range(1), Some(40..100));
    tail.trim(1, 1_000);
    assert_eq!(tail.cached_range(1), None);
    tail.run_pending_tasks();
    assert_eq!(tail.cached_batches(), 0);
}

#[test]
fn streams_are_isolated_and_removing_one_leaves_the_others() {
    let tail = cache(1 << 20);
    fill(&tail, 1, 0, 5, 10, 10);
    fill(&tail, 2, 0, 5, 10, 10);
    let one = tail.get(1, 0, usize::MAX).expect("hit");
    let two = tail.get(2, 0, usize::MAX).expect("hit");
    assert_ne!(one.batches[0].bytes, two.batches[0].bytes);
    assert_eq!(one.batches[0].bytes, batch_bytes(1, 0, 10));

    tail.trim(1, 30);
    assert_eq!(
        tail.cached_range(2),
        Some(0..50),
        "trimming stream 1 leaves stream 2 alone"
    );

    tail.remove_stream(1);
    assert!(tail.get(1, 30, usize::MAX).is_none());
    assert_eq!(tail.cached_range(1), None);
    assert_eq!(tail.get(2, 0, usize::MAX).expect("hit").next_offset(), 50);
    tail.run_pending_tasks();
    assert_eq!(tail.cached_batches(), 5);
}

#[test]
fn a_removed_stream_with_many_batches_is_unreadable_and_evicted_first() {
    let many = BULK_INVALIDATION as u64 * 3;
    // Room for about `many + 100` batches of 8 bytes.
    let budget = (many + 100) * (8 + ENTRY_OVERHEAD);
    let tail = cache(budget);
    fill(&tail, 2, 0, 10, 1, 8);
    fill(&tail, 1, 0, many, 1, 8);
    tail.run_pending_tasks();
    assert_eq!(tail.cached_batches(), many + 10);

    tail.remove_stream(1);
    assert_eq!(tail.cached_range(1), None);
    assert!(tail.get(1, 0, usize::MAX).is_none());
    assert!(tail.get(1, many - 1, usize::MAX).is_none());
    // The stream is reopened and appends again at offsets it had before: the new batches are
    // read, never the old ones.
    fill(&tail, 1, many - 1, 2, 1, 16);
    let again = tail
        .get(1, many - 1, usize::MAX)
        .expect("hit after removal");
    assert_eq!(bases(&again), vec![many - 1, many]);
    assert_eq!(again.batches[0].bytes, batch_bytes(1, many - 1, 16));
    assert!(
        tail.get(1, 0, usize::MAX).is_none(),
        "old batches stay unreadable"
    );

    // New data pushes the unreachable batches out, before stream 2's older ones.
    tail.get(2, 0, usize::MAX).expect("stream 2 is read");
    fill(&tail, 3, 0, many, 1, 8);
    tail.run_pending_tasks();
    assert!(tail.weighted_size() <= budget);
    assert_eq!(
        tail.get(2, 0, usize::MAX)
            .expect("stream 2 survives")
            .next_offset(),
        10
    );
    assert_eq!(
        tail.get(3, 0, 8).expect("stream 3 is cached").next_offset(),
        1
    );
}

#[test]
fn batches_arriving_out_of_order_are_all_kept() {
    let tail = cache(1 << 20);
    fill(&tail, 1, 20, 1, 10, 10); // 20..30 first
    fill(&tail, 1, 0, 1, 10, 10); // then 0..10
    assert_eq!(tail.get(1, 0, usize::MAX).expect("hit").next_offset(), 10);
    fill(&tail, 1, 10, 1, 10, 10); // the gap 10..20 last
    let all = tail.get(1, 0, usize::MAX).expect("hit");
    assert_eq!(bases(&all), vec![0, 10, 20]);
    assert_eq!(tail.cached_range(1), Some(0..30));
    // A rewrite (a batch overlapping cached ones) supersedes everything from the first batch
    // it overlaps.
    fill(&tail, 1, 5, 1, 10, 20); // 5..15 overlaps 0..10 and 10..20
    assert_eq!(tail.cached_range(1), Some(5..15));
    assert!(tail.get(1, 0, usize::MAX).is_none());
    assert_eq!(bases(&tail.get(1, 5, usize::MAX).expect("hit")), vec![5]);
    assert!(tail.get(1, 20, usize::MAX).is_none());
}

#[test]
fn an_empty_batch_is_rejected_and_changes_nothing() {
    let tail = cache(1 << 20);
    let error = tail
        .append(1, 10, 10, Bytes::new())
        .expect_err("empty batch");
    assert!(matches!(
        error,
        CacheError::EmptyBatch {
            stream_id: 1,
            base_offset: 10,
            end_offset: 10
        }
    ));
    assert_eq!(tail.cached_range(1), None);
}
