//! One Kafka connection: frames read by their own task, requests handled as they arrive,
//! answers written strictly in request order (docs/kafka.md, "Framing and decoding",
//! "Pipelining").

use std::future::Future;
use std::pin::Pin;

use bytes::{Buf, Bytes, BytesMut};
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{mpsc, oneshot};

use super::errors::code;
use super::state::Kafka;
use super::versions::{api_versions, flexible, is_served};
use super::wire::Reader;
use super::{fetch, metadata, offsets, produce, producer_id, requests};
use crate::budget::Permit;

/// A request read off the wire.
struct Frame {
    body: Bytes,
    _held: Permit,
}

/// What a handled request answers: the encoded response, or nothing (acks=0).
type Answer = Pin<Box<dyn Future<Output = Option<Bytes>> + Send>>;

/// Serves one connection until the client closes it, sends what cannot be served, idles out or
/// the node shuts down.
pub(crate) async fn serve(kafka: Kafka, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let settings = kafka.settings().clone();
    let (frames, mut incoming) = mpsc::channel(settings.max_inflight_requests);
    let reader = tokio::spawn(read_frames(kafka.clone(), read, frames));
    let mut pending: FuturesOrdered<Answer> = FuturesOrdered::new();
    // The previous Produce's completion: the next one waits for it (one writer's batches
    // reach each tablet in the order sent).
    let mut last_produce: Option<oneshot::Receiver<()>> = None;
    let shutdown = kafka.core().shutdown_signal().clone();
    loop {
        tokio::select! {
            Some(answer) = pending.next(), if !pending.is_empty() => {
                if let Some(bytes) = answer
                    && write.write_all(&bytes).await.is_err()
                {
                    break;
                }
            }
            frame = incoming.recv(), if pending.len() < settings.max_inflight_requests => {
                let Some(frame) = frame else { break };
                match dispatch(&kafka, frame, &mut last_produce) {
                    Some(answer) => pending.push_back(answer),
                    None => break,
                }
            }
            () = shutdown.cancelled() => break,
        }
    }
    // What was taken is answered before the connection closes.
    while let Some(answer) = pending.next().await {
        if let Some(bytes) = answer
            && write.write_all(&bytes).await.is_err()
        {
            break;
        }
    }
    reader.abort();
    let _ = write.shutdown().await;
}

/// Reads frames until the client closes, a size is out of bounds or the connection idles out.
async fn read_frames(kafka: Kafka, mut read: OwnedReadHalf, frames: mpsc::Sender<Frame>) {
    let settings = kafka.settings().clone();
    loop {
        let mut size = [0u8; 4];
        match tokio::time::timeout(settings.idle_timeout, read.read_exact(&mut size)).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let size = i32::from_be_bytes(size);
        // api key, version, correlation id and the client id's length at the least.
        let Some(size) = usize::try_from(size)
            .ok()
            .filter(|s| (10..=settings.max_request_bytes).contains(s))
        else {
            tracing::debug!(
                size,
                "kafka: a request size out of bounds; connection closed"
            );
            return;
        };
        let held = loop {
            match kafka.core().budget().reserve(size) {
                Ok(permit) => break permit,
                // Back-pressure: the node holds too many request bytes; stop reading a while.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
            }
        };
        let mut body = BytesMut::zeroed(size);
        if read.read_exact(&mut body).await.is_err() {
            return;
        }
        let frame = Frame {
            body: body.freeze(),
            _held: held,
        };
        if frames.send(frame).await.is_err() {
            return;
        }
    }
}

/// Starts handling one request; `None` closes the connection (what cannot be served).
fn dispatch(
    kafka: &Kafka,
    frame: Frame,
    last_produce: &mut Option<oneshot::Receiver<()>>,
) -> Option<Answer> {
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
        return Some(Box::pin(async move { answer }));
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
    let mut reader = Reader::new(body, flexible(key, version));
    let kafka = kafka.clone();
    let held = frame;
    let answer: Answer = match api {
        ApiKey::ApiVersions => {
            let answer = encode(correlation, api, version, &api_versions(code::NONE));
            Box::pin(async move { answer })
        }
        ApiKey::Metadata => {
            let request = requests::metadata(&mut reader, version).ok()?;
            Box::pin(async move {
                let response = metadata::metadata(&kafka, request).await;
                drop(held);
                encode(correlation, api, version, &response)
            })
        }
        ApiKey::InitProducerId => {
            let request = requests::init_producer_id(&mut reader, version).ok()?;
            Box::pin(async move {
                let response = producer_id::init_producer_id(&kafka, request).await;
                encode(correlation, api, version, &response)
            })
        }
        ApiKey::ListOffsets => {
            let request = requests::list_offsets(&mut reader, version).ok()?;
            Box::pin(async move {
                let response = offsets::list_offsets(&kafka, request).await;
                encode(correlation, api, version, &response)
            })
        }
        ApiKey::Fetch => {
            let request = requests::fetch(&mut reader, version).ok()?;
            Box::pin(async move {
                let response = fetch::fetch(&kafka, request).await;
                encode(correlation, api, version, &response)
            })
        }
        ApiKey::Produce => {
            let request = requests::produce(&mut reader, version).ok()?;
            let acks = request.acks;
            if !(-1..=1).contains(&acks) {
                tracing::debug!(
                    acks,
                    "kafka: a Produce with acks not 0, 1 or -1; connection closed"
                );
                return None;
            }
            let previous = last_produce.take();
            let (done, next) = oneshot::channel();
            *last_produce = Some(next);
            Box::pin(async move {
                if let Some(previous) = previous {
                    let _ = previous.await;
                }
                let response = produce::produce(&kafka, request).await;
                drop(done);
                drop(held);
                (acks != 0)
                    .then(|| encode(correlation, api, version, &response))
                    .flatten()
            })
        }
        _ => return None,
    };
    Some(answer)
}

/// A response frame: size, header, body. `None` when it does not encode (logged).
fn encode(correlation: i32, api: ApiKey, version: i16, body: &impl Encodable) -> Option<Bytes> {
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
