//! Bytes held as consecutive parts (a block as slices of the block cache's pages), read in place:
//! a field inside one part is a slice of it, and only a field that crosses a part's end is copied.

use bytes::{Bytes, BytesMut};

use super::le::Truncated;

/// Consecutive parts read as one run of bytes.
pub(crate) struct Parts<'a> {
    parts: &'a [Bytes],
    /// Where each part starts in the run.
    starts: Vec<usize>,
    len: usize,
}

impl<'a> Parts<'a> {
    pub(crate) fn new(parts: &'a [Bytes]) -> Self {
        let mut starts = Vec::with_capacity(parts.len());
        let mut len = 0;
        for part in parts {
            starts.push(len);
            len += part.len();
        }
        Parts { parts, starts, len }
    }

    /// `len` bytes at `position`: a slice when they lie in one part, else copied together; or how
    /// far short the run is for `field`.
    pub(crate) fn take(
        &self,
        position: usize,
        len: usize,
        field: &'static str,
    ) -> Result<Bytes, Truncated> {
        self.check(position, len, field)?;
        let mut pieces = self.pieces(position, len);
        match (pieces.next(), pieces.next()) {
            (None, _) => Ok(Bytes::new()),
            (Some(only), None) => Ok(only),
            (Some(first), Some(second)) => {
                let mut out = BytesMut::with_capacity(len);
                out.extend_from_slice(&first);
                out.extend_from_slice(&second);
                pieces.for_each(|piece| out.extend_from_slice(&piece));
                Ok(out.freeze())
            }
        }
    }

    /// That `len` bytes at `position` lie within the run (nothing is read or copied); or how far
    /// short it is for `field`.
    pub(crate) fn check(
        &self,
        position: usize,
        len: usize,
        field: &'static str,
    ) -> Result<(), Truncated> {
        let available = self.len.saturating_sub(position);
        if position > self.len || len > available {
            return Err(Truncated {
                field,
                position,
                needed: len,
                available,
            });
        }
        Ok(())
    }

    /// The slices of the parts that hold `len` bytes at `position` (which the caller has
    /// checked lie within the run), in order.
    pub(crate) fn pieces(&self, position: usize, len: usize) -> impl Iterator<Item = Bytes> + '_ {
        let first = self.starts.partition_point(|&start| start <= position);
        let end = position + len;
        (first.saturating_sub(1)..self.parts.len())
            .map_while(move |i| {
                let start = self.starts[i];
                (start < end).then(|| {
                    let from = position.saturating_sub(start);
                    let to = (end - start).min(self.parts[i].len());
                    self.parts[i].slice(from.min(to)..to)
                })
            })
            .filter(|piece| !piece.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_reads_the_same_bytes_as_the_joined_run() {
        let whole: Vec<u8> = (0..=255u8).cycle().take(300).collect();
        let cuts = [0usize, 7, 7, 100, 101, 256, 300];
        let parts: Vec<Bytes> = cuts
            .windows(2)
            .map(|w| Bytes::copy_from_slice(&whole[w[0]..w[1]]))
            .collect();
        let run = Parts::new(&parts);
        for position in 0..=300 {
            for len in 0..=(300 - position) {
                let got = run.take(position, len, "test").expect("in bounds");
                assert_eq!(got, whole[position..position + len], "{position}+{len}");
            }
            let short = run.take(position, 301 - position, "test").unwrap_err();
            assert_eq!(short.available, 300 - position);
        }
        assert!(run.take(400, 0, "test").is_err(), "past the end");
    }

    #[test]
    fn a_field_inside_one_part_is_a_slice_of_it() {
        let parts = [Bytes::from(vec![1u8; 64]), Bytes::from(vec![2u8; 64])];
        let run = Parts::new(&parts);
        let inside = run.take(70, 10, "test").expect("in bounds");
        assert_eq!(inside.as_ptr(), parts[1][6..].as_ptr(), "no copy");
        assert_eq!(run.pieces(60, 8).count(), 2);
    }
}
