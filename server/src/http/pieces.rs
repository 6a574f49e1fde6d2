//! A response body of pieces already in memory (stored batches, rendered parts), sent as they
//! are: no copy into one buffer, and its exact length is known, so it goes out with a
//! `Content-Length` rather than chunked.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};

/// The pieces of a body, in order.
pub(crate) struct Pieces {
    pieces: VecDeque<Bytes>,
    remaining: u64,
}

impl Pieces {
    /// The body of `pieces`, in order.
    pub(crate) fn body(pieces: impl IntoIterator<Item = Bytes>) -> Body {
        let pieces: VecDeque<Bytes> = pieces.into_iter().filter(|p| !p.is_empty()).collect();
        if pieces.len() <= 1 {
            return Body::from(pieces.into_iter().next().unwrap_or_default());
        }
        let remaining = pieces.iter().map(|p| p.len() as u64).sum();
        Body::new(Pieces { pieces, remaining })
    }
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let piece = self.pieces.pop_front();
        if let Some(piece) = &piece {
            self.remaining -= piece.len() as u64;
        }
        Poll::Ready(piece.map(|p| Ok(Frame::data(p))))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn the_pieces_arrive_in_order_with_their_exact_length() {
        let pieces =
            ["stored ", "", "batches ", "as they are"].map(|s: &'static str| Bytes::from(s));
        let body = Pieces::body(pieces);
        assert_eq!(body.size_hint().exact(), Some(26));
        let bytes = body.collect().await.expect("infallible").to_bytes();
        assert_eq!(bytes, "stored batches as they are");
        assert_eq!(Pieces::body([]).size_hint().exact(), Some(0));
    }
}
