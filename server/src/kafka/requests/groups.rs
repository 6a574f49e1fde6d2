//! Consumer-group request bodies: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! OffsetCommit, OffsetFetch, ListGroups, DescribeGroups.

use bytes::Bytes;

use super::{Reader, WireResult};

/// FindCoordinator: the keys asked for and their type (0 group, 1 transaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FindCoordinatorRequest {
    pub(crate) keys: Vec<String>,
    pub(crate) key_type: i8,
}

pub(crate) fn find_coordinator(r: &mut Reader, version: i16) -> WireResult<FindCoordinatorRequest> {
    let key = if version <= 3 {
        Some(r.string()?)
    } else {
        None
    };
    let key_type = if version >= 1 { r.i8()? } else { 0 };
    let keys = match key {
        Some(key) => vec![key],
        None => r.array(|r| r.string())?,
    };
    r.tagged_fields()?;
    Ok(FindCoordinatorRequest { keys, key_type })
}

/// JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JoinGroupRequest {
    pub(crate) group_id: String,
    pub(crate) session_timeout_ms: i32,
    pub(crate) rebalance_timeout_ms: i32,
    pub(crate) member_id: String,
    pub(crate) group_instance_id: Option<String>,
    pub(crate) protocol_type: String,
    /// (name, metadata) in the member's order of preference.
    pub(crate) protocols: Vec<(String, Bytes)>,
}

pub(crate) fn join_group(r: &mut Reader, version: i16) -> WireResult<JoinGroupRequest> {
    let group_id = r.string()?;
    let session_timeout_ms = r.i32()?;
    let rebalance_timeout_ms = if version >= 1 {
        r.i32()?
    } else {
        session_timeout_ms
    };
    let member_id = r.string()?;
    let group_instance_id = if version >= 5 {
        r.nullable_string()?
    } else {
        None
    };
    let protocol_type = r.string()?;
    let protocols = r.array(|r| {
        let name = r.string()?;
        let metadata = r.bytes()?;
        r.tagged_fields()?;
        Ok((name, metadata))
    })?;
    r.tagged_fields()?;
    Ok(JoinGroupRequest {
        group_id,
        session_timeout_ms,
        rebalance_timeout_ms,
        member_id,
        group_instance_id,
        protocol_type,
        protocols,
    })
}

/// SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyncGroupRequest {
    pub(crate) group_id: String,
    pub(crate) generation_id: i32,
    pub(crate) member_id: String,
    pub(crate) protocol_type: Option<String>,
    pub(crate) protocol_name: Option<String>,
    /// (member id, assignment): sent by the leader only.
    pub(crate) assignments: Vec<(String, Bytes)>,
}

pub(crate) fn sync_group(r: &mut Reader, version: i16) -> WireResult<SyncGroupRequest> {
    let group_id = r.string()?;
    let generation_id = r.i32()?;
    let member_id = r.string()?;
    if version >= 3 {
        let _group_instance_id = r.nullable_string()?;
    }
    let (protocol_type, protocol_name) = if version >= 5 {
        (r.nullable_string()?, r.nullable_string()?)
    } else {
        (None, None)
    };
    let assignments = r.array(|r| {
        let member = r.string()?;
        let assignment = r.bytes()?;
        r.tagged_fields()?;
        Ok((member, assignment))
    })?;
    r.tagged_fields()?;
    Ok(SyncGroupRequest {
        group_id,
        generation_id,
        member_id,
        protocol_type,
        protocol_name,
        assignments,
    })
}

/// Heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeartbeatRequest {
    pub(crate) group_id: String,
    pub(crate) generation_id: i32,
    pub(crate) member_id: String,
}

pub(crate) fn heartbeat(r: &mut Reader, version: i16) -> WireResult<HeartbeatRequest> {
    let group_id = r.string()?;
    let generation_id = r.i32()?;
    let member_id = r.string()?;
    if version >= 3 {
        let _group_instance_id = r.nullable_string()?;
    }
    r.tagged_fields()?;
    Ok(HeartbeatRequest {
        group_id,
        generation_id,
        member_id,
    })
}

/// LeaveGroup: the members leaving (one in versions 0-2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaveGroupRequest {
    pub(crate) group_id: String,
    /// (member id, group instance id).
    pub(crate) members: Vec<(String, Option<String>)>,
}

pub(crate) fn leave_group(r: &mut Reader, version: i16) -> WireResult<LeaveGroupRequest> {
    let group_id = r.string()?;
    let members = if version <= 2 {
        vec![(r.string()?, None)]
    } else {
        r.array(|r| {
            let member = r.string()?;
            let instance = r.nullable_string()?;
            r.tagged_fields()?;
            Ok((member, instance))
        })?
    };
    r.tagged_fields()?;
    Ok(LeaveGroupRequest { group_id, members })
}

/// One partition of an OffsetCommit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommitPartition {
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) metadata: Option<String>,
}

/// OffsetCommit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OffsetCommitRequest {
    pub(crate) group_id: String,
    /// -1 with an empty member id: a commit from outside any generation.
    pub(crate) generation_id: i32,
    pub(crate) member_id: String,
    pub(crate) topics: Vec<(String, Vec<CommitPartition>)>,
}

pub(crate) fn offset_commit(r: &mut Reader, version: i16) -> WireResult<OffsetCommitRequest> {
    let group_id = r.string()?;
    let generation_id = r.i32()?;
    let member_id = r.string()?;
    if version >= 7 {
        let _group_instance_id = r.nullable_string()?;
    }
    if (2..=4).contains(&version) {
        let _retention_time_ms = r.i64()?;
    }
    let topics = r.array(|r| {
        let name = r.string()?;
        let partitions = r.array(|r| {
            let partition = r.i32()?;
            let offset = r.i64()?;
            if version >= 6 {
                let _committed_leader_epoch = r.i32()?;
            }
            let metadata = r.nullable_string()?;
            r.tagged_fields()?;
            Ok(CommitPartition {
                partition,
                offset,
                metadata,
            })
        })?;
        r.tagged_fields()?;
        Ok((name, partitions))
    })?;
    r.tagged_fields()?;
    Ok(OffsetCommitRequest {
        group_id,
        generation_id,
        member_id,
        topics,
    })
}

/// One group of an OffsetFetch: its id and the partitions asked for (`None`: every one with a
/// committed offset).
pub(crate) type FetchGroup = (String, Option<Vec<(String, Vec<i32>)>>);

/// OffsetFetch (one group before version 8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OffsetFetchRequest {
    pub(crate) groups: Vec<FetchGroup>,
}

pub(crate) fn offset_fetch(r: &mut Reader, version: i16) -> WireResult<OffsetFetchRequest> {
    let topics = |r: &mut Reader| {
        r.nullable_array(|r| {
            let name = r.string()?;
            let partitions = r.array(|r| r.i32())?;
            r.tagged_fields()?;
            Ok((name, partitions))
        })
    };
    let groups = if version <= 7 {
        let group = r.string()?;
        vec![(group, topics(r)?)]
    } else {
        r.array(|r| {
            let group = r.string()?;
            let asked = topics(r)?;
            r.tagged_fields()?;
            Ok((group, asked))
        })?
    };
    if version >= 7 {
        let _require_stable = r.bool()?;
    }
    r.tagged_fields()?;
    Ok(OffsetFetchRequest { groups })
}

/// ListGroups: the states asked for (empty: every state).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListGroupsRequest {
    pub(crate) states: Vec<String>,
}

pub(crate) fn list_groups(r: &mut Reader, version: i16) -> WireResult<ListGroupsRequest> {
    let states = if version >= 4 {
        r.array(|r| r.string())?
    } else {
        Vec::new()
    };
    r.tagged_fields()?;
    Ok(ListGroupsRequest { states })
}

/// DescribeGroups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DescribeGroupsRequest {
    pub(crate) groups: Vec<String>,
}

pub(crate) fn describe_groups(r: &mut Reader, version: i16) -> WireResult<DescribeGroupsRequest> {
    let groups = r.array(|r| r.string())?;
    if version >= 3 {
        let _include_authorized_operations = r.bool()?;
    }
    r.tagged_fields()?;
    Ok(DescribeGroupsRequest { groups })
}

#[cfg(test)]
#[path = "groups_tests.rs"]
pub(super) mod tests;
