//! The log tablet: one bucket's log, composed from the codec ([`mink_codec`]), an s3stream stream
//! ([`mink_s3stream`]) and the metadata KV ([`mink_metadata`]). It assigns offsets, deduplicates
//! idempotent writers, appends batches to the bucket's stream, serves range reads bounded by the
//! high watermark, and resolves timestamps to offsets. The behaviour is `spec/log-tablets.md`.
//!
//! # From table, partition and bucket to a tablet
//!
//! ```no_run
//! # async fn example(engine: mink_s3stream::engine::Engine,
//! #                  schemas: std::sync::Arc<dyn mink_tablet::Schemas>) -> mink_tablet::Result<()> {
//! use mink_tablet::{Isolation, Tablet, TabletId};
//!
//! let tablet = Tablet::builder(TabletId::new("orders", "default", 3))
//!     .engine(engine)        // the node's s3stream engine; its metadata holds registry and snapshots
//!     .schemas(schemas)      // schema id -> Arrow schema, for append checks and projection
//!     .open_or_create()      // or .open() / .create()
//!     .await?;
//! let appended = tablet.append(bytes::Bytes::new()).await; // mink batches, back to back
//! let read = tablet.read(0, u64::MAX, None, Isolation::HighWatermark, 1 << 20).await?;
//! tablet.close().await?;     // hand the bucket to another node
//! # Ok(()) }
//! ```
//!
//! The stream holding a tablet's log is found through a registry in the metadata KV
//! (`mink/tablets/{table}/{partition}/{bucket}`, see [`registry`]); `create` makes the stream and the
//! entry, `open` looks it up. Opening fences any older owner of the stream (its epoch is bumped), loads
//! the writer snapshot from `mink/writers/{table}/{partition}/{bucket}` and replays the log from the
//! snapshot's offset, so deduplication is exact from the first request.
//!
//! # Append
//!
//! [`Tablet::append`] takes a request of one or more batches and appends it as one unit or not at all:
//!
//! 1. Every batch is checked in full: framing, the row limits on the header's count (before any
//!    other work, [`TabletSettings::max_rows_per_batch`] and
//!    [`max_rows_per_request`](TabletSettings::max_rows_per_request)), at least one row, known
//!    schema id, sane writer fields, then the header (magic, CRC, `record_count` =
//!    `last_offset_delta + 1`) and the Arrow body decoded against the schema the `schema_id`
//!    names, with exactly `record_count` rows. So every acknowledged batch decodes on read and a
//!    forged count cannot move the offsets. A bad batch rejects the whole request.
//! 2. Room for the request is reserved under the node's budget of uncompacted data (the only wait
//!    before submission). Then, in a builder the stream runs under its sequencing lock
//!    ([`LogStream::submit_with`]), each idempotent batch is checked against its writer's
//!    window ([`writers`]): new, duplicate (reported with its first offsets, not appended) or out of
//!    order (the request is rejected, the error names the expected sequence). A writer the tablet
//!    does not know is refused while it tracks [`TabletSettings::max_writers`] writers (after
//!    forgetting idle ones), so the writers it knows keep exact deduplication.
//! 3. Still in the builder, the new batches get consecutive base offsets from the stream's next offset,
//!    one commit timestamp (the clock, never lower than the previous batch's) and the leader epoch (the
//!    stream epoch), written in place outside the CRC; they are submitted to the stream as **one stream
//!    batch** (count = their rows), so the WAL makes them durable together, and the windows record them.
//! 4. Outside the lock, the append awaits the WAL acknowledgement. The high watermark is the stream's
//!    confirm offset, whose watch ([`Tablet::watch_high_watermark`]) advances at that moment, waking
//!    [`Tablet::wait_past`].
//!
//! A retry of a batch still in flight waits for the first attempt: a duplicate if it became durable; if
//! it failed, its window entry (and later entries of that writer) are dropped and the retry is judged
//! afresh. The outcome is recorded even if the first request is cancelled while waiting.
//!
//! # Reads
//!
//! [`Tablet::read`] checks `from` against the log start and the isolation bound, fetches whole stream
//! batches, and returns the mink batches from the one holding `from` (a stream batch may hold several),
//! projected to [`Columns`] when asked. [`Tablet::offset_for_timestamp`] is a binary search over batch
//! headers, one stream fetch per probe, no index.
//!
//! # Writer snapshots
//!
//! Windows are snapshotted (format in [`writers::snapshot`]) on [`Tablet::close`], and after every
//! [`TabletSettings::snapshot_every_appends`] appends or [`TabletSettings::snapshot_interval`],
//! whichever comes first, which bounds the replay after a crash. A snapshot holds only entries below
//! the high watermark it was taken at.

mod error;
pub mod registry;
mod schemas;
mod settings;
mod stream;
mod tablet;
pub mod writers;

pub use error::{ErrorKind, Result, TabletError};
#[cfg(feature = "test-util")]
pub use mink_runtime::ManualClock;
pub use mink_runtime::{Clock, SystemClock};
pub use registry::TabletId;
pub use schemas::{Schemas, StaticSchemas};
pub use settings::TabletSettings;
#[cfg(feature = "test-util")]
pub use stream::CountingStream;
pub use stream::{LogStream, StreamLayer};
pub use tablet::{
    AppendResult, AppendedBatch, Columns, Isolation, ReadBatch, ReadResult, Tablet, TabletBuilder,
    TabletOffsets,
};
pub use writers::{WriterBatch, WriterState};
