//! The sequential-read states of a stream's readers of committed objects, one per run of reads.
//!
//! Readahead ([`ReadaheadState`]) follows one reader: a read that does not continue where the
//! state's last read ended looks random and closes the window. Several readers of one stream (two
//! consumers at different offsets, a catch-up reader beside a replay) would break each other's runs
//! if they shared one state, so each run is kept under the offset its last read ended at, which is
//! where the reader's next read starts, or, for a reader whose answer ended inside the last batch
//! it read (a response cut at a row), inside that batch. A read that starts anywhere else begins a
//! run of its own. At most [`MAX_RUNS`] are kept per stream; the one used least recently goes first.

use mink_cache::ReadaheadState;

/// Runs kept per stream.
pub(crate) const MAX_RUNS: usize = 8;

/// One run: the offsets of its last read's last batch (`last_base..end`) and its state.
#[derive(Debug)]
struct Run {
    last_base: u64,
    end: u64,
    state: ReadaheadState,
}

/// A stream's read runs, least recently used first.
#[derive(Debug, Default)]
pub(crate) struct ReadRuns {
    runs: Vec<Run>,
}

impl ReadRuns {
    /// The state of the run whose last read ended at `from`, else of one whose last read's last
    /// batch holds `from`, taken out while its read runs; a new state when there is none.
    pub(crate) fn take(&mut self, from: u64) -> ReadaheadState {
        let at = self
            .runs
            .iter()
            .rposition(|run| run.end == from)
            .or_else(|| {
                self.runs
                    .iter()
                    .rposition(|run| run.last_base <= from && from < run.end)
            });
        match at {
            Some(at) => self.runs.remove(at).state,
            None => ReadaheadState::new(),
        }
    }

    /// Keeps `state`, whose last read's last batch was `last_base..end` (`end..end` for a read
    /// that found nothing), as the most recently used run. It replaces a run that ended at the
    /// same offset (two readers reading the same range).
    pub(crate) fn put(&mut self, last_base: u64, end: u64, state: ReadaheadState) {
        self.runs.retain(|run| run.end != end);
        if self.runs.len() == MAX_RUNS {
            self.runs.remove(0);
        }
        self.runs.push(Run {
            last_base: last_base.min(end),
            end,
            state,
        });
    }

    /// How many runs are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.runs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state told apart from others by its object limit (what a test can set from outside).
    fn marked(object_id: u64) -> ReadaheadState {
        let mut state = ReadaheadState::new();
        state.limit_object(object_id, 1);
        state
    }

    fn same(a: &ReadaheadState, b: &ReadaheadState) -> bool {
        format!("{a:?}") == format!("{b:?}")
    }

    #[test]
    fn a_run_is_found_where_its_last_read_ended_and_only_there() {
        let mut runs = ReadRuns::default();
        runs.put(90, 100, marked(1));
        runs.put(490, 500, marked(2));
        // Another offset starts a new run and leaves both in place.
        assert!(same(&runs.take(300), &ReadaheadState::new()));
        assert!(same(&runs.take(89), &ReadaheadState::new()));
        assert_eq!(runs.len(), 2);
        assert!(same(&runs.take(100), &marked(1)));
        assert_eq!(runs.len(), 1, "the run is out while its read runs");
        assert!(same(&runs.take(100), &ReadaheadState::new()));
        assert!(same(&runs.take(500), &marked(2)));
        assert_eq!(runs.len(), 0);
    }

    #[test]
    fn a_reader_resuming_inside_its_last_batch_keeps_its_run() {
        let mut runs = ReadRuns::default();
        runs.put(90, 100, marked(1));
        runs.put(100, 110, marked(2));
        // An answer cut at offset 97, inside the batch 90..100: the next read starts there.
        assert!(same(&runs.take(97), &marked(1)));
        // A run ending where the read starts comes before one whose last batch holds it.
        runs.put(90, 100, marked(1));
        assert!(same(&runs.take(100), &marked(1)));
        assert!(same(&runs.take(100), &marked(2)), "100 is inside 100..110");
        assert!(same(&runs.take(100), &ReadaheadState::new()));
    }

    #[test]
    fn the_least_recently_used_run_goes_first_and_one_end_holds_one_run() {
        let mut runs = ReadRuns::default();
        for end in 0..MAX_RUNS as u64 {
            runs.put(end, end, marked(end));
        }
        // Using run 0 again makes run 1 the oldest.
        let state = runs.take(0);
        runs.put(0, 0, state);
        runs.put(100, 100, marked(100));
        assert_eq!(runs.len(), MAX_RUNS);
        assert!(
            same(&runs.take(1), &ReadaheadState::new()),
            "run 1 was dropped"
        );
        assert!(same(&runs.take(0), &marked(0)));
        assert!(same(&runs.take(2), &marked(2)));
        runs.put(100, 100, marked(7));
        assert!(
            same(&runs.take(100), &marked(7)),
            "one run per end: the later one"
        );
        assert!(same(&runs.take(100), &ReadaheadState::new()));
    }
}
