//! [`TailWatch`]: a lasting wait at the tail of one log, for a reader that parks there again and
//! again (an SSE stream).
//!
//! [`BucketLog::wait_past`](super::BucketLog::wait_past) takes what it waits on afresh at each
//! call: a receiver of the high watermark, a registration with the log's closing and a timer. A
//! stream woken at every append of a busy log paid for all three at every event. A `TailWatch`
//! takes the receiver and the closing once, when the stream starts, and waits on them each time
//! without a timeout. A [`TailPark`] adds what every lasting reader (the SSE streams, a live
//! Flight DoGet) waits on beside it: the node's shutdown and one heartbeat timer, also taken once.

use std::pin::Pin;
use std::time::Instant;

use tokio::sync::watch;
use tokio::time::Sleep;
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

/// Why [`TailPark::park`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    /// The high watermark passed the offset: this is the high watermark.
    Past(u64),
    /// The log was closed or destroyed.
    Closed,
    /// The time given came first (a heartbeat is due).
    Due,
    /// The node is shutting down.
    Shutdown,
}

/// A reader's lasting park at the tail of one log: the log's [`TailWatch`], the node's shutdown
/// and one timer, taken once when the reader starts.
///
/// The timer is not set at each park: when it fires before this park's time (it was set at an
/// earlier park), it is set to this park's time and the wait goes on, so a reader woken at every
/// append of a busy log touches no timer.
pub struct TailPark {
    tail: TailWatch,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    timer: Pin<Box<Sleep>>,
}

impl TailPark {
    /// A park at `tail` that ends at `shutdown`, its timer first set to `first_due`.
    pub fn new(tail: TailWatch, shutdown: &CancellationToken, first_due: Instant) -> Self {
        TailPark {
            tail,
            shutdown: Box::pin(shutdown.clone().cancelled_owned()),
            timer: Box::pin(tokio::time::sleep_until(first_due.into())),
        }
    }

    /// The high watermark now.
    pub fn high_watermark(&self) -> u64 {
        self.tail.high_watermark()
    }

    /// Waits until the high watermark passes `offset`, the log closes, `due` comes or the node
    /// shuts down (the first of them, in that order when several are ready).
    pub async fn park(&mut self, offset: u64, due: Instant) -> Woken {
        // On the runtime's clock, which is the system's but for tests that pause it.
        let due = tokio::time::Instant::from_std(due);
        if self.timer.is_elapsed() {
            self.timer.as_mut().reset(due);
        }
        loop {
            tokio::select! {
                biased;
                tail = self.tail.wait_past(offset) => return match tail {
                    Tail::Past(high_watermark) => Woken::Past(high_watermark),
                    Tail::Closed => Woken::Closed,
                },
                () = self.shutdown.as_mut() => return Woken::Shutdown,
                () = self.timer.as_mut() => {
                    if tokio::time::Instant::now() >= due {
                        return Woken::Due;
                    }
                    self.timer.as_mut().reset(due);
                }
            }
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

    #[tokio::test(start_paused = true)]
    async fn a_park_returns_at_its_own_time_though_its_timer_was_set_earlier() {
        let (hw, rx) = watch::channel(5u64);
        let shutdown = CancellationToken::new();
        let now = || tokio::time::Instant::now().into_std();
        let start = now();
        let beat = Duration::from_secs(10);
        let mut park = TailPark::new(
            TailWatch::new(rx, CancellationToken::new()),
            &shutdown,
            start + beat,
        );
        // Woken by an append after 4 s, then parked again: due 10 s after that park.
        let moving = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            hw.send_replace(6);
            hw
        });
        assert_eq!(park.park(5, start + beat).await, Woken::Past(6));
        let _hw = moving.await.unwrap();
        let parked = now();
        assert_eq!(park.park(6, parked + beat).await, Woken::Due);
        assert_eq!(now() - parked, beat, "not at the first timer's 10 s");
        assert_eq!(park.high_watermark(), 6);
        shutdown.cancel();
        assert_eq!(park.park(6, now() + beat).await, Woken::Shutdown);
    }
}
