//! [`TailWatch`]: a lasting wait at the tail of one log, for a reader that parks there again and
//! again (an SSE stream).
//!
//! [`BucketLog::wait_past`](super::BucketLog::wait_past) takes what it waits on afresh at each
//! call: a receiver of the high watermark, a registration with the log's closing and a timer. A
//! stream woken at every append of a busy log paid for all three at every event. A `TailWatch`
//! takes the receiver and the closing once, when the stream starts, and waits on them each time
//! without a timeout: the stream keeps its own timer for heartbeats.

use std::pin::Pin;

use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Why [`TailWatch::wait_past`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// The high watermark passed the offset: this is the high watermark.
    Past(u64),
    /// The log was closed or destroyed: nothing more comes here.
    Closed,
}

/// A reader's lasting wait at the tail of one log.
pub struct TailWatch {
    high_watermark: watch::Receiver<u64>,
    closing: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl TailWatch {
    /// A watch of `high_watermark` that ends when `closed` is cancelled or the watermark's sender
    /// is dropped (the log is gone).
    pub fn new(high_watermark: watch::Receiver<u64>, closed: CancellationToken) -> Self {
        TailWatch {
            high_watermark,
            closing: Box::pin(closed.cancelled_owned()),
        }
    }

    /// The high watermark now.
    pub fn high_watermark(&self) -> u64 {
        *self.high_watermark.borrow()
    }

    /// Waits until the high watermark passes `offset`, or the log closes.
    pub async fn wait_past(&mut self, offset: u64) -> Tail {
        tokio::select! {
            biased;
            passed = self.high_watermark.wait_for(|hw| *hw > offset) => match passed {
                Ok(hw) => Tail::Past(*hw),
                Err(_) => Tail::Closed,
            },
            () = self.closing.as_mut() => Tail::Closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn it_returns_past_the_offset_and_again_after_each_move() {
        let (hw, rx) = watch::channel(5u64);
        let mut tail = TailWatch::new(rx, CancellationToken::new());
        assert_eq!(tail.wait_past(4).await, Tail::Past(5));
        let waiting = tokio::spawn(async move {
            let first = tail.wait_past(5).await;
            let second = tail.wait_past(7).await;
            (first, second)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        hw.send_replace(7);
        tokio::time::sleep(Duration::from_millis(20)).await;
        hw.send_replace(9);
        let (first, second) = waiting.await.unwrap();
        assert!(matches!(first, Tail::Past(7 | 9)), "{first:?}");
        assert_eq!(second, Tail::Past(9));
    }

    #[tokio::test]
    async fn it_ends_when_the_log_closes_or_is_gone() {
        let (hw, rx) = watch::channel(5u64);
        let closed = CancellationToken::new();
        let mut tail = TailWatch::new(rx.clone(), closed.clone());
        let waiting = tokio::spawn(async move { tail.wait_past(5).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        closed.cancel();
        assert_eq!(waiting.await.unwrap(), Tail::Closed);
        let mut gone = TailWatch::new(rx, CancellationToken::new());
        drop(hw);
        assert_eq!(gone.wait_past(5).await, Tail::Closed);
    }
}
