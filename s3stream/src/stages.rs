//! The stages an append passes through in the engine, timed one by one so that the latency of an
//! append under load can be taken apart (docs/append-stages.md).
//!
//! An append is admitted under the node's budget of uncompacted bytes ([`AppendStage::Admission`]),
//! waits in the WAL's open group until a PUT slot takes it ([`AppendStage::WalQueue`]), rides its
//! group's PUT ([`AppendStage::Put`]), waits for the earlier groups holding records of its stream
//! to finish so that a stream's acknowledgements stay in its submission order
//! ([`AppendStage::Ordering`]), and is finally picked up
//! by the task that awaits it ([`AppendStage::Wake`]). The engine reports each stage of each
//! append to the [`StageObserver`] its builder was given, if any; what lies before admission
//! (receiving and parsing a request) and after the wake (answering it) is the front end's.

use std::time::Duration;

/// One stage of an append in the engine, in the order an append passes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AppendStage {
    /// Waiting for room under the budget of uncompacted bytes (back-pressure); zero when there
    /// was room at once.
    Admission,
    /// From the submission to the WAL until its group's PUT starts: waiting for a PUT slot (or
    /// for WAL object ids) while the group forms.
    WalQueue,
    /// Encoding the group's WAL object and its PUT, retries included.
    Put,
    /// From the end of the group's PUT until its acknowledgement is released, which waits for
    /// the earlier groups holding records of the same stream.
    Ordering,
    /// From the release of the acknowledgement until the task awaiting the append runs again.
    Wake,
}

impl AppendStage {
    /// Every stage, in the order an append passes them.
    pub const ALL: [AppendStage; 5] = [
        AppendStage::Admission,
        AppendStage::WalQueue,
        AppendStage::Put,
        AppendStage::Ordering,
        AppendStage::Wake,
    ];

    /// The stage's name in metrics and reports.
    pub fn name(self) -> &'static str {
        match self {
            AppendStage::Admission => "admission",
            AppendStage::WalQueue => "wal_queue",
            AppendStage::Put => "put",
            AppendStage::Ordering => "ordering",
            AppendStage::Wake => "wake",
        }
    }
}

/// Receives the time each append spent in each stage. Called on the append path (never under
/// the WAL's lock): it must be quick and must not call back into the engine.
pub trait StageObserver: Send + Sync + std::fmt::Debug + 'static {
    /// `count` appends each spent `elapsed` in `stage`. The WAL reports [`AppendStage::Put`] and
    /// [`AppendStage::Ordering`] once per group, with the group's appends as `count`.
    fn observe(&self, stage: AppendStage, elapsed: Duration, count: usize);
}

const _: fn(&dyn StageObserver) = |_| {};
