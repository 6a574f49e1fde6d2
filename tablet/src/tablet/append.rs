//! [`Tablet::append`]: header checks, the reservation under the node's budget, the sequenced
//! submission, and the wait for durability.

use bytes::{Bytes, BytesMut};

use super::Tablet;
use super::sequence::{Sequenced, Submitted};
use super::types::AppendResult;
use crate::error::Result;
use crate::writers::Resolve;

impl Tablet {
    /// Appends the batches in `request` (back to back, in the codec's format) as one unit: all of
    /// them or none. Batches that retry an idempotent writer's retained batch are duplicates: they
    /// are not appended again and report the offsets they got the first time. Returns once the
    /// appended batches are durable.
    ///
    /// A retry of a batch whose first append is still in flight waits for that append's outcome:
    /// a duplicate if it became durable, evaluated afresh if it failed.
    pub async fn append(&self, request: Bytes) -> Result<AppendResult> {
        self.append_then(request, || {}).await
    }

    /// [`Tablet::append`], calling `sequenced` as soon as the request has its place in the log
    /// (its offsets are assigned and it is submitted to the stream, or it is all duplicates),
    /// before its durability is awaited; or when it fails before that. An append started after
    /// `sequenced` ran is placed after this one: a front end may start a writer's next append
    /// then, while this one's WAL write is in flight, and keep the writer's order
    /// (docs/produce-pipelining.md).
    pub async fn append_then(
        &self,
        request: Bytes,
        sequenced: impl FnOnce() + Send,
    ) -> Result<AppendResult> {
        let mut sequenced = Some(sequenced);
        let mut placed = || {
            if let Some(sequenced) = sequenced.take() {
                sequenced();
            }
        };
        let result = self.append_placed(request, &mut placed).await;
        placed();
        result
    }

    async fn append_placed(
        &self,
        request: Bytes,
        placed: &mut (dyn FnMut() + Send),
    ) -> Result<AppendResult> {
        let parsed = self.parse(&request)?;
        // Room under the node's budget is reserved before the sequencing lock, so nothing awaits
        // while the lock is held.
        let stream = &self.inner.stream;
        let reserved = match stream.try_reserve(request.len()) {
            Some(now) => now,
            None => stream.reserve(request.len()).await,
        };
        let mut permit = Some(reserved.map_err(|e| self.stream_error("append", e))?);
        // The request is stamped in place when this handle is its only owner.
        let mut bytes = Some(
            request
                .try_into_mut()
                .unwrap_or_else(|shared| BytesMut::from(shared.as_ref())),
        );
        loop {
            let submitted = match self.sequence(&parsed, &mut permit, &mut bytes)? {
                Sequenced::WaitFor(pending) => {
                    for ack in pending {
                        ack.wait_settled().await;
                    }
                    continue;
                }
                Sequenced::AllDuplicates(result) => {
                    // What it repeats is durable; its first answer may still wait for the
                    // manifest, and so does this one.
                    self.inner.manifest.wait().await;
                    return Ok(result);
                }
                Sequenced::Submitted(submitted) => submitted,
            };
            placed();
            let Submitted {
                pending,
                ack,
                result,
                next,
                snapshot_due,
            } = submitted;
            let outcome = match ack {
                None => pending.await,
                Some(ack) => Resolve::new(pending, ack).wait().await,
            };
            outcome.map_err(|e| self.stream_error("append (durable acknowledgement)", e))?;
            self.inner.manifest.wait().await;
            if snapshot_due {
                let tablet = self.clone();
                tokio::spawn(async move {
                    if let Err(error) = tablet.snapshot_if_idle().await {
                        tracing::warn!(tablet = tablet.inner.name, %error, "writer snapshot failed");
                    }
                });
            }
            return Ok(AppendResult {
                batches: result,
                high_watermark: self.high_watermark().max(next),
            });
        }
    }
}
