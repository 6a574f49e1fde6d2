//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: a topic's configs are its
//! table's retention policy (`retention.ms`, `retention.bytes`) and `cleanup.policy=delete`; a
//! broker's are read-only views of the node's Kafka settings (docs/kafka.md, "Operators'
//! APIs").

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{
    AlterConfigsResponse, DescribeConfigsResponse, IncrementalAlterConfigsResponse,
    alter_configs_response, incremental_alter_configs_response,
};
use kafka_protocol::protocol::StrBytes;
use mink_metadata::RetentionPolicy;

use super::errors::{code, code_of};
use super::requests::{
    AlterConfigsRequest, AlterResource, BROKER_RESOURCE, ConfigOp, ConfigResource, TOPIC_RESOURCE,
};
use super::state::Kafka;
use super::topics::{Refusal, check_policy, set_config};
use crate::auth::Action;
use crate::retention::policy::{Effective, Limit, Source};

/// Kafka's config sources.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const STATIC_BROKER_CONFIG: i8 = 4;
const DEFAULT_CONFIG: i8 = 5;
/// Kafka's config types (DescribeConfigs v3+).
const BOOLEAN: i8 = 1;
const STRING: i8 = 2;
const INT: i8 = 3;
const LONG: i8 = 5;

/// One config as described: name, value, source, type.
type Described = (&'static str, Option<String>, i8, i8);

fn text(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

/// Answers a DescribeConfigs.
pub(crate) async fn describe_configs(
    kafka: &Kafka,
    resources: Vec<ConfigResource>,
    version: i16,
) -> DescribeConfigsResponse {
    let mut results = Vec::with_capacity(resources.len());
    for resource in resources {
        let result = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(text(resource.name.clone()));
        let described = match resource.resource_type {
            TOPIC_RESOURCE => topic_configs(kafka, &resource.name).await,
            BROKER_RESOURCE => Ok(broker_configs(kafka)),
            other => Err((
                code::INVALID_REQUEST,
                format!("resource type {other}: topics (2) and brokers (4) have configs"),
            )),
        };
        results.push(match described {
            Ok(configs) => {
                let configs = configs
                    .into_iter()
                    .filter(|(name, ..)| {
                        resource
                            .keys
                            .as_ref()
                            .is_none_or(|keys| keys.iter().any(|k| k == name))
                    })
                    .map(|(name, value, source, kind)| {
                        let config = DescribeConfigsResourceResult::default()
                            .with_name(text(name))
                            .with_value(value.map(text))
                            .with_read_only(resource.resource_type == BROKER_RESOURCE)
                            .with_config_source(source);
                        if version >= 3 {
                            config.with_config_type(kind)
                        } else {
                            config
                        }
                    })
                    .collect();
                result.with_configs(configs)
            }
            Err((error, message)) => result
                .with_error_code(error)
                .with_error_message(Some(text(message))),
        });
    }
    DescribeConfigsResponse::default().with_results(results)
}

/// A topic's configs: its effective retention, each from the table or the node's default.
async fn topic_configs(kafka: &Kafka, name: &str) -> Result<Vec<Described>, Refusal> {
    let refuse = |e: crate::error::ApiError| (code_of(&e), e.to_string());
    kafka
        .principal()
        .check(Action::Read, Some(name))
        .map_err(refuse)?;
    let info = kafka.core().catalog().get(name).await.map_err(refuse)?;
    let node = kafka.core().settings().retention.default_policy();
    let effective = Effective::of(info.record().retention.as_ref(), &node);
    let limit = |limit: Option<Limit>| match limit {
        Some(Limit { value, source }) => (
            value.to_string(),
            match source {
                Source::Table => DYNAMIC_TOPIC_CONFIG,
                Source::Node => STATIC_BROKER_CONFIG,
            },
        ),
        None => ("-1".to_owned(), DEFAULT_CONFIG),
    };
    let (age, age_source) = limit(effective.age_ms);
    let (bytes, bytes_source) = limit(effective.bytes);
    Ok(vec![
        ("retention.ms", Some(age), age_source, LONG),
        ("retention.bytes", Some(bytes), bytes_source, LONG),
        (
            "cleanup.policy",
            Some("delete".to_owned()),
            DEFAULT_CONFIG,
            STRING,
        ),
    ])
}

/// A broker's configs: the node's Kafka settings under Kafka's names (read-only).
fn broker_configs(kafka: &Kafka) -> Vec<Described> {
    let s = kafka.settings();
    let on = |b: bool| Some(b.to_string());
    vec![
        (
            "auto.create.topics.enable",
            on(s.auto_create_topics),
            STATIC_BROKER_CONFIG,
            BOOLEAN,
        ),
        (
            "num.partitions",
            Some(s.default_partitions.to_string()),
            STATIC_BROKER_CONFIG,
            INT,
        ),
        (
            "socket.request.max.bytes",
            Some(s.max_request_bytes.to_string()),
            STATIC_BROKER_CONFIG,
            INT,
        ),
        (
            "group.initial.rebalance.delay.ms",
            Some(s.group_initial_rebalance_delay.as_millis().to_string()),
            STATIC_BROKER_CONFIG,
            INT,
        ),
        (
            "group.min.session.timeout.ms",
            Some(s.group_min_session_timeout.as_millis().to_string()),
            STATIC_BROKER_CONFIG,
            INT,
        ),
        (
            "group.max.session.timeout.ms",
            Some(s.group_max_session_timeout.as_millis().to_string()),
            STATIC_BROKER_CONFIG,
            INT,
        ),
        (
            "connections.max.idle.ms",
            Some(s.idle_timeout.as_millis().to_string()),
            STATIC_BROKER_CONFIG,
            LONG,
        ),
    ]
}

/// Changes one resource's configs: AlterConfigs replaces the topic's retention with the
/// configs given, IncrementalAlterConfigs changes the ones named.
async fn alter(
    kafka: &Kafka,
    resource: &AlterResource,
    incremental: bool,
    validate_only: bool,
) -> Result<(), Refusal> {
    if resource.resource_type != TOPIC_RESOURCE {
        return Err((
            code::INVALID_REQUEST,
            "broker configs are the node's settings: change them in its configuration file"
                .to_owned(),
        ));
    }
    let refuse = |e: crate::error::ApiError| (code_of(&e), e.to_string());
    kafka
        .principal()
        .check(Action::Write, Some(&resource.name))
        .map_err(refuse)?;
    let catalog = kafka.core().catalog();
    let info = catalog.get(&resource.name).await.map_err(refuse)?;
    let mut policy = if incremental {
        info.record().retention.unwrap_or_default()
    } else {
        RetentionPolicy::default()
    };
    for (name, op, value) in &resource.configs {
        let value = match op {
            ConfigOp::Set => Some(value.as_deref().unwrap_or_default()),
            ConfigOp::Delete => None,
            ConfigOp::List => {
                return Err((
                    code::INVALID_CONFIG,
                    format!("{name} is not a list: APPEND and SUBTRACT do not apply"),
                ));
            }
        };
        set_config(&mut policy, name, value)?;
    }
    let policy = (policy != RetentionPolicy::default()).then_some(policy);
    if let Some(policy) = &policy {
        check_policy(policy)?;
    }
    if validate_only {
        return Ok(());
    }
    catalog
        .set_retention(&resource.name, policy)
        .await
        .map_err(refuse)?;
    tracing::info!(topic = resource.name, retention = ?policy, "kafka: topic retention set");
    Ok(())
}

/// Answers an AlterConfigs.
pub(crate) async fn alter_configs(
    kafka: &Kafka,
    request: AlterConfigsRequest,
) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in &request.resources {
        let answer = alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(text(resource.name.clone()));
        responses.push(
            match alter(kafka, resource, false, request.validate_only).await {
                Ok(()) => answer,
                Err((error, message)) => answer
                    .with_error_code(error)
                    .with_error_message(Some(text(message))),
            },
        );
    }
    AlterConfigsResponse::default().with_responses(responses)
}

/// Answers an IncrementalAlterConfigs.
pub(crate) async fn incremental_alter_configs(
    kafka: &Kafka,
    request: AlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in &request.resources {
        let answer = incremental_alter_configs_response::AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(text(resource.name.clone()));
        responses.push(
            match alter(kafka, resource, true, request.validate_only).await {
                Ok(()) => answer,
                Err((error, message)) => answer
                    .with_error_code(error)
                    .with_error_message(Some(text(message))),
            },
        );
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}
