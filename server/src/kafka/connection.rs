//! One Kafka connection: frames read by their own task, requests handled as they arrive,
//! answers written strictly in request order (docs/kafka.md, "Framing and decoding",
//! "Pipelining").

use bytes::BytesMut;
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::dispatch::{Answer, Dispatched, Frame, dispatch};
use super::state::Kafka;

/// Serves one connection until the client closes it, sends what cannot be served, idles out or
/// the node shuts down.
pub(crate) async fn serve<S>(mut kafka: Kafka, stream: S)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (read, mut write) = tokio::io::split(stream);
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
                match dispatch(&mut kafka, frame, &mut last_produce) {
                    Dispatched::Answer(answer) => pending.push_back(answer),
                    Dispatched::AnswerThenClose(answer) => {
                        pending.push_back(answer);
                        break;
                    }
                    Dispatched::Close => break,
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
async fn read_frames<R>(kafka: Kafka, mut read: R, frames: mpsc::Sender<Frame>)
where
    R: AsyncRead + Unpin,
{
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
        let frame = Frame::new(body.freeze(), held);
        if frames.send(frame).await.is_err() {
            return;
        }
    }
}
