//! CreateTopics, DeleteTopics and auto-creation: a topic made through Kafka is a table of the
//! Kafka schema, one bucket per partition (docs/kafka.md, "Topics").

use std::sync::Arc;

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{CreateTopicsResponse, DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use mink_metadata::RetentionPolicy;

use super::errors::{code, code_of};
use super::requests::{CreatableTopic, CreateTopicsRequest, DeleteTopicsRequest};
use super::state::Kafka;
use super::table::kafka_schema;
use crate::auth::Action;
use crate::catalog::{TableInfo, TableOptions};
use crate::error::{ApiError, ApiResult};
use crate::format::schema::JsonSchema;

/// Why a request was refused: a Kafka code and a message.
pub(crate) type Refusal = (i16, String);

/// Answers a CreateTopics.
pub(crate) async fn create_topics(
    kafka: &Kafka,
    request: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.name.clone();
        let result = CreatableTopicResult::default()
            .with_name(TopicName(StrBytes::from_string(name.clone())));
        results.push(match create(kafka, topic, request.validate_only).await {
            // The partition count and replication factor are answered from version 5.
            Ok(partitions) if version >= 5 => result
                .with_num_partitions(partitions)
                .with_replication_factor(1),
            Ok(_) => result,
            Err((error_code, message)) => {
                tracing::debug!(
                    topic = name,
                    error_code,
                    message,
                    "kafka: topic not created"
                );
                result
                    .with_error_code(error_code)
                    .with_error_message(Some(StrBytes::from_string(message)))
            }
        });
    }
    CreateTopicsResponse::default().with_topics(results)
}

/// Creates one topic (or only checks it, `validate_only`); returns its partition count.
async fn create(kafka: &Kafka, topic: CreatableTopic, validate_only: bool) -> Result<i32, Refusal> {
    let refuse = |e: ApiError| (create_code(&e), e.to_string());
    kafka
        .principal()
        .check(Action::Write, Some(&topic.name))
        .map_err(refuse)?;
    let partitions = match topic.num_partitions {
        -1 => kafka.settings().default_partitions,
        n => u32::try_from(n).ok().filter(|n| *n > 0).ok_or((
            code::INVALID_PARTITIONS,
            format!("{n} partitions: a topic needs at least one"),
        ))?,
    };
    if topic.replication_factor == 0 || topic.replication_factor < -1 {
        return Err((
            code::INVALID_REPLICATION_FACTOR,
            format!("replication factor {}", topic.replication_factor),
        ));
    }
    if topic.manual_assignment {
        return Err((
            code::INVALID_REQUEST,
            "manual partition assignments are not served: Mink places buckets itself".to_owned(),
        ));
    }
    let retention = retention(&topic.configs)?;
    let catalog = kafka.core().catalog();
    if validate_only {
        return match catalog.get(&topic.name).await {
            Ok(_) => Err((
                code::TOPIC_ALREADY_EXISTS,
                format!("topic `{}` exists", topic.name),
            )),
            Err(ApiError::TableNotFound { .. }) => Ok(i32::try_from(partitions).unwrap_or(-1)),
            Err(e) => Err(refuse(e)),
        };
    }
    create_table(kafka, &topic.name, partitions, retention)
        .await
        .map_err(refuse)?;
    tracing::info!(topic = topic.name, partitions, "kafka: topic created");
    Ok(i32::try_from(partitions).unwrap_or(-1))
}

/// Creates the table of a Kafka topic.
async fn create_table(
    kafka: &Kafka,
    name: &str,
    partitions: u32,
    retention: Option<RetentionPolicy>,
) -> ApiResult<Arc<TableInfo>> {
    let schema = JsonSchema::from_arrow(&kafka_schema());
    kafka
        .core()
        .catalog()
        .create(
            name,
            &schema,
            partitions,
            vec!["default".to_owned()],
            TableOptions {
                retention,
                kafka_key: None,
                stream: None,
                compression: None,
            },
        )
        .await
}

/// The table of `name`, created with the Kafka schema and `kafka.default_partitions` when it
/// does not exist and `kafka.auto_create_topics` is on (Kafka's `auto.create.topics.enable`).
pub(crate) async fn table_or_create(kafka: &Kafka, name: &str) -> ApiResult<Arc<TableInfo>> {
    match kafka.core().catalog().get(name).await {
        Err(ApiError::TableNotFound { .. }) if kafka.settings().auto_create_topics => {
            kafka.principal().check(Action::Write, Some(name))?;
            let partitions = kafka.settings().default_partitions;
            match create_table(kafka, name, partitions, None).await {
                Ok(info) => {
                    tracing::info!(
                        topic = name,
                        partitions,
                        "kafka: topic created on first use"
                    );
                    Ok(info)
                }
                // Created by another request in the meantime.
                Err(ApiError::TableExists { .. }) => kafka.core().catalog().get(name).await,
                Err(e) => Err(e),
            }
        }
        other => other,
    }
}

/// The retention policy of the topic configs of a CreateTopics (`None`: none given).
fn retention(configs: &[(String, Option<String>)]) -> Result<Option<RetentionPolicy>, Refusal> {
    let mut policy = RetentionPolicy::default();
    let mut given = false;
    for (name, value) in configs {
        given |= set_config(
            &mut policy,
            name,
            Some(value.as_deref().unwrap_or_default()),
        )?;
    }
    if !given {
        return Ok(None);
    }
    check_policy(&policy)?;
    Ok(Some(policy))
}

/// Sets topic config `name` in `policy` (`None`: back to the node's default). Returns whether
/// it is a retention config: `retention.ms` and `retention.bytes` (-1: unbounded) are;
/// `cleanup.policy=delete` is what Mink does; any other config is refused.
pub(crate) fn set_config(
    policy: &mut RetentionPolicy,
    name: &str,
    value: Option<&str>,
) -> Result<bool, Refusal> {
    let bound = |value: &str| -> Result<Option<u64>, Refusal> {
        match value.parse::<i64>() {
            Ok(-1) => Ok(None),
            Ok(n) if n >= 0 => Ok(Some(n as u64)),
            _ => Err((
                code::INVALID_CONFIG,
                format!("{name}={value}: a whole number or -1"),
            )),
        }
    };
    match (name, value) {
        ("retention.ms", Some(v)) => policy.age_ms = bound(v)?,
        ("retention.ms", None) => policy.age_ms = None,
        ("retention.bytes", Some(v)) => policy.bytes = bound(v)?,
        ("retention.bytes", None) => policy.bytes = None,
        ("cleanup.policy", None | Some("delete")) => return Ok(false),
        _ => {
            return Err((
                code::INVALID_CONFIG,
                format!(
                    "topic config {name}={} is not served (retention.ms, retention.bytes and cleanup.policy=delete are)",
                    value.unwrap_or("(default)")
                ),
            ));
        }
    }
    Ok(true)
}

/// Checks a policy against the retention minimums.
pub(crate) fn check_policy(policy: &RetentionPolicy) -> Result<(), Refusal> {
    crate::settings::check_retention(policy)
        .map_err(|(field, why)| (code::INVALID_CONFIG, format!("retention.{field} {why}")))
}

/// The CreateTopics code of a node error.
fn create_code(error: &ApiError) -> i16 {
    match error {
        ApiError::TableExists { .. } => code::TOPIC_ALREADY_EXISTS,
        ApiError::BadRequest { .. } => code::INVALID_TOPIC_EXCEPTION,
        ApiError::LimitExceeded { setting, .. } if setting.contains("bucket") => {
            code::INVALID_PARTITIONS
        }
        ApiError::LimitExceeded { .. } => code::POLICY_VIOLATION,
        ApiError::Unauthorized { .. } | ApiError::Forbidden { .. } => {
            code::TOPIC_AUTHORIZATION_FAILED
        }
        other => code_of(other),
    }
}

/// Answers a DeleteTopics: each named topic's table is dropped, its logs destroyed.
pub(crate) async fn delete_topics(
    kafka: &Kafka,
    request: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for name in request.topics {
        let result = DeletableTopicResult::default()
            .with_name(name.clone().map(|n| TopicName(StrBytes::from_string(n))));
        let Some(name) = name else {
            // Named by topic id, which Mink does not give topics.
            results.push(result.with_error_code(code::UNKNOWN_TOPIC_ID));
            continue;
        };
        let dropped = match kafka.principal().check(Action::Write, Some(&name)) {
            Ok(()) => kafka.core().drop_table(&name).await,
            Err(e) => Err(e),
        };
        results.push(match dropped {
            Ok(()) => {
                tracing::info!(topic = name, "kafka: topic deleted");
                kafka.core().metrics().kafka.lag.forget_topic(&name);
                result
            }
            // The message is answered from version 5.
            Err(e) => result
                .with_error_code(code_of(&e))
                .with_error_message((version >= 5).then(|| StrBytes::from_string(e.to_string()))),
        });
    }
    DeleteTopicsResponse::default().with_responses(results)
}
