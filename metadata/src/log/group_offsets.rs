//! Kafka consumer groups' committed offsets (docs/kafka.md, "Consumer groups").
//!
//! | Key | Value |
//! |---|---|
//! | `mink/kafka-offsets/{group}/{table}/{partition}` | [`GroupOffset`] |

use super::Metadata;
use super::read::get_record;
use crate::error::Result;
use crate::keys;
use crate::kv::{MetaKvExt, Op, Txn};
use crate::records::GroupOffset;
use crate::value::{decode, encode};

/// One committed offset: the table's key segment, the partition, the offset.
pub type CommittedOffset = (String, u32, GroupOffset);

/// Keys read per page when listing.
const PAGE: usize = 1000;

impl Metadata {
    /// Stores `offsets` of `group`, in as few transactions as the backend allows (all of them
    /// at once where it has no limit).
    pub async fn put_group_offsets(&self, group: &str, offsets: &[CommittedOffset]) -> Result<()> {
        let per_txn = self.kv.max_txn_ops().unwrap_or(usize::MAX).max(1);
        for chunk in offsets.chunks(per_txn) {
            for (table, _, _) in chunk {
                keys::check_segment("table", table)?;
            }
            let ops = chunk
                .iter()
                .map(|(table, partition, offset)| {
                    Op::put(keys::group_offset(group, table, *partition), encode(offset))
                })
                .collect();
            self.kv
                .txn(Txn {
                    compares: Vec::new(),
                    on_success: ops,
                })
                .await?;
        }
        Ok(())
    }

    /// The committed offset of one partition of `group`.
    pub async fn group_offset(
        &self,
        group: &str,
        table: &str,
        partition: u32,
    ) -> Result<Option<GroupOffset>> {
        keys::check_segment("table", table)?;
        let kv = self
            .kv
            .get(&keys::group_offset(group, table, partition))
            .await?;
        Ok(get_record::<GroupOffset>(&kv)?.map(|(r, _)| r))
    }

    /// Every committed offset of `group`.
    pub async fn group_offsets(&self, group: &str) -> Result<Vec<CommittedOffset>> {
        let prefix = keys::group_offsets(group);
        let mut out = Vec::new();
        for kv in self.kv.scan_all(&prefix, PAGE).await? {
            let Some((table, partition)) = kv.key[prefix.len()..].rsplit_once('/') else {
                continue;
            };
            let Ok(partition) = partition.parse() else {
                continue;
            };
            out.push((
                table.to_owned(),
                partition,
                decode::<GroupOffset>(&kv.key, &kv.value)?,
            ));
        }
        Ok(out)
    }

    /// The ids of the groups with committed offsets.
    pub async fn groups_with_offsets(&self) -> Result<Vec<String>> {
        let mut groups: Vec<String> = Vec::new();
        for kv in self.kv.scan_all(keys::GROUP_OFFSETS, PAGE).await? {
            let rest = &kv.key[keys::GROUP_OFFSETS.len()..];
            let Some(group) = rest.split('/').next().and_then(keys::group_of_segment) else {
                continue;
            };
            if groups.last() != Some(&group) {
                groups.push(group);
            }
        }
        Ok(groups)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::kv::MemoryKv;
    use crate::log::MetadataOptions;

    fn offset(n: i64) -> GroupOffset {
        GroupOffset {
            offset: n,
            metadata: Some("m".into()),
            committed_at_ms: 7,
        }
    }

    #[tokio::test]
    async fn offsets_are_kept_per_group_table_and_partition_and_any_group_id_is_a_key() {
        let metadata = Metadata::open(Arc::new(MemoryKv::new()), MetadataOptions::default())
            .await
            .unwrap();
        let odd = "team/a b%ü";
        metadata
            .put_group_offsets(
                odd,
                &[
                    ("t".into(), 0, offset(5)),
                    ("t".into(), 1, offset(9)),
                    ("u@2".into(), 0, offset(1)),
                ],
            )
            .await
            .unwrap();
        metadata
            .put_group_offsets("other", &[("t".into(), 0, offset(100))])
            .await
            .unwrap();
        // A later commit replaces the earlier one.
        metadata
            .put_group_offsets(odd, &[("t".into(), 1, offset(11))])
            .await
            .unwrap();
        let mut all = metadata.group_offsets(odd).await.unwrap();
        all.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        let got: Vec<(String, u32, i64)> =
            all.into_iter().map(|(t, p, o)| (t, p, o.offset)).collect();
        assert_eq!(
            got,
            vec![
                ("t".into(), 0, 5),
                ("t".into(), 1, 11),
                ("u@2".into(), 0, 1)
            ]
        );
        assert_eq!(
            metadata
                .group_offset("other", "t", 0)
                .await
                .unwrap()
                .unwrap()
                .offset,
            100
        );
        assert_eq!(metadata.group_offset("other", "t", 1).await.unwrap(), None);
        let mut groups = metadata.groups_with_offsets().await.unwrap();
        groups.sort();
        assert_eq!(groups, vec!["other".to_owned(), odd.to_owned()]);
        assert_eq!(
            keys::group_of_segment(&keys::group_segment(odd)).unwrap(),
            odd
        );
        assert!(
            metadata
                .put_group_offsets("g", &[("a/b".into(), 0, offset(1))])
                .await
                .is_err()
        );
    }
}
