//! Id allocators: writer ids, stream ids, object ids and table incarnations, unique across processes, nodes and restarts.
//!
//! Each kind has one counter in the KV (`mink/ids/{kind}`, an [`crate::value`] record holding the
//! next id nobody has been given). An allocator takes a whole block of ids with one compare-and-swap
//! on the counter and hands them out locally, so a hot allocator costs one round trip per block.
//! Ids of a block that a process never uses are lost when it exits; ids are unique, not dense.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{InvalidRequest, MetaError, Result};
use crate::keys;
use crate::kv::{CasOutcome, MetaKv, MetaKvExt};
use crate::records::IdCounter;
use crate::value::{decode, encode};

/// How many times a block reservation retries a lost compare-and-swap before giving up.
const MAX_ATTEMPTS: u32 = 64;

/// The id spaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdKind {
    /// Idempotent writer ids (Flight `init_writer` and Kafka `InitProducerId` share it).
    Writer,
    /// Stream ids.
    Stream,
    /// Object ids (WAL, stream-set and stream objects).
    Object,
    /// Table incarnations (one per table created).
    Table,
    /// Kafka broker ids (one per node id, kept for good under `mink/broker-ids/`).
    Broker,
}

impl IdKind {
    /// The counter's key.
    pub fn key(self) -> String {
        let name = match self {
            IdKind::Writer => "writer",
            IdKind::Stream => "stream",
            IdKind::Object => "object",
            IdKind::Table => "table",
            IdKind::Broker => "broker",
        };
        format!("{}{name}", keys::IDS)
    }

    /// The first id the kind may not hand out: writer ids share the batch header's writer field
    /// with an epoch and stay below 2^48 (docs/writer-identity.md); the others may use any u64.
    pub fn limit(self) -> u64 {
        match self {
            IdKind::Writer => 1 << 48,
            _ => u64::MAX,
        }
    }
}

/// Takes `count` fresh ids of `kind` straight from the KV counter.
pub async fn reserve_block(kv: &dyn MetaKv, kind: IdKind, count: u64) -> Result<Range<u64>> {
    reserve_at(kv, kind.key(), count, kind.limit()).await
}

/// Takes `count` fresh ids from the counter at `key` (0 first, when it is absent), all below
/// `limit`.
pub(crate) async fn reserve_at(
    kv: &dyn MetaKv,
    key: String,
    count: u64,
    limit: u64,
) -> Result<Range<u64>> {
    if count == 0 {
        return Err(MetaError::Invalid(InvalidRequest::EmptyIdBlock));
    }
    let mut current = kv.get(&key).await?;
    for attempt in 0..MAX_ATTEMPTS {
        let (next, version) = match &current {
            Some(kv) => (decode::<IdCounter>(&key, &kv.value)?.0, kv.version),
            None => (0, 0),
        };
        let end = next
            .checked_add(count)
            .filter(|end| *end <= limit)
            .ok_or_else(|| {
                MetaError::Invalid(InvalidRequest::IdSpaceExhausted {
                    key: key.clone(),
                    next,
                })
            })?;
        match kv
            .compare_and_swap(&key, version, Some(encode(&IdCounter(end))))
            .await?
        {
            CasOutcome::Swapped { .. } => return Ok(next..end),
            CasOutcome::Conflict { current: now } => {
                current = now;
                // Many allocators racing: spread them out a little.
                if attempt >= 4 {
                    tokio::time::sleep(Duration::from_millis(u64::from(attempt))).await;
                }
            }
        }
    }
    Err(MetaError::Contended {
        operation: "reserve id block",
        key,
        attempts: MAX_ATTEMPTS,
    })
}

/// The high mark of `kind`: every id any allocator was ever given (handed out, or reserved in a
/// block not yet used up) is below it, and it only grows. 0 before the first reservation.
pub async fn high_mark(kv: &dyn MetaKv, kind: IdKind) -> Result<u64> {
    let key = kind.key();
    match kv.get(&key).await? {
        Some(entry) => Ok(decode::<IdCounter>(&key, &entry.value)?.0),
        None => Ok(0),
    }
}

/// Hands out ids of one kind, fetching them from the KV a block at a time.
pub struct IdAllocator {
    kv: Arc<dyn MetaKv>,
    kind: IdKind,
    block: u64,
    local: tokio::sync::Mutex<Local>,
}

/// The ids reserved and not yet handed out, and how the last reservation went.
#[derive(Debug, Default)]
struct Local {
    ids: Range<u64>,
    /// The size of the last reservation.
    last_block: u64,
    /// When it was made.
    last_at: Option<tokio::time::Instant>,
}

/// A block used up within this long of its reservation makes the next one twice as large.
const BURST: Duration = Duration::from_secs(1);

/// Reservations grow to at most this many times the configured block.
const MAX_GROWTH: u64 = 64;

impl std::fmt::Debug for IdAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdAllocator")
            .field("kind", &self.kind)
            .field("block", &self.block)
            .finish()
    }
}

impl IdAllocator {
    /// An allocator taking `block` ids per round trip (at least 1), and up to 64 times as many
    /// while blocks are used up within a second of each other.
    pub fn new(kv: Arc<dyn MetaKv>, kind: IdKind, block: u64) -> Self {
        IdAllocator {
            kv,
            kind,
            block: block.max(1),
            local: tokio::sync::Mutex::new(Local::default()),
        }
    }

    /// The next id: never handed out before by any allocator of this kind on the same store.
    pub async fn next(&self) -> Result<u64> {
        let mut local = self.local.lock().await;
        if local.ids.is_empty() {
            // A burst (a node opening a thousand tablets at once) uses blocks up quickly; each
            // reservation is a metadata round trip that every caller waits behind, so blocks
            // double while they last less than `BURST`, and fall back once demand does.
            let now = tokio::time::Instant::now();
            let block = match local.last_at {
                Some(at) if now.duration_since(at) < BURST => local
                    .last_block
                    .saturating_mul(2)
                    .min(self.block.saturating_mul(MAX_GROWTH)),
                _ => self.block,
            };
            local.ids = reserve_block(self.kv.as_ref(), self.kind, block).await?;
            local.last_block = block;
            local.last_at = Some(now);
        }
        let id = local.ids.start;
        local.ids.start += 1;
        Ok(id)
    }

    /// `count` contiguous fresh ids, taken directly from the store (not from the local block).
    pub async fn reserve(&self, count: u64) -> Result<Range<u64>> {
        reserve_block(self.kv.as_ref(), self.kind, count).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemoryKv;

    #[tokio::test]
    async fn high_mark_covers_every_id_handed_out_or_reserved() {
        let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
        assert_eq!(high_mark(kv.as_ref(), IdKind::Writer).await.unwrap(), 0);
        let ids = IdAllocator::new(Arc::clone(&kv), IdKind::Writer, 7);
        assert_eq!(ids.next().await.unwrap(), 0);
        // The whole block is reserved: ids 1..7 are not handed out yet but are below the mark.
        assert_eq!(high_mark(kv.as_ref(), IdKind::Writer).await.unwrap(), 7);
        let other = IdAllocator::new(Arc::clone(&kv), IdKind::Writer, 3);
        assert_eq!(other.next().await.unwrap(), 7);
        assert_eq!(high_mark(kv.as_ref(), IdKind::Writer).await.unwrap(), 10);
        assert_eq!(high_mark(kv.as_ref(), IdKind::Stream).await.unwrap(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn blocks_grow_while_a_burst_uses_them_up_and_shrink_after() {
        let kv: Arc<dyn MetaKv> = Arc::new(MemoryKv::new());
        let ids = IdAllocator::new(Arc::clone(&kv), IdKind::Stream, 10);
        let mut seen = Vec::new();
        for _ in 0..70 {
            seen.push(ids.next().await.unwrap());
        }
        // Three reservations, of 10, 20 and 40: the counter was written three times.
        assert_eq!(seen, (0..70).collect::<Vec<_>>());
        assert_eq!(high_mark(kv.as_ref(), IdKind::Stream).await.unwrap(), 70);
        let counter = kv.get(&IdKind::Stream.key()).await.unwrap().unwrap();
        assert_eq!(counter.version, 3);
        // Growth stops at 64 blocks.
        for _ in 0..(80 + 160 + 320 + 640 + 640) {
            ids.next().await.unwrap();
        }
        assert_eq!(
            high_mark(kv.as_ref(), IdKind::Stream).await.unwrap(),
            70 + 1840
        );
        // A block that lasted longer than a burst is followed by one of the configured size.
        tokio::time::advance(BURST * 2).await;
        assert_eq!(ids.next().await.unwrap(), 1910);
        assert_eq!(high_mark(kv.as_ref(), IdKind::Stream).await.unwrap(), 1920);
    }

    #[tokio::test]
    async fn writer_ids_stay_below_2_pow_48() {
        let kv = MemoryKv::new();
        let limit = IdKind::Writer.limit();
        let most = reserve_block(&kv, IdKind::Writer, limit - 2).await.unwrap();
        assert_eq!(most, 0..limit - 2);
        assert_eq!(
            reserve_block(&kv, IdKind::Writer, 2).await.unwrap(),
            limit - 2..limit
        );
        match reserve_block(&kv, IdKind::Writer, 1).await {
            Err(MetaError::Invalid(InvalidRequest::IdSpaceExhausted { next, .. })) => {
                assert_eq!(next, limit);
            }
            other => panic!("{other:?}"),
        }
        // Other kinds have no such limit.
        reserve_block(&kv, IdKind::Stream, limit + 5).await.unwrap();
    }
}
