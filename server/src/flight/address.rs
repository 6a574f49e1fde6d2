//! What a Flight request names: a table or one bucket of it, in a descriptor (a path or a JSON
//! command), and the versioned JSON ticket of a DoGet.
//!
//! Descriptors: the path `[table]`, `[table, bucket]` (the `default` partition) or
//! `[table, partition, bucket]`, or the command `{"table", "partition", "bucket"}` (partition and
//! bucket optional). Tickets: `{"v": 1, "table", "partition", "bucket", "offset", "until",
//! "columns", "live"}`, where only `v`, `table` and `bucket` are required: no `offset` reads from
//! the log start, no `until` to the high watermark (or, live, forever), no `columns` every column.

use arrow_flight::FlightDescriptor;
use arrow_flight::flight_descriptor::DescriptorType;
use serde::{Deserialize, Serialize};
use tonic::Status;

use super::status::invalid;

/// The partition a request names when it names none.
pub(crate) const DEFAULT_PARTITION: &str = "default";
/// The longest ticket or descriptor command taken.
const MAX_REQUEST_JSON: usize = 64 << 10;

/// One bucket of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BucketAddress {
    pub(crate) table: String,
    pub(crate) partition: String,
    pub(crate) bucket: u32,
}

/// What a descriptor names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Named {
    /// A whole table.
    Table(String),
    /// One bucket.
    Bucket(BucketAddress),
}

impl Named {
    /// The table named.
    pub(crate) fn table(&self) -> &str {
        match self {
            Named::Table(table) => table,
            Named::Bucket(address) => &address.table,
        }
    }
}

/// The command form of a descriptor.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Command {
    table: String,
    partition: Option<String>,
    bucket: Option<u32>,
}

/// What `descriptor` names, or INVALID_ARGUMENT saying what a descriptor may be.
pub(crate) fn parse_descriptor(descriptor: &FlightDescriptor) -> Result<Named, Status> {
    let shape = "a descriptor is the path [table], [table, bucket] or [table, partition, bucket], or the command {\"table\", \"partition\", \"bucket\"}";
    match DescriptorType::try_from(descriptor.r#type) {
        Ok(DescriptorType::Path) => {
            let bucket = |text: &str| {
                text.parse::<u32>()
                    .map_err(|_| invalid(format!("`{text}` is not a bucket number; {shape}")))
            };
            match descriptor.path.as_slice() {
                [table] => Ok(Named::Table(table.clone())),
                [table, number] => Ok(Named::Bucket(BucketAddress {
                    table: table.clone(),
                    partition: DEFAULT_PARTITION.to_owned(),
                    bucket: bucket(number)?,
                })),
                [table, partition, number] => Ok(Named::Bucket(BucketAddress {
                    table: table.clone(),
                    partition: partition.clone(),
                    bucket: bucket(number)?,
                })),
                _ => Err(invalid(format!(
                    "a path of {} elements; {shape}",
                    descriptor.path.len()
                ))),
            }
        }
        Ok(DescriptorType::Cmd) => {
            let command: Command = json(&descriptor.cmd, "descriptor command")?;
            Ok(match command.bucket {
                Some(bucket) => Named::Bucket(BucketAddress {
                    table: command.table,
                    partition: command
                        .partition
                        .unwrap_or_else(|| DEFAULT_PARTITION.to_owned()),
                    bucket,
                }),
                None if command.partition.is_none() => Named::Table(command.table),
                None => return Err(invalid(format!("a partition without a bucket; {shape}"))),
            })
        }
        _ => Err(invalid(format!("an unknown descriptor type; {shape}"))),
    }
}

/// The bucket `descriptor` names, or INVALID_ARGUMENT when it names a whole table.
pub(crate) fn bucket_of(descriptor: Option<&FlightDescriptor>) -> Result<BucketAddress, Status> {
    let descriptor = descriptor.ok_or_else(|| {
        invalid("the first message must carry the descriptor of the bucket: the path [table, bucket] or [table, partition, bucket]")
    })?;
    match parse_descriptor(descriptor)? {
        Named::Bucket(address) => Ok(address),
        Named::Table(table) => Err(invalid(format!(
            "the descriptor names table `{table}` but not a bucket: use the path [table, bucket] or [table, partition, bucket]"
        ))),
    }
}

/// A DoGet ticket, version 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Ticket {
    /// The ticket version: 1.
    pub(crate) v: u32,
    pub(crate) table: String,
    #[serde(default = "default_partition")]
    pub(crate) partition: String,
    pub(crate) bucket: u32,
    /// The first offset read; `None` from the log start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) offset: Option<u64>,
    /// Where reading stops (exclusive); `None`: the high watermark, or never when live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) until: Option<u64>,
    /// The columns sent, by name; `None`: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) columns: Option<Vec<String>>,
    /// Follow the tail: park at the high watermark and send each batch once it is durable.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) live: bool,
}

fn default_partition() -> String {
    DEFAULT_PARTITION.to_owned()
}

impl Ticket {
    /// A ticket for `address` from `offset` to `until`, every column, not live.
    pub(crate) fn new(address: &BucketAddress, offset: Option<u64>, until: Option<u64>) -> Self {
        Ticket {
            v: 1,
            table: address.table.clone(),
            partition: address.partition.clone(),
            bucket: address.bucket,
            offset,
            until,
            columns: None,
            live: false,
        }
    }

    /// Parses a ticket, or INVALID_ARGUMENT naming what is wrong.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Self, Status> {
        let ticket: Ticket = json(bytes, "ticket")?;
        if ticket.v != 1 {
            return Err(invalid(format!(
                "ticket version {} is not known; this node reads version 1",
                ticket.v
            )));
        }
        if let (Some(offset), Some(until)) = (ticket.offset, ticket.until)
            && until < offset
        {
            return Err(invalid(format!(
                "the ticket's until {until} is before its offset {offset}"
            )));
        }
        Ok(ticket)
    }

    /// The bucket the ticket reads.
    pub(crate) fn address(&self) -> BucketAddress {
        BucketAddress {
            table: self.table.clone(),
            partition: self.partition.clone(),
            bucket: self.bucket,
        }
    }

    /// The ticket as bytes.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
}

fn json<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, Status> {
    if bytes.len() > MAX_REQUEST_JSON {
        return Err(invalid(format!(
            "the {what} is {} bytes, more than the {MAX_REQUEST_JSON} allowed",
            bytes.len()
        )));
    }
    serde_json::from_slice(bytes).map_err(|e| invalid(format!("the {what} is not valid: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_name_a_table_or_a_bucket_and_anything_else_is_refused() {
        let path = |p: &[&str]| {
            parse_descriptor(&FlightDescriptor::new_path(
                p.iter().map(|s| s.to_string()).collect(),
            ))
        };
        assert_eq!(path(&["t"]).unwrap(), Named::Table("t".into()));
        let bucket = |partition: &str, bucket| {
            Named::Bucket(BucketAddress {
                table: "t".into(),
                partition: partition.into(),
                bucket,
            })
        };
        assert_eq!(path(&["t", "3"]).unwrap(), bucket("default", 3));
        assert_eq!(path(&["t", "p", "4"]).unwrap(), bucket("p", 4));
        assert!(
            path(&["t", "x"])
                .unwrap_err()
                .message()
                .contains("not a bucket")
        );
        assert!(path(&[]).is_err());
        assert!(path(&["a", "b", "c", "d"]).is_err());
        let cmd = |c: &str| parse_descriptor(&FlightDescriptor::new_cmd(c.to_owned()));
        assert_eq!(
            cmd(r#"{"table":"t","bucket":2}"#).unwrap(),
            bucket("default", 2)
        );
        assert_eq!(cmd(r#"{"table":"t"}"#).unwrap(), Named::Table("t".into()));
        assert!(cmd(r#"{"table":"t","partition":"p"}"#).is_err());
        assert!(cmd(r#"{"table":"t","bukket":1}"#).is_err());
        assert!(cmd("not json").is_err());
        assert!(bucket_of(None).is_err());
        assert!(
            bucket_of(Some(&FlightDescriptor::new_path(vec!["t".into()])))
                .unwrap_err()
                .message()
                .contains("not a bucket")
        );
    }

    #[test]
    fn tickets_are_versioned_and_checked() {
        let t = Ticket::parse(br#"{"v":1,"table":"t","bucket":0}"#).unwrap();
        assert_eq!(
            (t.partition.as_str(), t.offset, t.live),
            ("default", None, false)
        );
        let full = Ticket {
            v: 1,
            table: "t".into(),
            partition: "p".into(),
            bucket: 2,
            offset: Some(5),
            until: Some(9),
            columns: Some(vec!["a".into()]),
            live: true,
        };
        assert_eq!(Ticket::parse(&full.to_bytes()).unwrap(), full);
        let e = Ticket::parse(br#"{"v":2,"table":"t","bucket":0}"#).unwrap_err();
        assert!(e.message().contains("version 2"), "{e}");
        assert!(Ticket::parse(br#"{"v":1,"table":"t","bucket":0,"offset":5,"until":4}"#).is_err());
        assert!(Ticket::parse(br#"{"v":1,"table":"t"}"#).is_err());
        assert!(Ticket::parse(br#"{"v":1,"table":"t","bucket":0,"extra":1}"#).is_err());
        assert!(Ticket::parse(&vec![b' '; 70_000]).is_err());
    }
}
