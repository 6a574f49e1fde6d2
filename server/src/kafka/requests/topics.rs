//! CreateTopics and DeleteTopics request bodies.

use super::{Reader, WireResult};

/// One topic of a CreateTopics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreatableTopic {
    pub(crate) name: String,
    /// -1: the broker's default.
    pub(crate) num_partitions: i32,
    /// -1: the broker's default; Mink keeps one copy on object storage whatever is asked.
    pub(crate) replication_factor: i16,
    /// Whether the request assigns partitions to brokers by hand.
    pub(crate) manual_assignment: bool,
    /// Topic configs, by name.
    pub(crate) configs: Vec<(String, Option<String>)>,
}

/// CreateTopics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreateTopicsRequest {
    pub(crate) topics: Vec<CreatableTopic>,
    pub(crate) validate_only: bool,
}

pub(crate) fn create_topics(r: &mut Reader, _version: i16) -> WireResult<CreateTopicsRequest> {
    let topics = r.array(|r| {
        let name = r.string()?;
        let num_partitions = r.i32()?;
        let replication_factor = r.i16()?;
        let assignments = r.array(|r| {
            r.i32()?;
            r.array(|r| r.i32())?;
            r.tagged_fields()
        })?;
        let configs = r.array(|r| {
            let name = r.string()?;
            let value = r.nullable_string()?;
            r.tagged_fields()?;
            Ok((name, value))
        })?;
        r.tagged_fields()?;
        Ok(CreatableTopic {
            name,
            num_partitions,
            replication_factor,
            manual_assignment: !assignments.is_empty(),
            configs,
        })
    })?;
    let _timeout_ms = r.i32()?;
    let validate_only = r.bool()?;
    r.tagged_fields()?;
    Ok(CreateTopicsRequest {
        topics,
        validate_only,
    })
}

/// DeleteTopics: topic names (`None` where a v6 request names a topic by id only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeleteTopicsRequest {
    pub(crate) topics: Vec<Option<String>>,
}

pub(crate) fn delete_topics(r: &mut Reader, version: i16) -> WireResult<DeleteTopicsRequest> {
    let topics = if version >= 6 {
        r.array(|r| {
            let name = r.nullable_string()?;
            r.uuid()?;
            r.tagged_fields()?;
            Ok(name)
        })?
    } else {
        r.array(|r| r.string().map(Some))?
    };
    let _timeout_ms = r.i32()?;
    r.tagged_fields()?;
    Ok(DeleteTopicsRequest { topics })
}
