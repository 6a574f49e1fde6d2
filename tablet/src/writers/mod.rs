//! Idempotent-writer windows: the last five batches of every writer, the sequence rules, and the
//! snapshot format the windows are saved in.
//!
//! # Rules (spec, "Idempotent writers")
//!
//! | Case | Result |
//! |---|---|
//! | sequence is last + 1, or wraps from `i32::MAX` to 0 | appended |
//! | sequence matches one of the retained five | duplicate: the first offsets are returned |
//! | otherwise | rejected, the error names the expected sequence |
//! | writer unknown, or idle (newest batch older than the TTL) | any sequence accepted, window restarts |
//! | epoch older than the window's | rejected: a fenced incarnation (`StaleWriterEpoch`) |
//! | epoch newer than the window's | the window restarts; its first sequence must be 0 |
//! | writer unknown while `max_writers` writers have a window | refused (`TooManyWriters`), unless idle writers can be forgotten to make room |
//!
//! The writer field of a batch header carries the allocated id (bits 0-47) and the writer epoch
//! (bits 48-62); a window belongs to the id and holds its current epoch. A batch with attribute bit
//! 1 counts records: "last + 1" is then "last + its record count", modulo 2^31, and a duplicate
//! must also have the same record count (docs/writer-identity.md).
//!
//! Entries are added when a batch is *submitted* (in submission order, under the tablet's sequencing
//! lock), each with the acknowledgement of its append. An entry whose append failed is dropped, with
//! every later entry of the same writer (the WAL acknowledges in order, so those failed too), the next
//! time the writer is looked at; a snapshot only holds entries below the high watermark.
//!
//! The windows and their rules are in `window.rs`, the acknowledgements their entries carry in
//! `ack.rs`, the public view ([`WriterState`]) in `state.rs`, and the snapshot format in
//! [`snapshot`].

mod ack;
pub mod snapshot;
mod state;
mod window;

pub(crate) use ack::{Ack, AckCell, AckState, Resolve};
pub use state::{WriterBatch, WriterState};
pub(crate) use window::{Batches, Claim, Entry, Refusal, Verdict, Windows};
pub use window::{WINDOW, add_sequence, next_sequence};
