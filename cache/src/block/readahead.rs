//! Readahead: per-reader detection of sequential access and a window that grows while the reader keeps
//! having to wait for loads.
//!
//! A caller keeps one [`ReadaheadState`] per reader and stream and passes it to
//! [`crate::BlockCache::read_sequential`]. A read is sequential when it continues where the previous
//! read of the same object ended (or overlaps its end and goes further), or when it opens a new object
//! after the previous read reached the end of the reader's extent in the previous object. The first
//! sequential read opens a window of `start_bytes`; each later sequential read that still had to wait
//! for a load grows it by `growth_bytes`, up to `max_bytes`. Any other read is random: the window closes
//! and no readahead is issued. Readahead is issued again when less than half a window remains loaded
//! (or loading) ahead of the reader.

use std::ops::Range;

use crate::settings::ReadaheadSettings;

/// Where a reader was and how far ahead of it readahead was issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    object_id: u64,
    start: u64,
    end: u64,
    /// End of the reader's extent in this object (object size, or the caller's limit).
    extent_end: u64,
}

/// Sequential-access state of one reader of one stream. Create with [`ReadaheadState::new`]; keep it
/// across the reader's reads.
#[derive(Debug, Clone, Default)]
pub struct ReadaheadState {
    last: Option<Position>,
    window: u64,
    /// `(object_id, end)`: readahead has been issued up to `end` of this object.
    issued: Option<(u64, u64)>,
    /// `(object_id, end)`: readahead in this object stops at `end` (set by the caller for objects shared
    /// by several streams).
    limit: Option<(u64, u64)>,
}

impl ReadaheadState {
    /// A reader that has not read anything yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current window in bytes; 0 while the reader is not (yet) sequential.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Stops readahead in object `object_id` at byte `end`: the end of this stream's data in an object
    /// shared with other streams. Applies until a limit for another object is set.
    pub fn limit_object(&mut self, object_id: u64, end: u64) {
        self.limit = Some((object_id, end));
    }

    /// End of the reader's extent in object `object_id`: the caller's limit, else the object's end.
    fn extent_end(&self, object_id: u64, object_size: u64) -> u64 {
        match self.limit {
            Some((id, end)) if id == object_id => end.min(object_size),
            _ => object_size,
        }
    }

    /// A reader with no run yet asked for `range` of `object_id` as a whole, and it is being
    /// loaded: its run starts at `range.start` as if a read had ended there, with readahead issued
    /// to `range.end` and a window as large as the range (at most `max_bytes`), so its first read
    /// counts as sequential and its readahead, once the reader comes within half a window of the
    /// range's end, goes on from there. A range shorter than `start_bytes` starts no run.
    pub(crate) fn expect(
        &mut self,
        settings: &ReadaheadSettings,
        object_id: u64,
        object_size: u64,
        range: &Range<u64>,
    ) {
        let len = range.end.saturating_sub(range.start);
        if len < settings.start_bytes.max(1) {
            return;
        }
        let extent_end = self.extent_end(object_id, object_size);
        self.last = Some(Position {
            object_id,
            start: range.start,
            end: range.start,
            extent_end,
        });
        self.window = len.min(settings.max_bytes);
        self.issued = Some((object_id, range.end));
    }

    /// Records a read and returns the byte range to read ahead, if any.
    ///
    /// `waited` says whether the read had to wait for a load (a miss or a load in flight).
    pub(crate) fn advance(
        &mut self,
        settings: &ReadaheadSettings,
        object_id: u64,
        object_size: u64,
        range: &Range<u64>,
        waited: bool,
    ) -> Option<Range<u64>> {
        let extent_end = self.extent_end(object_id, object_size);
        // A reader that reads again what it just read (a caller resuming inside the last range)
        // neither advances nor breaks its sequential run.
        if let Some(last) = self.last
            && last.object_id == object_id
            && range.start >= last.start
            && range.end <= last.end
        {
            return None;
        }
        let sequential = match self.last {
            Some(last) if last.object_id == object_id => {
                range.start >= last.start && range.start <= last.end && range.end > last.end
            }
            Some(last) => last.end >= last.extent_end,
            None => false,
        };
        self.last = Some(Position {
            object_id,
            start: range.start,
            end: range.end,
            extent_end,
        });
        if !sequential {
            self.window = 0;
            self.issued = None;
            return None;
        }
        self.window = if self.window == 0 {
            settings.start_bytes
        } else if waited {
            // Double (at least `growth_bytes` more) while the reader still waits, so a replay
            // reaches the full window after a handful of loads, not dozens.
            self.window
                .saturating_add(self.window.max(settings.growth_bytes))
                .min(settings.max_bytes)
        } else {
            self.window
        };
        let issued_end = match self.issued {
            Some((id, end)) if id == object_id && end > range.end => end,
            _ => range.end,
        };
        if issued_end - range.end >= self.window / 2 {
            return None;
        }
        let target = range.end.saturating_add(self.window).min(extent_end);
        if target <= issued_end {
            return None;
        }
        self.issued = Some((object_id, target));
        Some(issued_end..target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    #[test]
    fn rereading_the_last_range_keeps_the_window() {
        let settings = ReadaheadSettings::default();
        let mut state = ReadaheadState::new();
        let size = 64 * 1024 * KIB;
        let step = 1024 * KIB;
        for i in 0..4 {
            state.advance(&settings, 1, size, &(i * step..(i + 1) * step), true);
        }
        let window = state.window();
        assert!(window > settings.start_bytes);
        assert_eq!(
            state.advance(&settings, 1, size, &(3 * step + 10..4 * step), false),
            None
        );
        assert_eq!(state.window(), window, "a re-read keeps the window");
        assert!(
            state
                .advance(&settings, 1, size, &(4 * step..5 * step), true)
                .is_some()
        );
        assert!(state.window() >= window);
    }

    fn settings() -> ReadaheadSettings {
        ReadaheadSettings {
            start_bytes: 64 * KIB,
            growth_bytes: 64 * KIB,
            max_bytes: 256 * KIB,
            max_inflight_percent: 25,
        }
    }

    #[test]
    fn window_opens_on_the_second_contiguous_read_and_grows_only_when_the_reader_waited() {
        let s = settings();
        let mut state = ReadaheadState::new();
        let size = 10 * 1024 * KIB;
        assert_eq!(state.advance(&s, 1, size, &(0..16 * KIB), true), None);
        assert_eq!(state.window(), 0);
        assert_eq!(
            state.advance(&s, 1, size, &(16 * KIB..32 * KIB), true),
            Some(32 * KIB..96 * KIB)
        );
        assert_eq!(state.window(), 64 * KIB);
        // Served from cache: the window stays, and enough is already issued ahead.
        assert_eq!(
            state.advance(&s, 1, size, &(32 * KIB..48 * KIB), false),
            None
        );
        assert_eq!(state.window(), 64 * KIB);
        // Waited: the window grows and readahead continues from where it stopped.
        assert_eq!(
            state.advance(&s, 1, size, &(48 * KIB..80 * KIB), true),
            Some(96 * KIB..208 * KIB)
        );
        assert_eq!(state.window(), 128 * KIB);
        for i in 0..10 {
            let start = 80 * KIB + i * 16 * KIB;
            state.advance(&s, 1, size, &(start..start + 16 * KIB), true);
        }
        assert_eq!(state.window(), 256 * KIB, "the window is capped");
    }

    #[test]
    fn a_range_asked_for_as_a_whole_starts_a_run_with_a_window_its_size() {
        let s = settings();
        let size = 10 * 1024 * KIB;
        let mut state = ReadaheadState::new();
        state.expect(&s, 1, size, &(0..192 * KIB));
        assert_eq!(state.window(), 192 * KIB);
        // The first read is sequential; nothing more is issued while the range ahead of it holds
        // half a window.
        assert_eq!(state.advance(&s, 1, size, &(0..16 * KIB), true), None);
        assert_eq!(
            state.window(),
            256 * KIB,
            "it waited: the window grows, capped"
        );
        assert_eq!(
            state.advance(&s, 1, size, &(16 * KIB..64 * KIB), false),
            None,
            "the range still holds half a window ahead"
        );
        assert_eq!(
            state.advance(&s, 1, size, &(64 * KIB..80 * KIB), false),
            Some(192 * KIB..336 * KIB),
            "readahead goes on from the range's end"
        );
        // Larger than `max_bytes`: the window is capped.
        let mut state = ReadaheadState::new();
        state.expect(&s, 1, size, &(0..1024 * KIB));
        assert_eq!(state.window(), 256 * KIB);
        // Shorter than `start_bytes` (one block of a lookup): no run.
        let mut state = ReadaheadState::new();
        state.expect(&s, 1, size, &(0..16 * KIB));
        assert_eq!(state.window(), 0);
        assert_eq!(state.advance(&s, 1, size, &(0..16 * KIB), true), None);
        assert_eq!(state.window(), 0);
    }

    #[test]
    fn random_reads_never_open_a_window() {
        let s = settings();
        let mut state = ReadaheadState::new();
        let size = 10 * 1024 * KIB;
        for start in [
            5 * 1024 * KIB,
            0,
            3 * 1024 * KIB,
            3 * 1024 * KIB - 8 * KIB,
            9 * 1024 * KIB,
        ] {
            assert_eq!(
                state.advance(&s, 1, size, &(start..start + 8 * KIB), true),
                None
            );
            assert_eq!(state.window(), 0);
        }
        // A jump into the middle of another object is random too.
        assert_eq!(state.advance(&s, 2, size, &(4096..8192), true), None);
    }

    #[test]
    fn readahead_stops_at_the_object_end_or_the_callers_limit_and_continues_in_the_next_object() {
        let s = settings();
        let mut state = ReadaheadState::new();
        state.limit_object(1, 100 * KIB);
        state.advance(&s, 1, 1024 * KIB, &(0..40 * KIB), true);
        assert_eq!(
            state.advance(&s, 1, 1024 * KIB, &(40 * KIB..60 * KIB), true),
            Some(60 * KIB..100 * KIB)
        );
        state.advance(&s, 1, 1024 * KIB, &(60 * KIB..100 * KIB), true);
        // The reader finished its extent in object 1 and moves to object 2: still sequential.
        let next = state.advance(&s, 2, 1024 * KIB, &(0..10 * KIB), true);
        assert_eq!(next, Some(10 * KIB..10 * KIB + state.window()));
    }
}
