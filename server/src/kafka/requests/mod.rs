//! The request bodies we serve, decoded by [`Reader`] into the fields we use, for the versions
//! `versions` advertises (field layouts as in Apache Kafka's message definitions).

use bytes::Bytes;

use super::wire::{Reader, WireResult};

/// Metadata: which topics (`None`: every one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MetadataRequest {
    pub(crate) topics: Option<Vec<Option<String>>>,
    /// Whether topics that do not exist are created (when `kafka.auto_create_topics` is on).
    pub(crate) allow_auto_topic_creation: bool,
}

pub(crate) fn metadata(r: &mut Reader, version: i16) -> WireResult<MetadataRequest> {
    let topics = r.nullable_array(|r| {
        if version >= 10 {
            r.uuid()?;
        }
        let name = if version >= 10 {
            r.nullable_string()?
        } else {
            Some(r.string()?)
        };
        r.tagged_fields()?;
        Ok(name)
    })?;
    // Before version 4 a Metadata request always allowed auto-creation.
    let allow_auto_topic_creation = if version >= 4 { r.bool()? } else { true };
    if (8..=10).contains(&version) {
        let _include_cluster_authorized_operations = r.bool()?;
    }
    if version >= 8 {
        let _include_topic_authorized_operations = r.bool()?;
    }
    r.tagged_fields()?;
    // Version 0 asks for every topic with an empty list.
    let topics = match topics {
        Some(list) if list.is_empty() && version == 0 => None,
        other => other,
    };
    Ok(MetadataRequest {
        topics,
        allow_auto_topic_creation,
    })
}

/// InitProducerId.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InitProducerIdRequest {
    pub(crate) transactional_id: Option<String>,
    /// The producer id and epoch of an existing producer (KIP-360), or -1.
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
}

pub(crate) fn init_producer_id(r: &mut Reader, version: i16) -> WireResult<InitProducerIdRequest> {
    let transactional_id = r.nullable_string()?;
    let _transaction_timeout_ms = r.i32()?;
    let (producer_id, producer_epoch) = if version >= 3 {
        (r.i64()?, r.i16()?)
    } else {
        (-1, -1)
    };
    r.tagged_fields()?;
    Ok(InitProducerIdRequest {
        transactional_id,
        producer_id,
        producer_epoch,
    })
}

/// One partition of a Produce: its index and its record batches.
pub(crate) type ProducePartition = (i32, Option<Bytes>);

/// Produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProduceRequest {
    pub(crate) transactional_id: Option<String>,
    pub(crate) acks: i16,
    pub(crate) topics: Vec<(String, Vec<ProducePartition>)>,
}

pub(crate) fn produce(r: &mut Reader, _version: i16) -> WireResult<ProduceRequest> {
    let transactional_id = r.nullable_string()?;
    let acks = r.i16()?;
    let _timeout_ms = r.i32()?;
    let topics = r.array(|r| {
        let name = r.string()?;
        let partitions = r.array(|r| {
            let index = r.i32()?;
            let records = r.nullable_bytes()?;
            r.tagged_fields()?;
            Ok((index, records))
        })?;
        r.tagged_fields()?;
        Ok((name, partitions))
    })?;
    r.tagged_fields()?;
    Ok(ProduceRequest {
        transactional_id,
        acks,
        topics,
    })
}

/// One partition of a ListOffsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListOffsetsPartition {
    pub(crate) partition: i32,
    pub(crate) timestamp: i64,
}

/// ListOffsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListOffsetsRequest {
    pub(crate) topics: Vec<(String, Vec<ListOffsetsPartition>)>,
}

pub(crate) fn list_offsets(r: &mut Reader, version: i16) -> WireResult<ListOffsetsRequest> {
    let _replica_id = r.i32()?;
    if version >= 2 {
        let _isolation_level = r.i8()?;
    }
    let topics = r.array(|r| {
        let name = r.string()?;
        let partitions = r.array(|r| {
            let partition = r.i32()?;
            if version >= 4 {
                let _current_leader_epoch = r.i32()?;
            }
            let timestamp = r.i64()?;
            r.tagged_fields()?;
            Ok(ListOffsetsPartition {
                partition,
                timestamp,
            })
        })?;
        r.tagged_fields()?;
        Ok((name, partitions))
    })?;
    r.tagged_fields()?;
    Ok(ListOffsetsRequest { topics })
}

/// One partition of a Fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FetchPartition {
    pub(crate) partition: i32,
    pub(crate) fetch_offset: i64,
    pub(crate) max_bytes: i32,
}

/// Fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FetchRequest {
    pub(crate) max_wait_ms: i32,
    pub(crate) min_bytes: i32,
    pub(crate) max_bytes: i32,
    pub(crate) topics: Vec<(String, Vec<FetchPartition>)>,
}

pub(crate) fn fetch(r: &mut Reader, version: i16) -> WireResult<FetchRequest> {
    let _replica_id = r.i32()?;
    let max_wait_ms = r.i32()?;
    let min_bytes = r.i32()?;
    let max_bytes = r.i32()?;
    let _isolation_level = r.i8()?;
    if version >= 7 {
        let _session_id = r.i32()?;
        let _session_epoch = r.i32()?;
    }
    let topics = r.array(|r| {
        let name = r.string()?;
        let partitions = r.array(|r| {
            let partition = r.i32()?;
            if version >= 9 {
                let _current_leader_epoch = r.i32()?;
            }
            let fetch_offset = r.i64()?;
            if version >= 12 {
                let _last_fetched_epoch = r.i32()?;
            }
            if version >= 5 {
                let _log_start_offset = r.i64()?;
            }
            let max_bytes = r.i32()?;
            r.tagged_fields()?;
            Ok(FetchPartition {
                partition,
                fetch_offset,
                max_bytes,
            })
        })?;
        r.tagged_fields()?;
        Ok((name, partitions))
    })?;
    if version >= 7 {
        let _forgotten = r.array(|r| {
            r.string()?;
            r.array(|r| r.i32())?;
            r.tagged_fields()
        })?;
    }
    if version >= 11 {
        let _rack_id = r.string()?;
    }
    r.tagged_fields()?;
    Ok(FetchRequest {
        max_wait_ms,
        min_bytes,
        max_bytes,
        topics,
    })
}

mod admin;
mod groups;
mod sasl;
mod topics;

pub(crate) use admin::*;
pub(crate) use groups::*;
pub(crate) use sasl::*;
pub(crate) use topics::*;

#[cfg(test)]
mod tests;
