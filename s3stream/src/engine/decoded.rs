//! Blocks of committed objects read more than once, kept decoded.
//!
//! A read decodes each block from the block cache's pages: it checks the block's CRC32C over
//! the whole block and copies every batch that crosses from one page into the next. For a warm
//! block that work is the same each time, and for a projected read of wide batches it is most
//! of the read (a batch of a few columns out of ten still checks and copies all ten). A block
//! decoded a second time is kept here as its batches in one buffer of their own: a later read
//! takes slices of it, with no CRC and no copy.
//!
//! Only a block decoded again while it is still among the most recent `budget` bytes decoded is
//! kept (the first decode only marks it as seen, by its size): an LRU cache of that budget
//! would have held it. A read that passes once, or again and again, over more history than
//! the budget, a catch-up replay, copies nothing and evicts nothing here.
//! The buffer is a copy, not slices of pages, so an entry holds exactly the bytes it weighs and
//! never keeps a page alive after the block cache evicted it.

use std::sync::Arc;

use bytes::BytesMut;
use moka::policy::EvictionPolicy;
use moka::sync::Cache;

use crate::batch::StreamBatch;

/// A block: its object's id and its position in the object.
type BlockKey = (u64, u64);

/// What an entry costs beside its bytes, per batch (the batch's offsets and its slice).
const PER_BATCH: usize = std::mem::size_of::<StreamBatch>();

/// Blocks decoded more than once, within a byte budget (none when the budget is 0).
pub(crate) struct DecodedBlocks {
    cache: Option<Kept>,
}

struct Kept {
    blocks: Cache<BlockKey, Arc<[StreamBatch]>>,
    /// Blocks decoded lately, with their sizes, within the same budget (keys only).
    seen: Cache<BlockKey, u32>,
}

impl DecodedBlocks {
    /// Blocks within `capacity_bytes`; 0 keeps none.
    pub(crate) fn new(capacity_bytes: u64) -> Self {
        let cache = (capacity_bytes > 0).then(|| Kept {
            blocks: Cache::builder()
                .max_capacity(capacity_bytes)
                .eviction_policy(EvictionPolicy::lru())
                .weigher(|_: &BlockKey, batches: &Arc<[StreamBatch]>| {
                    u32::try_from(weight(batches)).unwrap_or(u32::MAX)
                })
                .build(),
            seen: Cache::builder()
                .max_capacity(capacity_bytes)
                .eviction_policy(EvictionPolicy::lru())
                .weigher(|_: &BlockKey, bytes: &u32| *bytes)
                .build(),
        });
        DecodedBlocks { cache }
    }

    /// The batches of block `position` of object `object_id`, if kept.
    pub(crate) fn get(&self, object_id: u64, position: u64) -> Option<Arc<[StreamBatch]>> {
        self.cache.as_ref()?.blocks.get(&(object_id, position))
    }

    /// A block's batches as just decoded (CRC checked): kept, copied into one buffer, when the
    /// block was decoded lately, else only marked as seen. Returns the batches to read.
    pub(crate) fn decoded(
        &self,
        object_id: u64,
        position: u64,
        batches: Vec<StreamBatch>,
    ) -> Arc<[StreamBatch]> {
        let Some(kept) = &self.cache else {
            return batches.into();
        };
        let key = (object_id, position);
        if kept.seen.get(&key).is_none() {
            let bytes = weight(&batches);
            kept.seen
                .insert(key, u32::try_from(bytes).unwrap_or(u32::MAX));
            return batches.into();
        }
        let batches = contiguous(batches);
        kept.blocks.insert(key, batches.clone());
        batches
    }
}

/// Bytes an entry holds.
fn weight(batches: &[StreamBatch]) -> usize {
    batches
        .iter()
        .map(|b| b.payload.len() + PER_BATCH)
        .sum::<usize>()
}

/// The batches with their payloads copied, back to back, into one new buffer.
fn contiguous(batches: Vec<StreamBatch>) -> Arc<[StreamBatch]> {
    let total = batches.iter().map(|b| b.payload.len()).sum();
    let mut buffer = BytesMut::with_capacity(total);
    for batch in &batches {
        buffer.extend_from_slice(&batch.payload);
    }
    let buffer = buffer.freeze();
    let mut at = 0;
    batches
        .into_iter()
        .map(|batch| {
            let len = batch.payload.len();
            let payload = buffer.slice(at..at + len);
            at += len;
            StreamBatch { payload, ..batch }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn batch(base_offset: u64, bytes: &'static [u8]) -> StreamBatch {
        StreamBatch {
            base_offset,
            count: 1,
            payload: Bytes::from_static(bytes),
        }
    }

    #[test]
    fn a_block_is_kept_from_its_second_decode_in_one_buffer() {
        let blocks = DecodedBlocks::new(1 << 20);
        let decode = || vec![batch(0, b"first"), batch(1, b"second")];
        assert!(blocks.get(7, 0).is_none());
        let once = blocks.decoded(7, 0, decode());
        assert_eq!(once.len(), 2);
        assert!(blocks.get(7, 0).is_none(), "one decode only marks it seen");
        let twice = blocks.decoded(7, 0, decode());
        assert_eq!(&*twice, &decode()[..], "the same batches");
        let kept = blocks.get(7, 0).expect("kept after the second decode");
        assert_eq!(&*kept, &decode()[..]);
        // The payloads are slices of one new buffer, back to back.
        let (a, b) = (&kept[0].payload, &kept[1].payload);
        assert_eq!(a.as_ptr().wrapping_add(a.len()), b.as_ptr());
        assert_ne!(a.as_ptr(), b"first".as_ptr());
        assert!(blocks.get(7, 1).is_none(), "another block of the object");
        assert!(blocks.get(8, 0).is_none(), "another object");
    }

    #[test]
    fn a_loop_over_more_than_the_budget_copies_nothing() {
        static PAYLOAD: [u8; 4096] = [7; 4096];
        let blocks = DecodedBlocks::new(64 << 10);
        // 32 blocks of 4 KiB, read in order three times: each comes back after 128 KiB.
        for _ in 0..3 {
            for position in 0..32 {
                let batches = blocks.decoded(1, position, vec![batch(position, &PAYLOAD)]);
                assert_eq!(batches[0].payload.as_ptr(), PAYLOAD.as_ptr(), "not copied");
                blocks
                    .cache
                    .as_ref()
                    .expect("a budget")
                    .seen
                    .run_pending_tasks();
            }
        }
        assert!((0..32).all(|p| blocks.get(1, p).is_none()));
    }

    #[test]
    fn a_budget_of_zero_keeps_nothing() {
        let blocks = DecodedBlocks::new(0);
        for _ in 0..3 {
            blocks.decoded(1, 0, vec![batch(0, b"x")]);
        }
        assert!(blocks.get(1, 0).is_none());
    }

    #[test]
    fn the_budget_bounds_what_is_kept() {
        static PAYLOAD: [u8; 4096] = [7; 4096];
        let blocks = DecodedBlocks::new(64 << 10);
        for position in 0..64 {
            for _ in 0..2 {
                blocks.decoded(1, position, vec![batch(position, &PAYLOAD)]);
            }
        }
        let kept = blocks.cache.as_ref().expect("a budget");
        kept.blocks.run_pending_tasks();
        assert!(kept.blocks.weighted_size() <= 64 << 10);
        let held = (0..64).filter(|&p| blocks.get(1, p).is_some()).count();
        assert!(
            held > 0 && held < 64,
            "{held} of 64 blocks of 4 KiB in 64 KiB"
        );
    }
}
