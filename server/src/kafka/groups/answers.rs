//! FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups and DescribeGroups:
//! requests to the coordinator and their answers.

use std::time::Duration;

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator as CoordinatorAnswer;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    BrokerId, DescribeGroupsResponse, FindCoordinatorResponse, GroupId, HeartbeatResponse,
    JoinGroupResponse, LeaveGroupResponse, ListGroupsResponse, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::offsets::{group_error, group_id_error};
use super::{JoinAsk, State};
use crate::kafka::brokers::Brokers;
use crate::kafka::errors::code;
use crate::kafka::requests::{
    DescribeGroupsRequest, FindCoordinatorRequest, HeartbeatRequest, JoinGroupRequest,
    LeaveGroupRequest, ListGroupsRequest, SyncGroupRequest,
};
use crate::kafka::state::Kafka;

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Answers a FindCoordinator: each group's coordinator is one of the brokers (`Brokers`);
/// transaction coordinators are refused (transactions are not served).
pub(crate) fn find_coordinator(
    kafka: &Kafka,
    request: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let brokers = Brokers::of(kafka);
    let answer =
        |key: &str| {
            let error = if request.key_type != 0 {
                code::COORDINATOR_NOT_AVAILABLE
            } else {
                group_id_error(kafka, key).unwrap_or(code::NONE)
            };
            let (id, host, port) = match error {
                code::NONE => brokers.coordinator(key).clone(),
                _ => (-1, String::new(), -1),
            };
            CoordinatorAnswer::default()
                .with_key(text(key))
                .with_node_id(BrokerId(id))
                .with_host(text(host))
                .with_port(port)
                .with_error_code(error)
                .with_error_message((request.key_type != 0).then(|| {
                    text("transactions are not served: there is no transaction coordinator")
                }))
        };
    if version >= 4 {
        let coordinators = request.keys.iter().map(|k| answer(k)).collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let one = answer(request.keys.first().map_or("", String::as_str));
    FindCoordinatorResponse::default()
        .with_error_code(one.error_code)
        .with_error_message(one.error_message)
        .with_node_id(one.node_id)
        .with_host(one.host)
        .with_port(one.port)
}

/// Answers a JoinGroup (parked while the group rebalances).
pub(crate) async fn join_group(
    kafka: &Kafka,
    request: JoinGroupRequest,
    client_id: String,
    version: i16,
) -> JoinGroupResponse {
    let joined = match group_error(kafka, &request.group_id) {
        Some(error) => super::Joined::error(error, &request.member_id),
        None => {
            let millis = |ms: i32| Duration::from_millis(u64::try_from(ms).unwrap_or(0));
            let ask = JoinAsk {
                member_id: request.member_id,
                new_member_id: String::new(),
                client_id,
                client_host: format!("/{}", kafka.peer.ip()),
                session_timeout: millis(request.session_timeout_ms),
                rebalance_timeout: millis(request.rebalance_timeout_ms),
                protocol_type: request.protocol_type,
                protocols: request.protocols,
                member_id_required: version >= 4,
            };
            kafka.groups().join(&request.group_id, ask).await
        }
    };
    let members = joined
        .members
        .into_iter()
        .map(|(id, metadata)| {
            JoinGroupResponseMember::default()
                .with_member_id(text(id))
                .with_metadata(metadata)
        })
        .collect();
    JoinGroupResponse::default()
        .with_error_code(joined.error)
        .with_generation_id(joined.generation)
        // Versions before 7 have no protocol type and a non-null protocol name.
        .with_protocol_type(joined.protocol_type.filter(|_| version >= 7).map(text))
        .with_protocol_name(match joined.protocol {
            None if version >= 7 => None,
            protocol => Some(text(protocol.unwrap_or_default())),
        })
        .with_leader(text(joined.leader))
        .with_member_id(text(joined.member_id))
        .with_members(members)
}

/// Answers a SyncGroup (a follower is parked until the leader's assignments come).
pub(crate) async fn sync_group(
    kafka: &Kafka,
    request: SyncGroupRequest,
    version: i16,
) -> SyncGroupResponse {
    let synced = match group_error(kafka, &request.group_id) {
        Some(error) => super::Synced::error(error),
        None => {
            kafka
                .groups()
                .sync(
                    &request.group_id,
                    &request.member_id,
                    request.generation_id,
                    (
                        request.protocol_type.as_deref(),
                        request.protocol_name.as_deref(),
                    ),
                    request.assignments,
                )
                .await
        }
    };
    // The protocol type and name are answered from version 5.
    let named = version >= 5;
    SyncGroupResponse::default()
        .with_error_code(synced.error)
        .with_protocol_type(synced.protocol_type.filter(|_| named).map(text))
        .with_protocol_name(synced.protocol.filter(|_| named).map(text))
        .with_assignment(synced.assignment)
}

/// Answers a Heartbeat.
pub(crate) fn heartbeat(kafka: &Kafka, request: HeartbeatRequest) -> HeartbeatResponse {
    let error = group_error(kafka, &request.group_id).unwrap_or_else(|| {
        kafka
            .groups()
            .heartbeat(&request.group_id, &request.member_id, request.generation_id)
    });
    HeartbeatResponse::default().with_error_code(error)
}

/// Answers a LeaveGroup.
pub(crate) fn leave_group(
    kafka: &Kafka,
    request: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    if let Some(error) = group_error(kafka, &request.group_id) {
        return LeaveGroupResponse::default().with_error_code(error);
    }
    let mut members = Vec::with_capacity(request.members.len());
    for (member_id, instance) in request.members {
        let error = kafka.groups().leave(&request.group_id, &member_id);
        members.push(
            MemberResponse::default()
                .with_member_id(text(member_id))
                .with_group_instance_id(instance.map(text))
                .with_error_code(error),
        );
    }
    // Versions 0-2 leave one member and answer its code for the whole request.
    if version <= 2 {
        let error = members.first().map_or(code::NONE, |m| m.error_code);
        return LeaveGroupResponse::default().with_error_code(error);
    }
    LeaveGroupResponse::default().with_members(members)
}

/// Answers a ListGroups: the groups with members here and those with committed offsets only
/// (Empty).
pub(crate) async fn list_groups(
    kafka: &Kafka,
    request: ListGroupsRequest,
    version: i16,
) -> ListGroupsResponse {
    if kafka
        .principal()
        .check(crate::auth::Action::Read, None)
        .is_err()
    {
        return ListGroupsResponse::default().with_error_code(code::GROUP_AUTHORIZATION_FAILED);
    }
    let mut groups = kafka.groups().list();
    match kafka.core().metadata().groups_with_offsets().await {
        Ok(stored) => {
            for id in stored {
                if !groups.iter().any(|(g, _, _)| *g == id) {
                    groups.push((id, "consumer".to_owned(), State::Empty));
                }
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "kafka: listing groups with committed offsets failed");
            return ListGroupsResponse::default().with_error_code(code::COORDINATOR_NOT_AVAILABLE);
        }
    }
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    let wanted = |state: State| {
        request.states.is_empty()
            || request
                .states
                .iter()
                .any(|s| s.eq_ignore_ascii_case(state.name()))
    };
    let groups = groups
        .into_iter()
        .filter(|(_, _, state)| wanted(*state))
        .map(|(id, protocol_type, state)| {
            let listed = ListedGroup::default()
                .with_group_id(GroupId(text(id)))
                .with_protocol_type(text(protocol_type));
            // The state is answered from version 4.
            if version >= 4 {
                listed.with_group_state(text(state.name()))
            } else {
                listed
            }
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}

/// Answers a DescribeGroups: a group with no members here is `Empty` (or `Dead`, as Kafka
/// answers for a group it does not know, when it has no committed offsets either).
pub(crate) async fn describe_groups(
    kafka: &Kafka,
    request: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let mut groups = Vec::with_capacity(request.groups.len());
    for id in request.groups {
        let described = DescribedGroup::default().with_group_id(GroupId(text(id.clone())));
        if let Some(error) = group_id_error(kafka, &id) {
            groups.push(described.with_error_code(error));
            continue;
        }
        let Some(view) = kafka.groups().describe(&id) else {
            let known = kafka
                .core()
                .metadata()
                .group_offsets(&id)
                .await
                .is_ok_and(|o| !o.is_empty());
            groups.push(
                described
                    .with_group_state(text(if known { "Empty" } else { "Dead" }))
                    .with_protocol_type(text(if known { "consumer" } else { "" })),
            );
            continue;
        };
        let members = view
            .members
            .into_iter()
            .map(|m| {
                DescribedGroupMember::default()
                    .with_member_id(text(m.member_id))
                    .with_client_id(text(m.client_id))
                    .with_client_host(text(m.client_host))
                    .with_member_metadata(m.metadata)
                    .with_member_assignment(m.assignment)
            })
            .collect();
        groups.push(
            described
                .with_group_state(text(view.state.name()))
                .with_protocol_type(text(view.protocol_type))
                .with_protocol_data(text(view.protocol))
                .with_members(members),
        );
    }
    DescribeGroupsResponse::default().with_groups(groups)
}
