//! A ranged GET handed out in pieces, each in its own buffer (see
//! [`ObjectStorage::get_range_pieces`](super::ObjectStorage::get_range_pieces)).

use std::ops::Range;

use bytes::{Bytes, BytesMut};

use super::error::{StorageError, StorageOp};

/// `bytes` cut into copies of `piece_len` bytes (one piece when 0 or when it fits in one).
pub(crate) fn copied(bytes: &Bytes, piece_len: u64) -> Vec<Bytes> {
    let piece_len = usize::try_from(piece_len).unwrap_or(usize::MAX);
    if piece_len == 0 || bytes.len() <= piece_len {
        return vec![bytes.clone()];
    }
    bytes
        .chunks(piece_len)
        .map(Bytes::copy_from_slice)
        .collect()
}

/// The ranges of `piece_len` bytes that cover `range`, in order (the whole range when 0).
pub(crate) fn ranges(range: &Range<u64>, piece_len: u64) -> Vec<Range<u64>> {
    if piece_len == 0 || range.start >= range.end {
        return vec![range.clone()];
    }
    (range.start..range.end)
        .step_by(usize::try_from(piece_len).unwrap_or(usize::MAX))
        .map(|start| start..start.saturating_add(piece_len).min(range.end))
        .collect()
}

/// The error for a response body that did not hold the range it was asked for.
pub(crate) fn short_body(key: &str, got: u64, range: &Range<u64>) -> StorageError {
    StorageError::Unavailable {
        op: StorageOp::Get,
        key: key.to_owned(),
        source: format!(
            "the response held {got} bytes of the {} asked for",
            range.end - range.start
        )
        .into(),
    }
}

/// Fills pieces from a response body's chunks as they arrive: each chunk is copied once, into
/// the piece it belongs to.
pub(crate) struct Filler {
    wanted: std::vec::IntoIter<usize>,
    piece: BytesMut,
    done: Vec<Bytes>,
    total: u64,
}

impl Filler {
    /// For the pieces of `piece_len` that cover `range`.
    pub(crate) fn new(range: &Range<u64>, piece_len: u64) -> Self {
        let lens: Vec<usize> = ranges(range, piece_len)
            .iter()
            .map(|r| (r.end - r.start) as usize)
            .collect();
        let mut wanted = lens.into_iter();
        let first = wanted.next().unwrap_or(0);
        Filler {
            done: Vec::with_capacity(wanted.len() + 1),
            wanted,
            piece: BytesMut::with_capacity(first),
            total: range.end.saturating_sub(range.start),
        }
    }

    /// Takes the next chunk of the body.
    pub(crate) fn push(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            let room = self.piece.capacity() - self.piece.len();
            if room == 0 {
                let next = self.wanted.next().unwrap_or(chunk.len());
                let full = std::mem::replace(&mut self.piece, BytesMut::with_capacity(next));
                self.done.push(full.freeze());
                continue;
            }
            let (now, rest) = chunk.split_at(room.min(chunk.len()));
            self.piece.extend_from_slice(now);
            chunk = rest;
        }
    }

    /// The pieces, or how many bytes the body held when it is not the range's length.
    pub(crate) fn finish(mut self) -> Result<Vec<Bytes>, u64> {
        if !self.piece.is_empty() {
            self.done.push(self.piece.freeze());
        }
        let got: u64 = self.done.iter().map(|p| p.len() as u64).sum();
        if got != self.total {
            return Err(got);
        }
        Ok(self.done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_of_any_size_fill_the_pieces_exactly() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        for chunk_len in [1, 7, 100, 333, 1000] {
            let mut filler = Filler::new(&(0..1000), 128);
            for chunk in data.chunks(chunk_len) {
                filler.push(chunk);
            }
            let pieces = filler.finish().expect("whole");
            assert_eq!(pieces.len(), 8);
            assert!(pieces[..7].iter().all(|p| p.len() == 128));
            assert_eq!(pieces.concat(), data);
        }
        let mut short = Filler::new(&(0..1000), 128);
        short.push(&data[..999]);
        assert_eq!(short.finish().unwrap_err(), 999);
    }
}
