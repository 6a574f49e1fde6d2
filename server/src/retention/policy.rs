//! A table's effective retention (its own policy over the node's default, field by field) and
//! the trim target a bucket's offsets give under it.

use mink_metadata::RetentionPolicy;
use serde::Serialize;

/// Where a limit of the effective policy comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The table's own policy.
    Table,
    /// The node's `[retention]` default.
    Node,
}

/// One limit of the effective policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Limit {
    /// Its value.
    pub value: u64,
    /// Where it comes from.
    pub source: Source,
}

/// The limits that apply to a table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Effective {
    /// Age kept, in milliseconds; `None`: any age.
    pub age_ms: Option<Limit>,
    /// Bytes kept per bucket; `None`: any size.
    pub bytes: Option<Limit>,
}

impl Effective {
    /// The table's policy where it sets a field, else the node's.
    pub fn of(table: Option<&RetentionPolicy>, node: &RetentionPolicy) -> Self {
        let pick = |own: Option<u64>, default: Option<u64>| match (own, default) {
            (Some(value), _) => Some(Limit {
                value,
                source: Source::Table,
            }),
            (None, Some(value)) => Some(Limit {
                value,
                source: Source::Node,
            }),
            (None, None) => None,
        };
        Effective {
            age_ms: pick(table.and_then(|t| t.age_ms), node.age_ms),
            bytes: pick(table.and_then(|t| t.bytes), node.bytes),
        }
    }

    /// Whether everything is kept.
    pub fn keeps_everything(&self) -> bool {
        self.age_ms.is_none() && self.bytes.is_none()
    }
}

/// Why retention moved a log start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Batches older than the age limit.
    Age,
    /// Object ranges over the byte limit.
    Bytes,
}

impl Reason {
    /// Its name in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Age => "age",
            Reason::Bytes => "bytes",
        }
    }
}

/// The new log start for a bucket at `log_start` with high watermark `high_watermark`, given the
/// first offset the age limit keeps and the one the byte limit keeps: the larger, never past the
/// high watermark; `None` when the log start stays.
pub fn target(
    log_start: u64,
    high_watermark: u64,
    by_age: Option<u64>,
    by_bytes: Option<u64>,
) -> Option<(u64, Reason)> {
    let candidates = [
        by_age.map(|o| (o, Reason::Age)),
        by_bytes.map(|o| (o, Reason::Bytes)),
    ];
    candidates
        .into_iter()
        .flatten()
        .map(|(offset, reason)| (offset.min(high_watermark), reason))
        .filter(|(offset, _)| *offset > log_start)
        .max_by_key(|(offset, _)| *offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_policy_wins_field_by_field() {
        let node = RetentionPolicy {
            age_ms: Some(1000),
            bytes: Some(2000),
        };
        let own = RetentionPolicy {
            age_ms: Some(5),
            bytes: None,
        };
        let e = Effective::of(Some(&own), &node);
        assert_eq!(
            e.age_ms,
            Some(Limit {
                value: 5,
                source: Source::Table
            })
        );
        assert_eq!(
            e.bytes,
            Some(Limit {
                value: 2000,
                source: Source::Node
            })
        );
        assert!(Effective::of(None, &RetentionPolicy::default()).keeps_everything());
        assert_eq!(
            Effective::of(None, &node).age_ms.unwrap().source,
            Source::Node
        );
    }

    #[test]
    fn the_target_is_the_larger_cut_within_the_high_watermark() {
        assert_eq!(target(0, 100, None, None), None);
        assert_eq!(
            target(0, 100, Some(40), Some(60)),
            Some((60, Reason::Bytes))
        );
        assert_eq!(target(0, 100, Some(70), Some(60)), Some((70, Reason::Age)));
        assert_eq!(target(0, 100, Some(500), None), Some((100, Reason::Age)));
        // At or below the log start: nothing to do.
        assert_eq!(target(50, 100, Some(50), Some(10)), None);
        assert_eq!(target(100, 100, Some(500), None), None);
    }
}
