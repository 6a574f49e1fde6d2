//! Acknowledgements: where the append that created a window entry stands (pending, durable,
//! failed), so a retry of an in-flight batch can wait for the first attempt, and [`Resolve`], which
//! settles one from the stream's durable outcome even if the appending request is cancelled.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use mink_s3stream::PendingAppend;
use mink_s3stream::error::StreamError;
use tokio::sync::Notify;

/// Where an append stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AckState {
    /// Submitted, not yet durable.
    Pending,
    /// Durable.
    Durable,
    /// Failed: not in the log.
    Failed,
}

/// The acknowledgement of one append request, shared by the window entries it created.
pub(crate) type Ack = Arc<AckCell>;

/// Where one append request stands, and a way to wait until it is settled. Cheap to create, to
/// settle and to drop when nobody waits (the common case: a retry of an in-flight batch is rare).
#[derive(Debug)]
pub(crate) struct AckCell {
    state: AtomicU8,
    settled: Notify,
}

impl AckCell {
    /// A new, pending acknowledgement.
    pub(crate) fn pending() -> Ack {
        Arc::new(AckCell {
            state: AtomicU8::new(AckState::Pending as u8),
            settled: Notify::new(),
        })
    }

    /// The state now.
    pub(crate) fn state(&self) -> AckState {
        match self.state.load(Ordering::Acquire) {
            s if s == AckState::Durable as u8 => AckState::Durable,
            s if s == AckState::Failed as u8 => AckState::Failed,
            _ => AckState::Pending,
        }
    }

    /// Records the outcome and wakes every waiter.
    pub(crate) fn settle(&self, state: AckState) {
        self.state.store(state as u8, Ordering::Release);
        self.settled.notify_waiters();
    }

    /// Waits until the outcome is known.
    pub(crate) async fn wait_settled(&self) {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            // Registered before the state is read, so a settle in between is not missed.
            notified.as_mut().enable();
            if self.state() != AckState::Pending {
                return;
            }
            notified.await;
        }
    }
}

/// Resolves an idempotent append's acknowledgement even if the appending request is cancelled:
/// dropped before the outcome is known, it hands the wait to a task.
pub(crate) struct Resolve {
    durable: Option<PendingAppend>,
    ack: Ack,
}

fn settle(ack: &Ack, outcome: &Result<u64, StreamError>) {
    ack.settle(if outcome.is_ok() {
        AckState::Durable
    } else {
        AckState::Failed
    });
}

impl Resolve {
    /// Settles `ack` with the outcome of `durable`.
    pub(crate) fn new(durable: PendingAppend, ack: Ack) -> Resolve {
        Resolve {
            durable: Some(durable),
            ack,
        }
    }

    /// Waits for the append to be durable (or to fail) and settles the acknowledgement.
    pub(crate) async fn wait(mut self) -> Result<u64, StreamError> {
        let Some(durable) = self.durable.as_mut() else {
            return Err(StreamError::ShutDown);
        };
        let outcome = durable.await;
        self.durable = None;
        settle(&self.ack, &outcome);
        outcome
    }
}

impl Drop for Resolve {
    fn drop(&mut self) {
        let Some(durable) = self.durable.take() else {
            return;
        };
        let ack = self.ack.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    let outcome = durable.await;
                    settle(&ack, &outcome);
                });
            }
            // No runtime to finish the wait: forget the entry rather than keep it pending forever.
            Err(_) => {
                ack.settle(AckState::Failed);
            }
        }
    }
}
