//! What operators' tools send: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
//! DeleteRecords, DescribeCluster.

use super::{Reader, WireResult};

/// Kafka's resource type of a topic.
pub(crate) const TOPIC_RESOURCE: i8 = 2;
/// Kafka's resource type of a broker.
pub(crate) const BROKER_RESOURCE: i8 = 4;

/// One resource of a DescribeConfigs: its type, name and the keys asked for (`None`: all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigResource {
    pub(crate) resource_type: i8,
    pub(crate) name: String,
    pub(crate) keys: Option<Vec<String>>,
}

pub(crate) fn describe_configs(r: &mut Reader, version: i16) -> WireResult<Vec<ConfigResource>> {
    let resources = r.array(|r| {
        let resource_type = r.i8()?;
        let name = r.string()?;
        let keys = r.nullable_array(|r| r.string())?;
        r.tagged_fields()?;
        Ok(ConfigResource {
            resource_type,
            name,
            keys,
        })
    })?;
    let _include_synonyms = r.bool()?;
    if version >= 3 {
        let _include_documentation = r.bool()?;
    }
    r.tagged_fields()?;
    Ok(resources)
}

/// How IncrementalAlterConfigs changes one config (AlterConfigs sets every config it names and
/// removes the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfigOp {
    Set,
    Delete,
    /// APPEND and SUBTRACT, for list configs (none of ours is one).
    List,
}

/// One resource of an AlterConfigs or IncrementalAlterConfigs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AlterResource {
    pub(crate) resource_type: i8,
    pub(crate) name: String,
    pub(crate) configs: Vec<(String, ConfigOp, Option<String>)>,
}

/// AlterConfigs or IncrementalAlterConfigs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AlterConfigsRequest {
    pub(crate) resources: Vec<AlterResource>,
    pub(crate) validate_only: bool,
}

fn alter(r: &mut Reader, incremental: bool) -> WireResult<AlterConfigsRequest> {
    let resources = r.array(|r| {
        let resource_type = r.i8()?;
        let name = r.string()?;
        let configs = r.array(|r| {
            let name = r.string()?;
            let op = if incremental {
                match r.i8()? {
                    0 => ConfigOp::Set,
                    1 => ConfigOp::Delete,
                    _ => ConfigOp::List,
                }
            } else {
                ConfigOp::Set
            };
            let value = r.nullable_string()?;
            r.tagged_fields()?;
            Ok((name, op, value))
        })?;
        r.tagged_fields()?;
        Ok(AlterResource {
            resource_type,
            name,
            configs,
        })
    })?;
    let validate_only = r.bool()?;
    r.tagged_fields()?;
    Ok(AlterConfigsRequest {
        resources,
        validate_only,
    })
}

pub(crate) fn alter_configs(r: &mut Reader, _version: i16) -> WireResult<AlterConfigsRequest> {
    alter(r, false)
}

pub(crate) fn incremental_alter_configs(
    r: &mut Reader,
    _version: i16,
) -> WireResult<AlterConfigsRequest> {
    alter(r, true)
}

/// DeleteRecords: (topic, [(partition, offset)]), -1 for the high watermark.
pub(crate) type DeleteRecordsRequest = Vec<(String, Vec<(i32, i64)>)>;

pub(crate) fn delete_records(r: &mut Reader, _version: i16) -> WireResult<DeleteRecordsRequest> {
    let topics = r.array(|r| {
        let name = r.string()?;
        let partitions = r.array(|r| {
            let partition = r.i32()?;
            let offset = r.i64()?;
            r.tagged_fields()?;
            Ok((partition, offset))
        })?;
        r.tagged_fields()?;
        Ok((name, partitions))
    })?;
    let _timeout_ms = r.i32()?;
    r.tagged_fields()?;
    Ok(topics)
}

pub(crate) fn describe_cluster(r: &mut Reader, _version: i16) -> WireResult<()> {
    let _include_cluster_authorized_operations = r.bool()?;
    r.tagged_fields()
}

#[cfg(test)]
#[path = "admin_tests.rs"]
mod tests;
