//! Trim, writer snapshots (on demand, periodic, fenced by the stream epoch), close and destroy.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use mink_metadata::{Compare, Metadata, Op, StreamRecord, StreamState, Txn, WriterSnapshot};
use mink_s3stream::error::StreamError;

use super::types::Isolation;
use super::{Tablet, lock};
use crate::error::{Result, TabletError};
use crate::registry::TabletId;
use crate::writers::snapshot;

impl Tablet {
    /// Moves the log start to `offset` (not beyond the high watermark). Data below it becomes
    /// garbage.
    pub async fn trim(&self, offset: u64) -> Result<()> {
        self.inner.stream.trim(offset).await.map_err(|e| match e {
            StreamError::TrimBeyondConfirm {
                offset, confirm, ..
            } => TabletError::OffsetOutOfRange {
                offset,
                bound: confirm,
                isolation: Isolation::HighWatermark,
            },
            other => self.stream_error("trim", other),
        })
    }

    /// Writes a writer-window snapshot at the high watermark now.
    pub async fn snapshot(&self) -> Result<()> {
        let mut written = self.inner.snapshot.lock().await;
        self.snapshot_locked(&mut written).await
    }

    /// A periodic snapshot: skipped when another is being written.
    pub(super) async fn snapshot_if_idle(&self) -> Result<()> {
        match self.inner.snapshot.try_lock() {
            Ok(mut written) => self.snapshot_locked(&mut written).await,
            Err(_) => Ok(()),
        }
    }

    async fn snapshot_locked(&self, written: &mut u64) -> Result<()> {
        let inner = &*self.inner;
        let (at, data) = {
            // Never the stream's sequencing lock under the tablet's: appends take them the other
            // way round.
            let at = inner.stream.confirm_offset();
            let mut seq = lock(&inner.sequencing);
            seq.windows.expire(inner.clock.now_ms(), inner.ttl_ms);
            (at, snapshot::encode(&seq.windows, at, seq.last_timestamp))
        };
        if at < *written {
            return Ok(());
        }
        put_snapshot_fenced(
            &inner.metadata,
            &inner.id,
            &inner.name,
            inner.stream.id(),
            inner.stream.epoch(),
            &WriterSnapshot {
                offset: at,
                data: Bytes::from(data),
            },
        )
        .await?;
        *written = at;
        Ok(())
    }

    /// Closes the tablet so another node can open it: refuses new appends, waits (up to 30 s) for
    /// the ones in flight, snapshots the writer windows and closes the stream. Closing a closed
    /// tablet does nothing.
    pub async fn close(&self) -> Result<()> {
        let inner = &*self.inner;
        {
            let mut seq = lock(&inner.sequencing);
            if seq.closed {
                return Ok(());
            }
            seq.closed = true;
        }
        // Read after the flag is set (and outside the tablet's lock: appends take the stream's
        // lock first): an append that saw the tablet open has taken its offsets by now.
        let next = inner.stream.offsets().next;
        inner.closed.store(true, Ordering::Release);
        let mut hw = inner.stream.watch_confirm();
        let _ = tokio::time::timeout(Duration::from_secs(30), hw.wait_for(|c| *c >= next)).await;
        self.snapshot().await?;
        inner
            .stream
            .close()
            .await
            .map_err(|e| self.stream_error("close", e))
    }

    /// Destroys the tablet (table or partition drop): deletes the stream, the writer snapshot and
    /// the registry entry.
    pub async fn destroy(&self) -> Result<()> {
        let inner = &*self.inner;
        {
            let mut seq = lock(&inner.sequencing);
            seq.closed = true;
        }
        inner.closed.store(true, Ordering::Release);
        inner
            .stream
            .destroy()
            .await
            .map_err(|e| self.stream_error("destroy", e))?;
        let id = &inner.id;
        inner
            .metadata
            .delete_writer_snapshot(&id.table_segment(), &id.partition, id.bucket)
            .await
            .map_err(|e| TabletError::metadata(&inner.name, "delete the writer snapshot", e))?;
        inner
            .metadata
            .kv()
            .delete(&id.registry_key())
            .await
            .map_err(|e| TabletError::metadata(&inner.name, "delete the registry entry", e))?;
        Ok(())
    }

    /// Whether the tablet was closed or destroyed through this handle.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }
}

/// Writes a writer snapshot only while `epoch` still owns the stream: the put is one transaction with
/// a compare on the stream record, so an owner fenced by another node's open can never overwrite the
/// new owner's snapshot with windows holding batches the log does not have.
async fn put_snapshot_fenced(
    metadata: &Metadata,
    id: &TabletId,
    name: &str,
    stream_id: u64,
    epoch: u64,
    snapshot: &WriterSnapshot,
) -> Result<()> {
    let stream_key = mink_metadata::keys::stream(stream_id);
    let writer_key = id.writer_key();
    let value = mink_metadata::value::encode(snapshot);
    let meta = |e| TabletError::metadata(name, "write the writer snapshot", e);
    for _ in 0..16 {
        let current = metadata.kv().get(&stream_key).await.map_err(meta)?;
        let Some(current) = current else {
            return Err(TabletError::Fenced {
                tablet: name.to_owned(),
            });
        };
        let record: StreamRecord =
            mink_metadata::value::decode(&current.key, &current.value).map_err(meta)?;
        if record.epoch != epoch || record.state != StreamState::Open {
            return Err(TabletError::Fenced {
                tablet: name.to_owned(),
            });
        }
        let outcome = metadata
            .kv()
            .txn(Txn {
                compares: vec![Compare::version(&stream_key, current.version)],
                on_success: vec![Op::put(&writer_key, value.clone())],
            })
            .await
            .map_err(meta)?;
        if outcome.succeeded {
            return Ok(());
        }
    }
    Err(TabletError::Metadata {
        tablet: name.to_owned(),
        operation: "write the writer snapshot",
        source: Arc::new(mink_metadata::MetaError::Contended {
            operation: "write the writer snapshot",
            key: writer_key,
            attempts: 16,
        }),
    })
}
