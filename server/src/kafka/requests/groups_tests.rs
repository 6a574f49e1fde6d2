//! The topic and group request decoders against the `kafka-protocol` crate's encoders, at every
//! version we advertise.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest as KCreate, DeleteTopicsRequest as KDelete,
    DescribeGroupsRequest as KDescribe, FindCoordinatorRequest as KFind, GroupId,
    HeartbeatRequest as KHeartbeat, JoinGroupRequest as KJoin, LeaveGroupRequest as KLeave,
    ListGroupsRequest as KList, OffsetCommitRequest as KCommit, OffsetFetchRequest as KFetch,
    SyncGroupRequest as KSync, TopicName, create_topics_request, delete_topics_request,
    join_group_request, leave_group_request, offset_commit_request, offset_fetch_request,
    sync_group_request,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::kafka::requests::*;
use crate::kafka::versions::{flexible, served};
use crate::kafka::wire::Reader;

fn encode(message: &impl Encodable, version: i16) -> Bytes {
    let mut buf = BytesMut::new();
    message.encode(&mut buf, version).unwrap();
    buf.freeze()
}

fn s(text: &'static str) -> StrBytes {
    StrBytes::from_static_str(text)
}

/// Decodes `message` encoded at every served version of `key` with `decode`, checks that the
/// whole body was read, and hands each decoded request to `check` (also the operator requests'
/// tests, `admin_tests.rs`).
pub(crate) fn each_version<M: Encodable, T>(
    key: ApiKey,
    message: impl Fn(i16) -> M,
    decode: fn(&mut Reader, i16) -> crate::kafka::wire::WireResult<T>,
    mut check: impl FnMut(i16, T),
) {
    let (min, max) = served(key as i16).unwrap();
    for v in min..=max {
        let bytes = encode(&message(v), v);
        let mut r = Reader::new(bytes.clone(), flexible(key as i16, v));
        let decoded = decode(&mut r, v).unwrap_or_else(|e| panic!("{key:?} v{v}: {e}"));
        assert_eq!(r.remaining(), 0, "{key:?} v{v}");
        check(v, decoded);
        // Truncated anywhere, it is an error, never a panic.
        for cut in 0..bytes.len() {
            let mut r = Reader::new(bytes.slice(..cut), flexible(key as i16, v));
            assert!(decode(&mut r, v).is_err(), "{key:?} v{v} cut at {cut}");
        }
    }
}

#[test]
fn create_and_delete_topics_decode_as_the_crate_encodes_them() {
    each_version(
        ApiKey::CreateTopics,
        |_| {
            KCreate::default()
                .with_topics(vec![
                    create_topics_request::CreatableTopic::default()
                        .with_name(TopicName(s("orders")))
                        .with_num_partitions(3)
                        .with_replication_factor(-1)
                        .with_configs(vec![
                            create_topics_request::CreatableTopicConfig::default()
                                .with_name(s("retention.ms"))
                                .with_value(Some(s("86400000"))),
                        ]),
                    create_topics_request::CreatableTopic::default()
                        .with_name(TopicName(s("manual")))
                        .with_num_partitions(-1)
                        .with_assignments(vec![
                            create_topics_request::CreatableReplicaAssignment::default()
                                .with_partition_index(0)
                                .with_broker_ids(vec![BrokerId(0)]),
                        ]),
                ])
                .with_timeout_ms(30_000)
                .with_validate_only(true)
        },
        create_topics,
        |v, q| {
            assert!(q.validate_only, "v{v}");
            assert_eq!(q.topics.len(), 2);
            assert_eq!(q.topics[0].name, "orders");
            assert_eq!(q.topics[0].num_partitions, 3);
            assert_eq!(q.topics[0].replication_factor, -1);
            assert!(!q.topics[0].manual_assignment);
            assert_eq!(
                q.topics[0].configs,
                vec![("retention.ms".to_owned(), Some("86400000".to_owned()))]
            );
            assert!(q.topics[1].manual_assignment);
        },
    );
    each_version(
        ApiKey::DeleteTopics,
        |v| {
            let message = KDelete::default().with_timeout_ms(1000);
            if v >= 6 {
                message.with_topics(vec![
                    delete_topics_request::DeleteTopicState::default()
                        .with_name(Some(TopicName(s("orders")))),
                ])
            } else {
                message.with_topic_names(vec![TopicName(s("orders"))])
            }
        },
        delete_topics,
        |v, q| assert_eq!(q.topics, vec![Some("orders".to_owned())], "v{v}"),
    );
}

#[test]
fn membership_requests_decode_as_the_crate_encodes_them() {
    each_version(
        ApiKey::FindCoordinator,
        |v| {
            let message = KFind::default().with_key_type(0);
            if v >= 4 {
                message.with_coordinator_keys(vec![s("g1"), s("g2")])
            } else {
                message.with_key(s("g1"))
            }
        },
        find_coordinator,
        |v, q| {
            let expected: Vec<String> = if v >= 4 {
                vec!["g1".into(), "g2".into()]
            } else {
                vec!["g1".into()]
            };
            assert_eq!((q.keys, q.key_type), (expected, 0), "v{v}");
        },
    );
    each_version(
        ApiKey::JoinGroup,
        |v| {
            KJoin::default()
                .with_group_id(GroupId(s("g")))
                .with_session_timeout_ms(45_000)
                .with_rebalance_timeout_ms(300_000)
                .with_member_id(s("m-1"))
                .with_group_instance_id(if v >= 5 { Some(s("i")) } else { None })
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![
                    join_group_request::JoinGroupRequestProtocol::default()
                        .with_name(s("range"))
                        .with_metadata(Bytes::from_static(b"meta")),
                ])
        },
        join_group,
        |v, q| {
            assert_eq!(q.group_id, "g");
            assert_eq!(q.session_timeout_ms, 45_000);
            assert_eq!(q.rebalance_timeout_ms, 300_000, "v{v}");
            assert_eq!(q.member_id, "m-1");
            assert_eq!(q.group_instance_id.is_some(), v >= 5);
            assert_eq!(q.protocol_type, "consumer");
            assert_eq!(
                q.protocols,
                vec![("range".to_owned(), Bytes::from_static(b"meta"))]
            );
        },
    );
    each_version(
        ApiKey::SyncGroup,
        |v| {
            let message = KSync::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id(4)
                .with_member_id(s("m-1"))
                .with_assignments(vec![
                    sync_group_request::SyncGroupRequestAssignment::default()
                        .with_member_id(s("m-2"))
                        .with_assignment(Bytes::from_static(b"parts")),
                ]);
            if v >= 5 {
                message
                    .with_protocol_type(Some(s("consumer")))
                    .with_protocol_name(Some(s("range")))
            } else {
                message
            }
        },
        sync_group,
        |v, q| {
            assert_eq!((q.group_id.as_str(), q.generation_id), ("g", 4));
            assert_eq!(q.member_id, "m-1");
            assert_eq!(q.protocol_name.is_some(), v >= 5, "v{v}");
            assert_eq!(
                q.assignments,
                vec![("m-2".to_owned(), Bytes::from_static(b"parts"))]
            );
        },
    );
    each_version(
        ApiKey::Heartbeat,
        |_| {
            KHeartbeat::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id(7)
                .with_member_id(s("m"))
        },
        heartbeat,
        |v, q| {
            assert_eq!(
                (q.group_id.as_str(), q.generation_id, q.member_id.as_str()),
                ("g", 7, "m"),
                "v{v}"
            )
        },
    );
    each_version(
        ApiKey::LeaveGroup,
        |v| {
            let message = KLeave::default().with_group_id(GroupId(s("g")));
            if v >= 3 {
                message.with_members(vec![
                    leave_group_request::MemberIdentity::default().with_member_id(s("m")),
                ])
            } else {
                message.with_member_id(s("m"))
            }
        },
        leave_group,
        |v, q| assert_eq!(q.members, vec![("m".to_owned(), None)], "v{v}"),
    );
}

#[test]
fn offset_and_listing_requests_decode_as_the_crate_encodes_them() {
    each_version(
        ApiKey::OffsetCommit,
        |_| {
            KCommit::default()
                .with_group_id(GroupId(s("g")))
                .with_generation_id_or_member_epoch(3)
                .with_member_id(s("m"))
                .with_retention_time_ms(-1)
                .with_topics(vec![
                    offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(TopicName(s("t")))
                        .with_partitions(vec![
                            offset_commit_request::OffsetCommitRequestPartition::default()
                                .with_partition_index(1)
                                .with_committed_offset(42)
                                .with_committed_metadata(Some(s("note"))),
                        ]),
                ])
        },
        offset_commit,
        |v, q| {
            assert_eq!((q.group_id.as_str(), q.generation_id), ("g", 3), "v{v}");
            assert_eq!(q.member_id, "m");
            assert_eq!(
                q.topics,
                vec![(
                    "t".to_owned(),
                    vec![CommitPartition {
                        partition: 1,
                        offset: 42,
                        metadata: Some("note".to_owned())
                    }]
                )]
            );
        },
    );
    each_version(
        ApiKey::OffsetFetch,
        |v| {
            if v >= 8 {
                KFetch::default().with_groups(vec![
                    offset_fetch_request::OffsetFetchRequestGroup::default()
                        .with_group_id(GroupId(s("g")))
                        .with_topics(Some(vec![
                            offset_fetch_request::OffsetFetchRequestTopics::default()
                                .with_name(TopicName(s("t")))
                                .with_partition_indexes(vec![0, 2]),
                        ])),
                    offset_fetch_request::OffsetFetchRequestGroup::default()
                        .with_group_id(GroupId(s("all")))
                        .with_topics(None),
                ])
            } else {
                KFetch::default()
                    .with_group_id(GroupId(s("g")))
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopic::default()
                            .with_name(TopicName(s("t")))
                            .with_partition_indexes(vec![0, 2]),
                    ]))
            }
        },
        offset_fetch,
        |v, q| {
            let one = ("g".to_owned(), Some(vec![("t".to_owned(), vec![0, 2])]));
            let mut expected = vec![one];
            if v >= 8 {
                expected.push(("all".to_owned(), None));
            }
            assert_eq!(q.groups, expected, "v{v}");
        },
    );
    each_version(
        ApiKey::ListGroups,
        |v| {
            if v >= 4 {
                KList::default().with_states_filter(vec![s("Stable")])
            } else {
                KList::default()
            }
        },
        list_groups,
        |v, q| assert_eq!(q.states.len(), usize::from(v >= 4), "v{v}"),
    );
    each_version(
        ApiKey::DescribeGroups,
        |_| KDescribe::default().with_groups(vec![GroupId(s("g")), GroupId(s("h"))]),
        describe_groups,
        |v, q| assert_eq!(q.groups, vec!["g".to_owned(), "h".to_owned()], "v{v}"),
    );
}
