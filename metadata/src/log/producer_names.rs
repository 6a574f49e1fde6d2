//! Durable Streams producer names (docs/durable-streams.md, "Appends and producers").
//!
//! | Key | Value |
//! |---|---|
//! | `mink/ds-producers/{table}/{name}` | [`ProducerName`] |

use super::Metadata;
use super::read::get_record;
use crate::error::Result;
use crate::keys;
use crate::kv::{CasOutcome, MetaKvExt};
use crate::records::ProducerName;
use crate::value::{decode, encode};

/// Keys deleted per page when a table's names go.
const PAGE: usize = 1000;

impl Metadata {
    /// The writer id producer `name` stands for in the table `table` (a key segment), if one
    /// was claimed.
    pub async fn producer_name(&self, table: &str, name: &str) -> Result<Option<u64>> {
        keys::check_segment("table", table)?;
        let kv = self.kv.get(&keys::producer_name(table, name)).await?;
        Ok(get_record::<ProducerName>(&kv)?.map(|(r, _)| r.writer_id))
    }

    /// Claims `writer_id` for producer `name` in `table` unless the name already has one; returns
    /// the writer id the name stands for now (the first claim wins, on every node).
    pub async fn claim_producer_name(
        &self,
        table: &str,
        name: &str,
        writer_id: u64,
    ) -> Result<u64> {
        keys::check_segment("table", table)?;
        let key = keys::producer_name(table, name);
        let value = encode(&ProducerName { writer_id });
        // A name deleted while it is claimed (its stream deleted) is claimed again.
        loop {
            match self
                .kv
                .compare_and_swap(&key, 0, Some(value.clone()))
                .await?
            {
                CasOutcome::Swapped { .. } => return Ok(writer_id),
                CasOutcome::Conflict { current: Some(kv) } => {
                    return Ok(decode::<ProducerName>(&kv.key, &kv.value)?.writer_id);
                }
                CasOutcome::Conflict { current: None } => {}
            }
        }
    }

    /// How many producer names `table` has, counted up to `up_to` (at most that is returned).
    pub async fn count_producer_names(&self, table: &str, up_to: usize) -> Result<usize> {
        keys::check_segment("table", table)?;
        let prefix = keys::producer_names(table);
        let mut count = 0;
        let mut after: Option<String> = None;
        while count < up_to {
            let page = self
                .kv
                .scan(&prefix, after.as_deref(), PAGE.min(up_to - count))
                .await?;
            count += page.items.len();
            match page.items.last() {
                Some(last) if page.more => after = Some(last.key.clone()),
                _ => break,
            }
        }
        Ok(count.min(up_to))
    }

    /// Deletes every producer name of `table` (its stream was deleted); returns how many.
    pub async fn delete_producer_names(&self, table: &str) -> Result<usize> {
        keys::check_segment("table", table)?;
        let mut deleted = 0;
        for kv in self.kv.scan_all(&keys::producer_names(table), PAGE).await? {
            if self.kv.delete(&kv.key).await? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::kv::MemoryKv;
    use crate::log::MetadataOptions;

    #[tokio::test]
    async fn the_first_claim_wins_and_deleting_forgets() {
        let meta = Metadata::open(Arc::new(MemoryKv::new()), MetadataOptions::default())
            .await
            .unwrap();
        assert_eq!(meta.producer_name("ds.a@1", "p/1").await.unwrap(), None);
        assert_eq!(meta.count_producer_names("ds.a@1", 10).await.unwrap(), 0);
        assert_eq!(
            meta.claim_producer_name("ds.a@1", "p/1", 7).await.unwrap(),
            7
        );
        assert_eq!(
            meta.claim_producer_name("ds.a@1", "p/1", 9).await.unwrap(),
            7
        );
        assert_eq!(meta.producer_name("ds.a@1", "p/1").await.unwrap(), Some(7));
        assert_eq!(
            meta.claim_producer_name("ds.a@2", "p/1", 9).await.unwrap(),
            9
        );
        for (name, id) in [("p/2", 10), ("p/3", 11)] {
            meta.claim_producer_name("ds.a@2", name, id).await.unwrap();
        }
        assert_eq!(meta.count_producer_names("ds.a@2", 10).await.unwrap(), 3);
        assert_eq!(meta.count_producer_names("ds.a@2", 2).await.unwrap(), 2);
        assert_eq!(meta.count_producer_names("ds.a@1", 10).await.unwrap(), 1);
        assert_eq!(meta.delete_producer_names("ds.a@1").await.unwrap(), 1);
        assert_eq!(meta.producer_name("ds.a@1", "p/1").await.unwrap(), None);
        assert_eq!(meta.count_producer_names("ds.a@1", 10).await.unwrap(), 0);
        assert_eq!(meta.producer_name("ds.a@2", "p/1").await.unwrap(), Some(9));
    }
}
