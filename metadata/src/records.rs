//! The typed records of the metadata log. Each is stored as one metadata value (format in
//! [`crate::value`]) under the key given in [`crate::keys`].

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::{InvalidRequest, MetaError, Result};
use crate::value::{MetaRecord, RecordKind, from_json_body, json_body, read_u64};

/// A table: its schema versions, bucket count and partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableRecord {
    /// The table's name (one key segment, no `/`).
    pub name: String,
    /// Schema versions by schema id. The schema text is opaque here (the server's encoding).
    pub schemas: BTreeMap<u16, String>,
    /// Buckets per partition.
    pub bucket_count: u32,
    /// Partition names (an unpartitioned table has one, conventionally `default`).
    pub partitions: Vec<String>,
    /// Which table of this name it is: a number from the table allocator (`mink/ids/table`),
    /// taken at create, so a table dropped and created again under the same name keys its
    /// tablets and writer snapshots apart from the old one's. Records written before
    /// incarnations existed read as 0.
    #[serde(default)]
    pub incarnation: u64,
    /// The table's own retention policy; `None` (and records written before retention existed)
    /// follows the node's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionPolicy>,
    /// The column whose value is each row's key when the table is read over Kafka (a table not
    /// of the Kafka schema; docs/kafka.md, "Mapping"); `None`: no key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka_key: Option<String>,
    /// Set when the table is a Durable Streams stream (docs/durable-streams.md): its content
    /// type and lifetime. `None` for every other table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamConfig>,
    /// How appends to the table are compressed on the way in (docs/compression.md); `None`
    /// (and records written before the setting existed): not compressed, and the record's
    /// bytes are what they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<TableCompression>,
}

/// The Arrow IPC body compression a table's appends are stored with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableCompression {
    /// The codec.
    pub codec: CompressionCodec,
    /// The zstd level (1 to 22); `None`: the codec's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<i32>,
}

/// A codec of the Arrow IPC format's body compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompressionCodec {
    /// LZ4 frame format.
    Lz4,
    /// Zstandard.
    Zstd,
}

/// What a Durable Streams stream was created with (docs/durable-streams.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamConfig {
    /// The stream's content type, as the client gave it (compared case-insensitively).
    pub content_type: String,
    /// `Stream-TTL`: seconds without a read or an append before the stream expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// `Stream-Expires-At`: when the stream expires (milliseconds since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// When it was created (milliseconds since the epoch).
    pub created_ms: u64,
}

/// The writer id a Durable Streams producer name stands for in one stream (docs/durable-streams.md,
/// "Appends and producers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerName {
    /// A writer id the allocator handed out.
    pub writer_id: u64,
}

/// How much of each bucket's log a table keeps: batches committed within `age_ms`, and at most
/// about `bytes` per bucket (trimmed at object-range boundaries). A field left out follows the
/// node's default; both out: keep everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionPolicy {
    /// Keep batches committed at most this long ago (milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<u64>,
    /// Keep at most about this many bytes per bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

impl TableRecord {
    /// The table's name as one key segment of its tablets and writer snapshots: `{name}` for
    /// incarnation 0 (tables created before incarnations keep their keys), else `{name}@{n}`.
    pub fn key_segment(&self) -> String {
        crate::keys::table_segment(&self.name, self.incarnation)
    }

    /// The newest schema id, if any.
    pub fn latest_schema_id(&self) -> Option<u16> {
        self.schemas.keys().next_back().copied()
    }
}

/// A stream's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamState {
    /// Owned by a node, accepting commits.
    Open,
    /// Not owned; another node may open it.
    Closed,
    /// Destroyed; never opened again.
    Deleted,
}

impl std::fmt::Display for StreamState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StreamState::Open => "open",
            StreamState::Closed => "closed",
            StreamState::Deleted => "deleted",
        })
    }
}

/// A stream: the log of one bucket on s3stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecord {
    /// The stream id.
    pub id: u64,
    /// Bumped by every open; commits from an older epoch are fenced.
    pub epoch: u64,
    /// The node that opened it last (None before the first open).
    pub owner: Option<String>,
    /// The oldest retained offset. Moves forward on trim.
    pub start_offset: u64,
    /// The end of the data committed into objects (exclusive).
    pub end_offset: u64,
    /// Lifecycle state.
    pub state: StreamState,
}

impl StreamRecord {
    /// A new stream: closed, at epoch 0, with offsets 0..0 and no owner.
    pub fn new(id: u64) -> Self {
        StreamRecord {
            id,
            epoch: 0,
            owner: None,
            start_offset: 0,
            end_offset: 0,
            state: StreamState::Closed,
        }
    }
}

/// What an object holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectKind {
    /// A WAL object: one group commit of a node, many streams.
    Wal,
    /// A stream-set object: compacted data of many streams.
    StreamSet,
    /// A stream object: compacted data of one stream.
    Stream,
}

/// One stream's data inside an object: offsets `[start_offset, end_offset)` stored at bytes
/// `[position, position + len)` of the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRange {
    /// The stream.
    pub stream_id: u64,
    /// First offset held.
    pub start_offset: u64,
    /// One past the last offset held.
    pub end_offset: u64,
    /// Byte position of the range in the object.
    pub position: u64,
    /// Byte length of the range.
    pub len: u64,
}

/// An object in the bucket and the stream ranges it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRecord {
    /// The object id (from the object id allocator).
    pub id: u64,
    /// What it holds.
    pub kind: ObjectKind,
    /// Its key (path) in the bucket.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// The stream ranges it holds, at most one per stream.
    pub ranges: Vec<StreamRange>,
}

impl ObjectRecord {
    /// Checks the ranges: non-empty offsets, inside the object, one per stream.
    pub fn validate(&self) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for r in &self.ranges {
            if r.end_offset <= r.start_offset {
                return Err(MetaError::Invalid(InvalidRequest::EmptyObjectRange {
                    object_id: self.id,
                    stream_id: r.stream_id,
                    start_offset: r.start_offset,
                    end_offset: r.end_offset,
                }));
            }
            if r.position
                .checked_add(r.len)
                .is_none_or(|end| end > self.size)
            {
                return Err(MetaError::Invalid(InvalidRequest::ObjectRangePastEnd {
                    object_id: self.id,
                    stream_id: r.stream_id,
                    size: self.size,
                }));
            }
            if !seen.insert(r.stream_id) {
                return Err(MetaError::Invalid(InvalidRequest::TwoRangesOfStream {
                    object_id: self.id,
                    stream_id: r.stream_id,
                }));
            }
        }
        Ok(())
    }
}

/// A block of object ids a node's WAL reserved for its WAL objects, `[first_id, end_id)`.
///
/// The WAL registers a reservation once per block (one metadata write per block of PUTs, not per
/// PUT), names each WAL object after its id, and recovery finds every uncompacted WAL object by
/// reading the node's reservations instead of listing the bucket: ids never written are simply
/// absent. Compaction commits move `first_id` forward and delete exhausted reservations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalReservation {
    /// The node whose WAL reserved the ids.
    pub node: String,
    /// First id not yet compacted.
    pub first_id: u64,
    /// One past the last reserved id.
    pub end_id: u64,
}

/// A node's registration: which life of the node it is and where it serves. Held by the node's
/// lease where the store has leases, so it vanishes when the node stops renewing it: liveness is
/// the lease, nothing in the record. Every front end reads its addresses from here
/// (docs/cluster.md, "Nodes").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// The node id (a key segment).
    pub node_id: String,
    /// This life of the node: its incarnation counter's value at start.
    pub incarnation: u64,
    /// The integer id the Kafka front end advertises; the same for every life of the node id.
    pub broker_id: i32,
    /// The advertised HTTP base URL, with its scheme (`http://10.0.0.5:8080`).
    pub http_url: String,
    /// The advertised Kafka address (`host:port`), when the Kafka front end listens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka_address: Option<String>,
    /// The advertised Arrow Flight URL, when the Flight front end listens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flight_url: Option<String>,
    /// The lease holding the registration, on stores with leases.
    pub lease: Option<i64>,
    /// Unix milliseconds at registration, for operators.
    pub started_at_ms: u64,
    /// Set by a graceful shutdown: the node is handing its buckets away and takes none.
    #[serde(default)]
    pub draining: bool,
}

impl NodeRecord {
    /// The member id of this life of the node, `{node_id}~{incarnation}` (`~` is in no node id):
    /// what owns streams and WALs, and what a recovery claims.
    pub fn member(&self) -> String {
        member_id(&self.node_id, self.incarnation)
    }
}

/// The member id of incarnation `incarnation` of node `node`.
pub fn member_id(node: &str, incarnation: u64) -> String {
    format!("{node}~{incarnation}")
}

/// Whether `owner` (of a WAL, of a stream) is a life of node `node`: one of its member ids, or
/// the bare node id a node used before incarnations.
pub fn is_life_of(owner: &str, node: &str) -> bool {
    owner == node
        || owner
            .strip_prefix(node)
            .and_then(|rest| rest.strip_prefix('~'))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Which node should own a bucket (docs/cluster.md, "Ownership"): written with the table by the
/// node that creates it, and later only by the elected leader, fenced on its leadership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketAssignment {
    /// The node id (not a member: a restarted node keeps its buckets).
    pub node: String,
    /// The leadership revision of the leader that wrote it; 0 when written at the table's create.
    #[serde(default)]
    pub leader: u64,
}

/// A claim on the recovery of a dead member's WAL (docs/cluster.md, "Failover"): held by the
/// claimer's lease while it recovers, kept without one once `done`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryClaim {
    /// The member recovering it.
    pub claimer: String,
    /// Whether the recovery is finished: the member's WAL is committed and retired.
    #[serde(default)]
    pub done: bool,
}

/// A Kafka consumer group's committed offset of one partition (docs/kafka.md, "Consumer
/// groups").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupOffset {
    /// The next offset the group will consume.
    pub offset: i64,
    /// The client's metadata string, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
    /// When it was committed (milliseconds since the epoch).
    pub committed_at_ms: u64,
}

/// A writer-window snapshot of one bucket, taken at `offset`; the bytes are the tablet's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterSnapshot {
    /// The log offset the snapshot was taken at; replay starts here.
    pub offset: u64,
    /// The opaque snapshot.
    pub data: Bytes,
}

macro_rules! json_record {
    ($ty:ty, $kind:expr) => {
        impl MetaRecord for $ty {
            const KIND: RecordKind = $kind;
            fn encode_body(&self) -> Vec<u8> {
                json_body(self)
            }
            fn decode_body(key: &str, body: &[u8]) -> Result<Self> {
                from_json_body(key, body)
            }
        }
    };
}

json_record!(TableRecord, RecordKind::Table);
json_record!(StreamRecord, RecordKind::Stream);
json_record!(WalReservation, RecordKind::WalReservation);
json_record!(NodeRecord, RecordKind::Node);
json_record!(BucketAssignment, RecordKind::Assignment);
json_record!(RecoveryClaim, RecordKind::Recovery);
json_record!(GroupOffset, RecordKind::GroupOffset);
json_record!(ProducerName, RecordKind::ProducerName);

impl MetaRecord for ObjectRecord {
    const KIND: RecordKind = RecordKind::Object;
    fn encode_body(&self) -> Vec<u8> {
        json_body(self)
    }
    fn decode_body(key: &str, body: &[u8]) -> Result<Self> {
        let record: ObjectRecord = from_json_body(key, body)?;
        record.validate().map_err(|e| MetaError::Corrupt {
            key: key.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(record)
    }
}

impl MetaRecord for WriterSnapshot {
    const KIND: RecordKind = RecordKind::WriterSnapshot;
    fn encode_body(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.data.len());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.data);
        out
    }
    fn decode_body(key: &str, body: &[u8]) -> Result<Self> {
        let (offset, rest) = read_u64(key, body)?;
        Ok(WriterSnapshot {
            offset,
            data: Bytes::copy_from_slice(rest),
        })
    }
}

/// The counter of an id allocator: the next id not yet handed out to any allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdCounter(pub(crate) u64);

impl MetaRecord for IdCounter {
    const KIND: RecordKind = RecordKind::IdCounter;
    fn encode_body(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn decode_body(key: &str, body: &[u8]) -> Result<Self> {
        let (next, rest) = read_u64(key, body)?;
        if !rest.is_empty() {
            return Err(MetaError::Corrupt {
                key: key.to_owned(),
                reason: format!("id counter has {} trailing bytes", rest.len()),
            });
        }
        Ok(IdCounter(next))
    }
}

/// Decodes an id allocator's counter value at `key`: the next id it would hand out. The allocator
/// is the only reader; this entry point lets the fuzz targets reach the counter's decoder.
#[doc(hidden)]
pub fn decode_id_counter(key: &str, raw: &[u8]) -> Result<u64> {
    crate::value::decode::<IdCounter>(key, raw).map(|counter| counter.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_name_one_life_of_one_node() {
        assert_eq!(member_id("mink-1", 3), "mink-1~3");
        assert!(is_life_of("mink-1~3", "mink-1"));
        assert!(
            is_life_of("mink-1", "mink-1"),
            "a WAL from before incarnations"
        );
        for other in ["mink-10~3", "mink-1~", "mink-1~x", "mink-1.3", "mink-"] {
            assert!(!is_life_of(other, "mink-1"), "{other}");
        }
        // Node ids may hold dots; they never hold `~`.
        assert!(is_life_of("a.1~2", "a.1"));
        assert!(!is_life_of("a.1~2", "a"));
    }

    #[test]
    fn a_table_record_written_before_incarnations_reads_as_incarnation_zero() {
        let old = br#"{"name":"t","schemas":{"1":"s"},"bucket_count":2,"partitions":["default"]}"#;
        let record: TableRecord = from_json_body("mink/tables/t", old).unwrap();
        assert_eq!(record.incarnation, 0);
        assert_eq!(record.key_segment(), "t");
        assert_eq!(record.retention, None);
        let new = TableRecord {
            incarnation: 9,
            ..record
        };
        assert_eq!(new.key_segment(), "t@9");
        let back: TableRecord = from_json_body("k", &json_body(&new)).unwrap();
        assert_eq!(back, new);
        // No policy of its own: the record's bytes are what they were before retention existed.
        assert!(
            !String::from_utf8(json_body(&new))
                .unwrap()
                .contains("retention")
        );
        let kept = TableRecord {
            retention: Some(RetentionPolicy {
                age_ms: Some(60_000),
                bytes: None,
            }),
            ..new
        };
        let text = String::from_utf8(json_body(&kept)).unwrap();
        assert!(text.contains(r#""retention":{"age_ms":60000}"#), "{text}");
        let back: TableRecord = from_json_body("k", text.as_bytes()).unwrap();
        assert_eq!(back, kept);
    }

    #[test]
    fn a_table_record_without_compression_keeps_its_bytes_and_one_with_it_round_trips() {
        let old = br#"{"name":"t","schemas":{"1":"s"},"bucket_count":2,"partitions":["default"],"incarnation":3}"#;
        let record: TableRecord = from_json_body("mink/tables/t", old).unwrap();
        assert_eq!(record.compression, None);
        // No setting: the record written is the one read, byte for byte.
        assert_eq!(
            json_body(&record),
            json_body(&from_json_body::<TableRecord>("k", old).unwrap())
        );
        assert!(
            !String::from_utf8(json_body(&record))
                .unwrap()
                .contains("compression")
        );
        for (compression, expected) in [
            (
                TableCompression {
                    codec: CompressionCodec::Zstd,
                    level: Some(9),
                },
                r#""compression":{"codec":"zstd","level":9}"#,
            ),
            (
                TableCompression {
                    codec: CompressionCodec::Lz4,
                    level: None,
                },
                r#""compression":{"codec":"lz4"}"#,
            ),
        ] {
            let set = TableRecord {
                compression: Some(compression),
                ..record.clone()
            };
            let text = String::from_utf8(json_body(&set)).unwrap();
            assert!(text.contains(expected), "{text}");
            let back: TableRecord = from_json_body("k", text.as_bytes()).unwrap();
            assert_eq!(back, set);
        }
    }
}
