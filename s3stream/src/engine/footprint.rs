//! What a stream keeps on the store from its start offset: its ranges of committed objects and
//! the batches not yet compacted, with their sizes. Retention reads it to know how many bytes a
//! log holds and where it may be trimmed so that what remains fits a limit.

/// One piece of what a stream keeps, in offset order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredPiece {
    /// First offset held.
    pub start_offset: u64,
    /// One past the last offset held.
    pub end_offset: u64,
    /// Bytes it takes on the store.
    pub bytes: u64,
    /// A range of a committed object (else: batches not yet compacted, in the log cache and in
    /// WAL objects).
    pub committed: bool,
}

/// What a stream keeps from its start offset, at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footprint {
    /// The start offset.
    pub start: u64,
    /// The confirm offset: everything below is durable.
    pub confirm: u64,
    /// The pieces, oldest first, not overlapping. The first may begin below `start` (an object
    /// range only partly trimmed is kept whole until all of it is below the start).
    pub pieces: Vec<StoredPiece>,
}

impl Footprint {
    /// The bytes kept.
    pub fn bytes(&self) -> u64 {
        self.pieces.iter().map(|p| p.bytes).sum()
    }

    /// The lowest offset, at a piece boundary, from which what is kept takes at most `limit`
    /// bytes; `None` when it already fits. Never past the confirm offset, so when the newest
    /// piece alone is over the limit it stays (the answer is its start).
    pub fn trim_point_for_bytes(&self, limit: u64) -> Option<u64> {
        let mut kept = self.bytes();
        if kept <= limit {
            return None;
        }
        let mut point = None;
        for (i, piece) in self.pieces.iter().enumerate() {
            let Some(next) = self.pieces.get(i + 1) else {
                break;
            };
            if next.start_offset > self.confirm {
                break;
            }
            kept -= piece.bytes;
            point = Some(next.start_offset);
            if kept <= limit {
                break;
            }
        }
        point.filter(|p| *p > self.start)
    }
}

/// The pieces from the committed ranges (sorted, possibly overlapping while an object is being
/// replaced) and the uncompacted tail.
pub(crate) fn pieces(
    committed: impl IntoIterator<Item = (u64, u64, u64)>,
    tail: Option<(u64, u64, u64)>,
) -> Vec<StoredPiece> {
    let mut out: Vec<StoredPiece> = Vec::new();
    let mut covered = 0u64;
    for (start_offset, end_offset, bytes) in committed {
        if !out.is_empty() && end_offset <= covered {
            continue;
        }
        covered = covered.max(end_offset);
        out.push(StoredPiece {
            start_offset,
            end_offset,
            bytes,
            committed: true,
        });
    }
    if let Some((start_offset, end_offset, bytes)) = tail
        && end_offset > start_offset
    {
        out.push(StoredPiece {
            start_offset: start_offset.max(covered),
            end_offset,
            bytes,
            committed: false,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn footprint(start: u64, confirm: u64, ranges: &[(u64, u64, u64)]) -> Footprint {
        Footprint {
            start,
            confirm,
            pieces: pieces(ranges.iter().copied(), None),
        }
    }

    #[test]
    fn bytes_sum_every_piece_with_the_tail() {
        let f = Footprint {
            start: 0,
            confirm: 30,
            pieces: pieces([(0, 10, 100), (10, 20, 50)], Some((20, 30, 7))),
        };
        assert_eq!(f.bytes(), 157);
        assert_eq!(f.pieces.len(), 3);
        assert!(!f.pieces[2].committed);
    }

    #[test]
    fn a_log_within_the_limit_is_not_trimmed() {
        let f = footprint(0, 30, &[(0, 10, 100), (10, 30, 100)]);
        assert_eq!(f.trim_point_for_bytes(200), None);
        assert_eq!(f.trim_point_for_bytes(u64::MAX), None);
    }

    #[test]
    fn trims_whole_pieces_from_the_oldest_until_the_rest_fits() {
        let f = footprint(
            0,
            40,
            &[(0, 10, 100), (10, 20, 100), (20, 30, 100), (30, 40, 100)],
        );
        assert_eq!(f.trim_point_for_bytes(399), Some(10));
        assert_eq!(f.trim_point_for_bytes(250), Some(20));
        assert_eq!(f.trim_point_for_bytes(200), Some(20));
        assert_eq!(f.trim_point_for_bytes(199), Some(30));
        // The newest piece stays even when it alone is over the limit.
        assert_eq!(f.trim_point_for_bytes(0), Some(30));
    }

    #[test]
    fn a_point_at_or_below_the_start_is_no_trim() {
        // The first range is partly trimmed already: its successor starts the kept data.
        let f = footprint(15, 30, &[(10, 20, 100), (20, 30, 100)]);
        assert_eq!(f.trim_point_for_bytes(150), Some(20));
        let one = footprint(15, 20, &[(10, 20, 100)]);
        assert_eq!(one.trim_point_for_bytes(10), None);
    }

    #[test]
    fn never_past_the_confirm_offset() {
        let f = Footprint {
            start: 0,
            confirm: 10,
            pieces: pieces([(0, 10, 100)], Some((10, 20, 100))),
        };
        // The tail above the confirm offset is not yet durable: trimming to it would cut what is
        // not acknowledged.
        assert_eq!(f.trim_point_for_bytes(100), Some(10));
        let beyond = Footprint {
            start: 0,
            confirm: 5,
            pieces: pieces([(0, 5, 100)], Some((5, 20, 100))),
        };
        assert_eq!(beyond.trim_point_for_bytes(50), Some(5));
        let none = Footprint {
            start: 0,
            confirm: 4,
            pieces: pieces([(0, 5, 100)], Some((5, 20, 100))),
        };
        assert_eq!(none.trim_point_for_bytes(50), None);
    }

    #[test]
    fn overlapping_ranges_count_once() {
        // An object being replaced: the new one covers the old one's offsets.
        let p = pieces(
            [(0, 20, 200), (0, 10, 100), (10, 20, 100)],
            Some((15, 25, 9)),
        );
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].start_offset, 20);
    }
}
