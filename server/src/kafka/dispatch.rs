//! From a request frame to the future of its answer: the header decoded, the version checked,
//! the body decoded for its API, the handler started (docs/kafka.md, "Versions").

use std::future::Future;
use std::pin::Pin;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::sync::oneshot;

use super::errors::code;
use super::state::Kafka;
use super::versions::{api_versions, flexible, is_served};
use super::wire::Reader;
use super::{
    configs, delete_records, fetch, groups, metadata, offsets, produce, producer_id, requests,
    sasl, topics,
};
use crate::budget::Permit;
use crate::metrics::ApiLabel;

/// A request read off the wire.
pub(crate) struct Frame {
    pub(crate) body: Bytes,
    /// The frame's bytes on the node's request-bytes budget, until it is answered.
    _held: Permit,
}

impl Frame {
    pub(crate) fn new(body: Bytes, held: Permit) -> Self {
        Frame { body, _held: held }
    }
}

/// What a handled request answers: the encoded response, or nothing (acks=0).
pub(crate) type Answer = Pin<Box<dyn Future<Output = Option<Bytes>> + Send>>;

/// A response frame: size, header, body. `None` when it does not encode (logged).
pub(crate) fn encode(
    correlation: i32,
    api: ApiKey,
    version: i16,
    body: &impl Encodable,
) -> Option<Bytes> {
    let header = ResponseHeader::default().with_correlation_id(correlation);
    let header_version = api.response_header_version(version);
    let mut out = BytesMut::with_capacity(64);
    out.extend_from_slice(&[0; 4]);
    let encoded = header
        .encode(&mut out, header_version)
        .and_then(|()| body.encode(&mut out, version));
    if let Err(e) = encoded {
        tracing::error!(?api, version, error = %e, "kafka: a response did not encode");
        return None;
    }
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Some(out.freeze())
}

/// The answer of `handler`, encoded; the frame's bytes are held until it is done.
fn answer<R, F>(frame: Frame, correlation: i32, api: ApiKey, version: i16, handler: F) -> Answer
where
    R: Encodable + Send,
    F: Future<Output = R> + Send + 'static,
{
    Box::pin(async move {
        let response = handler.await;
        drop(frame);
        encode(correlation, api, version, &response)
    })
}

/// What the connection does with a request.
pub(crate) enum Dispatched {
    /// Writes its answer when it is ready (in request order).
    Answer(Answer),
    /// Writes its answer, then closes (a failed authentication).
    AnswerThenClose(Answer),
    /// Closes now: what cannot be served, or a body that does not decode.
    Close,
}

/// Starts handling one request.
pub(crate) fn dispatch(
    kafka: &mut Kafka,
    frame: Frame,
    last_produce: &mut Option<oneshot::Receiver<()>>,
) -> Dispatched {
    match start(kafka, frame, last_produce) {
        Some(Ok(answer)) => Dispatched::Answer(answer),
        Some(Err(answer)) => Dispatched::AnswerThenClose(answer),
        None => Dispatched::Close,
    }
}

/// [`dispatch`]: `None` closes, `Err` answers and closes.
fn start(
    kafka: &mut Kafka,
    frame: Frame,
    last_produce: &mut Option<oneshot::Receiver<()>>,
) -> Option<Result<Answer, Answer>> {
    let mut body = frame.body.clone();
    let key = body.clone().get_i16();
    let version = body.clone().slice(2..).get_i16();
    let api = ApiKey::try_from(key).ok();
    let header_version = api.map_or(1, |k| k.request_header_version(version));
    let header = RequestHeader::decode(&mut body, header_version).ok()?;
    let correlation = header.correlation_id;
    if api == Some(ApiKey::ApiVersions) && !is_served(key, version) {
        // Answered in version 0, as the protocol asks, so the client learns our ranges.
        let answer = encode(
            correlation,
            ApiKey::ApiVersions,
            0,
            &api_versions(code::UNSUPPORTED_VERSION),
        );
        return Some(Ok(Box::pin(async move { answer })));
    }
    if !is_served(key, version) {
        tracing::debug!(
            key,
            version,
            "kafka: an API or version not served; connection closed"
        );
        return None;
    }
    let api = api?;
    let sasl = matches!(
        api,
        ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate
    );
    if !kafka.authenticated && !sasl {
        tracing::debug!(
            ?api,
            peer = %kafka.peer,
            "kafka: a request before SASL authentication; connection closed"
        );
        return None;
    }
    kafka
        .core()
        .metrics()
        .kafka
        .requests
        .get_or_create(&ApiLabel {
            api: format!("{api:?}"),
        })
        .inc();
    let mut r = Reader::new(body, flexible(key, version));
    let r = &mut r;
    let k = kafka.clone();
    let client_id = header
        .client_id
        .as_ref()
        .map(|c| c.to_string())
        .unwrap_or_default();
    let decoded = |what: &'static str| {
        move |e: super::wire::WireError| {
            tracing::debug!(api = what, version, error = %e, "kafka: a request body did not decode; connection closed");
        }
    };
    macro_rules! serve {
        ($decode:path, $handle:expr) => {{
            let request = $decode(r, version)
                .map_err(decoded(stringify!($decode)))
                .ok()?;
            answer(frame, correlation, api, version, $handle(k, request))
        }};
    }
    let ready = |response: &dyn EncodeBody| -> Answer {
        let answer = response.encode_frame(correlation, api, version);
        Box::pin(async move { answer })
    };
    let answer: Answer = match api {
        ApiKey::SaslHandshake => {
            let mechanism = requests::sasl_handshake(r, version)
                .map_err(decoded("sasl_handshake"))
                .ok()?;
            ready(&sasl::handshake(kafka, mechanism))
        }
        ApiKey::SaslAuthenticate => {
            let bytes = requests::sasl_authenticate(r, version)
                .map_err(decoded("sasl_authenticate"))
                .ok()?;
            return Some(match sasl::authenticate(kafka, bytes) {
                Ok(response) => Ok(ready(&response)),
                Err(response) => Err(ready(&response)),
            });
        }
        ApiKey::ApiVersions => ready(&api_versions(code::NONE)),
        ApiKey::Metadata => serve!(requests::metadata, |k: Kafka, q| async move {
            metadata::metadata(&k, q).await
        }),
        ApiKey::InitProducerId => serve!(requests::init_producer_id, |k: Kafka, q| async move {
            producer_id::init_producer_id(&k, q).await
        }),
        ApiKey::ListOffsets => serve!(requests::list_offsets, |k: Kafka, q| async move {
            offsets::list_offsets(&k, q).await
        }),
        ApiKey::Fetch => serve!(requests::fetch, |k: Kafka, q| async move {
            fetch::fetch(&k, q).await
        }),
        ApiKey::CreateTopics => serve!(requests::create_topics, |k: Kafka, q| async move {
            topics::create_topics(&k, q, version).await
        }),
        ApiKey::DeleteTopics => serve!(requests::delete_topics, |k: Kafka, q| async move {
            topics::delete_topics(&k, q, version).await
        }),
        ApiKey::FindCoordinator => serve!(requests::find_coordinator, |k: Kafka, q| async move {
            groups::find_coordinator(&k, q, version)
        }),
        ApiKey::JoinGroup => serve!(requests::join_group, |k: Kafka, q| async move {
            groups::join_group(&k, q, client_id, version).await
        }),
        ApiKey::SyncGroup => serve!(requests::sync_group, |k: Kafka, q| async move {
            groups::sync_group(&k, q, version).await
        }),
        ApiKey::Heartbeat => serve!(requests::heartbeat, |k: Kafka, q| async move {
            groups::heartbeat(&k, q)
        }),
        ApiKey::LeaveGroup => serve!(requests::leave_group, |k: Kafka, q| async move {
            groups::leave_group(&k, q, version)
        }),
        ApiKey::OffsetCommit => serve!(requests::offset_commit, |k: Kafka, q| async move {
            groups::offset_commit(&k, q).await
        }),
        ApiKey::OffsetFetch => serve!(requests::offset_fetch, |k: Kafka, q| async move {
            groups::offset_fetch(&k, q, version).await
        }),
        ApiKey::ListGroups => serve!(requests::list_groups, |k: Kafka, q| async move {
            groups::list_groups(&k, q, version).await
        }),
        ApiKey::DescribeGroups => serve!(requests::describe_groups, |k: Kafka, q| async move {
            groups::describe_groups(&k, q).await
        }),
        ApiKey::DescribeConfigs => serve!(requests::describe_configs, |k: Kafka, q| async move {
            configs::describe_configs(&k, q, version).await
        }),
        ApiKey::AlterConfigs => serve!(requests::alter_configs, |k: Kafka, q| async move {
            configs::alter_configs(&k, q).await
        }),
        ApiKey::IncrementalAlterConfigs => {
            serve!(
                requests::incremental_alter_configs,
                |k: Kafka, q| async move { configs::incremental_alter_configs(&k, q).await }
            )
        }
        ApiKey::DeleteRecords => serve!(requests::delete_records, |k: Kafka, q| async move {
            delete_records::delete_records(&k, q).await
        }),
        ApiKey::DescribeCluster => {
            requests::describe_cluster(r, version)
                .map_err(decoded("describe_cluster"))
                .ok()?;
            ready(&metadata::describe_cluster(kafka))
        }
        ApiKey::Produce => {
            let request = requests::produce(r, version)
                .map_err(decoded("produce"))
                .ok()?;
            let acks = request.acks;
            if !(-1..=1).contains(&acks) {
                tracing::debug!(
                    acks,
                    "kafka: a Produce with acks not 0, 1 or -1; connection closed"
                );
                return None;
            }
            // Placed after the previous Produce of the connection is placed in its logs, not
            // after it is durable: one producer's batches reach each log in the order sent,
            // while the previous one's WAL write is in flight.
            let previous = last_produce.take();
            let (sequenced, next) = oneshot::channel();
            *last_produce = Some(next);
            Box::pin(async move {
                if let Some(previous) = previous {
                    let _ = previous.await;
                }
                let response = produce::produce(&k, request, sequenced).await;
                drop(frame);
                (acks != 0)
                    .then(|| encode(correlation, api, version, &response))
                    .flatten()
            })
        }
        _ => return None,
    };
    Some(Ok(answer))
}

/// A response that encodes as a frame (for answers made at once).
trait EncodeBody {
    fn encode_frame(&self, correlation: i32, api: ApiKey, version: i16) -> Option<Bytes>;
}

impl<T: Encodable> EncodeBody for T {
    fn encode_frame(&self, correlation: i32, api: ApiKey, version: i16) -> Option<Bytes> {
        encode(correlation, api, version, self)
    }
}
