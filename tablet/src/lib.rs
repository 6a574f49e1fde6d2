//! The log tablet: one bucket's log, composed from the codec, an s3stream stream and the metadata KV.
//!
//! The crate is filled in by the tablet issue; until then it holds nothing.
