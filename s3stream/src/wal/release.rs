//! Which acknowledgements may go: the dispatched groups in id order, each with its records'
//! acknowledgements and, once its upload finished, the outcome. A record is acknowledged once its
//! group's PUT has succeeded and no earlier group still holds an unacknowledged record of the
//! same stream, so a stream's acknowledgements keep its submission order and a slow PUT holds
//! back only the streams it carries (docs/wal-stream-release.md).

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use super::WalError;
use crate::format::wal::WalSpan;

/// Called once per submitted record with its outcome; a stream's records in submission order.
pub type Ack = Box<dyn FnOnce(Result<(), WalError>) + Send>;

/// A WAL object whose appends were acknowledged: what the compactor needs to commit it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenObject {
    /// Its id.
    pub id: u64,
    /// Its key in the WAL store.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// The runs of batches it holds, by stream then epoch then offset.
    pub spans: Vec<WalSpan>,
}

/// When a group's PUT started and ended (for the `put` and `ordering` append stages).
#[derive(Clone, Copy)]
pub(super) struct PutTimes {
    pub(super) started: Instant,
    pub(super) ended: Instant,
}

/// A dispatched group: its acknowledgements not yet called, and its upload's outcome once known.
struct Dispatched {
    id: u64,
    /// The acknowledgements not yet called, each with its record's stream, in submission order.
    acks: Vec<(u64, Ack)>,
    done: Option<(Result<WrittenObject, WalError>, PutTimes)>,
}

/// What one pass of [`Awaiting::release`] did.
pub(super) struct Released {
    /// For each group that called acknowledgements: its PUT times, when, and how many.
    pub(super) groups: Vec<(PutTimes, Instant, usize)>,
    /// Acknowledgements called with success.
    pub(super) acked: u64,
    /// The objects of the wholly acknowledged groups that left the head, oldest first.
    pub(super) written: Vec<WrittenObject>,
    /// Whether any group left the head (the durable point moved).
    pub(super) moved: bool,
}

/// The dispatched groups not yet wholly acknowledged, by WAL object id (increasing).
#[derive(Default)]
pub(super) struct Awaiting {
    groups: VecDeque<Dispatched>,
}

impl Awaiting {
    /// A group dispatched as WAL object `id`, its acknowledgements with their records' streams.
    pub(super) fn push(&mut self, id: u64, acks: Vec<(u64, Ack)>) {
        self.groups.push_back(Dispatched {
            id,
            acks,
            done: None,
        });
    }

    /// The upload of object `id` finished.
    pub(super) fn finish(
        &mut self,
        id: u64,
        outcome: Result<WrittenObject, WalError>,
        times: PutTimes,
    ) {
        if let Ok(at) = self.groups.binary_search_by_key(&id, |g| g.id) {
            self.groups[at].done = Some((outcome, times));
        }
    }

    /// The id of the first group not wholly acknowledged: below it every object is durable and
    /// all its records acknowledged.
    pub(super) fn first(&self) -> Option<u64> {
        self.groups.front().map(|g| g.id)
    }

    /// The error of a finished upload that failed, if any.
    pub(super) fn failure(&self) -> Option<WalError> {
        self.groups.iter().find_map(|g| match &g.done {
            Some((Err(error), _)) => Some(error.clone()),
            _ => None,
        })
    }

    /// Calls the acknowledgements that may go: of groups whose PUT succeeded, each record whose
    /// stream has no unacknowledged record in an earlier group; once the writer has `failed`,
    /// every acknowledgement of a finished group, as a failure. Then forgets the wholly
    /// acknowledged groups at the head, in order. Group times are gathered when `timed`.
    pub(super) fn release(&mut self, failed: Option<&Arc<WalError>>, timed: bool) -> Released {
        let now = Instant::now();
        let mut released = Released {
            groups: Vec::new(),
            acked: 0,
            written: Vec::new(),
            moved: false,
        };
        // Streams with a record not yet acknowledged in an earlier group.
        let mut held: HashSet<u64> = HashSet::new();
        for group in &mut self.groups {
            let Some((outcome, times)) = &group.done else {
                held.extend(group.acks.iter().map(|(stream, _)| *stream));
                continue;
            };
            let before = group.acks.len();
            match (outcome, failed) {
                (Err(error), _) => {
                    for (_, ack) in group.acks.drain(..) {
                        ack(Err(error.clone()));
                    }
                }
                (Ok(_), Some(cause)) => {
                    for (_, ack) in group.acks.drain(..) {
                        ack(Err(WalError::Failed {
                            cause: cause.clone(),
                        }));
                    }
                }
                (Ok(_), None) => {
                    let mut waiting = Vec::new();
                    for (stream, ack) in group.acks.drain(..) {
                        if held.contains(&stream) {
                            waiting.push((stream, ack));
                        } else {
                            ack(Ok(()));
                            released.acked += 1;
                        }
                    }
                    held.extend(waiting.iter().map(|(stream, _)| *stream));
                    group.acks = waiting;
                }
            }
            let count = before - group.acks.len();
            if timed && count > 0 {
                released.groups.push((*times, now, count));
            }
        }
        while self
            .groups
            .front()
            .is_some_and(|g| g.done.is_some() && g.acks.is_empty())
        {
            released.moved = true;
            if let Some(Dispatched {
                done: Some((Ok(written), _)),
                ..
            }) = self.groups.pop_front()
            {
                released.written.push(written);
            }
        }
        released
    }
}
