//! Writer snapshots: the idempotent-writer windows of one bucket, saved by the tablet so a reopened
//! bucket replays its log from the snapshot's offset instead of from the start.
//!
//! | Key | Value |
//! |---|---|
//! | `mink/writers/{table}/{partition}/{bucket}` | [`WriterSnapshot`]: offset, the tablet's opaque bytes |

use super::Metadata;
use super::read::get_record;
use crate::error::Result;
use crate::keys;
use crate::records::WriterSnapshot;
use crate::value::encode;

impl Metadata {
    /// Stores the writer snapshot of one bucket (replacing any older one).
    pub async fn put_writer_snapshot(
        &self,
        table: &str,
        partition: &str,
        bucket: u32,
        snapshot: &WriterSnapshot,
    ) -> Result<()> {
        keys::check_segment("table", table)?;
        keys::check_segment("partition", partition)?;
        self.kv
            .put(&keys::writer(table, partition, bucket), encode(snapshot))
            .await?;
        Ok(())
    }

    /// Reads the writer snapshot of one bucket.
    pub async fn get_writer_snapshot(
        &self,
        table: &str,
        partition: &str,
        bucket: u32,
    ) -> Result<Option<WriterSnapshot>> {
        keys::check_segment("table", table)?;
        keys::check_segment("partition", partition)?;
        Ok(get_record::<WriterSnapshot>(
            &self.kv.get(&keys::writer(table, partition, bucket)).await?,
        )?
        .map(|(r, _)| r))
    }

    /// Deletes the writer snapshot of one bucket; returns whether there was one.
    pub async fn delete_writer_snapshot(
        &self,
        table: &str,
        partition: &str,
        bucket: u32,
    ) -> Result<bool> {
        keys::check_segment("table", table)?;
        keys::check_segment("partition", partition)?;
        self.kv
            .delete(&keys::writer(table, partition, bucket))
            .await
    }
}
