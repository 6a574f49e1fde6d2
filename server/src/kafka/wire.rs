//! A reader of Kafka request bodies that never allocates by a count it was told.
//!
//! Every length and count is checked against the bytes left before anything is reserved: an
//! array element is at least one byte on the wire, so a count above the bytes left is refused,
//! and vectors start small and grow from the elements that decode (docs/kafka.md, "Framing and
//! decoding"). `flexible` is whether the request version uses compact strings, arrays and
//! tagged fields (KIP-482).

use bytes::{Buf, Bytes};

/// Why a request body did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct WireError(pub(crate) String);

/// What a decode returns.
pub(crate) type WireResult<T> = Result<T, WireError>;

/// Most elements a vector reserves before any decode.
const INITIAL_CAPACITY: usize = 64;

/// A cursor over one request body.
pub(crate) struct Reader {
    buf: Bytes,
    flexible: bool,
}

impl Reader {
    /// Reads `buf`, with the compact encodings when `flexible`.
    pub(crate) fn new(buf: Bytes, flexible: bool) -> Self {
        Reader { buf, flexible }
    }

    /// Bytes not read yet.
    #[cfg(test)]
    pub(crate) fn remaining(&self) -> usize {
        self.buf.remaining()
    }

    fn need(&self, n: usize, what: &str) -> WireResult<()> {
        if self.buf.remaining() < n {
            return Err(WireError(format!(
                "the request ends inside {what} ({n} bytes needed, {} left)",
                self.buf.remaining()
            )));
        }
        Ok(())
    }

    pub(crate) fn i8(&mut self) -> WireResult<i8> {
        self.need(1, "an int8")?;
        Ok(self.buf.get_i8())
    }

    pub(crate) fn bool(&mut self) -> WireResult<bool> {
        Ok(self.i8()? != 0)
    }

    pub(crate) fn i16(&mut self) -> WireResult<i16> {
        self.need(2, "an int16")?;
        Ok(self.buf.get_i16())
    }

    pub(crate) fn i32(&mut self) -> WireResult<i32> {
        self.need(4, "an int32")?;
        Ok(self.buf.get_i32())
    }

    pub(crate) fn i64(&mut self) -> WireResult<i64> {
        self.need(8, "an int64")?;
        Ok(self.buf.get_i64())
    }

    /// A UUID, skipped (topic ids: we name topics).
    pub(crate) fn uuid(&mut self) -> WireResult<[u8; 16]> {
        self.need(16, "a uuid")?;
        let mut id = [0; 16];
        self.buf.copy_to_slice(&mut id);
        Ok(id)
    }

    /// An unsigned varint of at most 5 bytes (a u32).
    pub(crate) fn uvarint(&mut self) -> WireResult<u32> {
        let mut value: u32 = 0;
        for i in 0..5 {
            self.need(1, "a varint")?;
            let byte = self.buf.get_u8();
            if i == 4 && byte > 0x0f {
                return Err(WireError("a varint longer than 32 bits".to_owned()));
            }
            value |= u32::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(WireError("a varint longer than 5 bytes".to_owned()))
    }

    /// A length or count: `None` for null. Compact forms store n + 1 (0 is null); classic ones
    /// an int16 (strings) or int32 (arrays, bytes), -1 for null.
    fn length(&mut self, classic16: bool, what: &str) -> WireResult<Option<usize>> {
        let n: i64 = if self.flexible {
            i64::from(self.uvarint()?) - 1
        } else if classic16 {
            i64::from(self.i16()?)
        } else {
            i64::from(self.i32()?)
        };
        if n < -1 {
            return Err(WireError(format!("{what} has a negative length {n}")));
        }
        if n == -1 {
            return Ok(None);
        }
        let n = n as usize;
        if n > self.buf.remaining() {
            return Err(WireError(format!(
                "{what} declares {n} bytes or elements but only {} bytes are left",
                self.buf.remaining()
            )));
        }
        Ok(Some(n))
    }

    /// A nullable string.
    pub(crate) fn nullable_string(&mut self) -> WireResult<Option<String>> {
        let Some(n) = self.length(true, "a string")? else {
            return Ok(None);
        };
        let bytes = self.buf.split_to(n);
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| WireError("a string is not UTF-8".to_owned()))
    }

    /// A string that must not be null.
    pub(crate) fn string(&mut self) -> WireResult<String> {
        self.nullable_string()?
            .ok_or_else(|| WireError("a required string is null".to_owned()))
    }

    /// Nullable bytes, shared with the request buffer (no copy).
    pub(crate) fn nullable_bytes(&mut self) -> WireResult<Option<Bytes>> {
        let Some(n) = self.length(false, "a byte string")? else {
            return Ok(None);
        };
        Ok(Some(self.buf.split_to(n)))
    }

    /// Bytes that must not be null.
    pub(crate) fn bytes(&mut self) -> WireResult<Bytes> {
        self.nullable_bytes()?
            .ok_or_else(|| WireError("a required byte string is null".to_owned()))
    }

    /// An array decoded element by element; null reads as empty.
    pub(crate) fn array<T>(
        &mut self,
        element: impl FnMut(&mut Reader) -> WireResult<T>,
    ) -> WireResult<Vec<T>> {
        Ok(self.nullable_array(element)?.unwrap_or_default())
    }

    /// An array decoded element by element, `None` for null.
    pub(crate) fn nullable_array<T>(
        &mut self,
        mut element: impl FnMut(&mut Reader) -> WireResult<T>,
    ) -> WireResult<Option<Vec<T>>> {
        let Some(n) = self.length(false, "an array")? else {
            return Ok(None);
        };
        let mut items = Vec::with_capacity(n.min(INITIAL_CAPACITY));
        for _ in 0..n {
            items.push(element(self)?);
        }
        Ok(Some(items))
    }

    /// Skips the tagged fields of a flexible version (none is used by what we serve).
    pub(crate) fn tagged_fields(&mut self) -> WireResult<()> {
        if !self.flexible {
            return Ok(());
        }
        let count = self.uvarint()?;
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.need(size, "a tagged field")?;
            self.buf.advance(size);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_declared_count_is_refused_before_anything_is_reserved() {
        // i32::MAX elements declared, four bytes of them present.
        let mut r = Reader::new(
            Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1]),
            false,
        );
        let error = r.array(|r| r.i32()).unwrap_err();
        assert!(error.0.contains("declares 2147483647"), "{error}");
        // The same as a compact array: varint of 2^32 - 1.
        let mut r = Reader::new(Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f, 1]), true);
        assert!(r.array(|r| r.i8()).is_err());
    }

    #[test]
    fn compact_and_classic_forms_read_the_same_values() {
        let mut classic = Reader::new(
            Bytes::from_static(&[0, 2, b'h', b'i', 0xff, 0xff, 0, 0, 0, 1, 0, 7]),
            false,
        );
        assert_eq!(classic.string().unwrap(), "hi");
        assert_eq!(classic.nullable_string().unwrap(), None);
        assert_eq!(classic.array(|r| r.i16()).unwrap(), vec![7]);
        let mut compact = Reader::new(Bytes::from_static(&[3, b'h', b'i', 0, 2, 0, 7, 0]), true);
        assert_eq!(compact.string().unwrap(), "hi");
        assert_eq!(compact.nullable_string().unwrap(), None);
        assert_eq!(compact.array(|r| r.i16()).unwrap(), vec![7]);
        compact.tagged_fields().unwrap();
        assert_eq!(compact.remaining(), 0);
    }

    #[test]
    fn truncated_and_malformed_fields_are_errors() {
        assert!(
            Reader::new(Bytes::from_static(&[0, 0, 1]), false)
                .i32()
                .is_err()
        );
        assert!(
            Reader::new(Bytes::from_static(&[0, 5, b'a']), false)
                .string()
                .is_err()
        );
        assert!(
            Reader::new(Bytes::from_static(&[0xff, 0xfe]), false)
                .nullable_string()
                .is_err()
        );
        assert!(
            Reader::new(Bytes::from_static(&[0, 1, 0xff]), false)
                .string()
                .is_err()
        );
        let long = [0x80, 0x80, 0x80, 0x80, 0x80, 0x01];
        assert!(
            Reader::new(Bytes::copy_from_slice(&long), true)
                .uvarint()
                .is_err()
        );
        // A tagged field longer than the body.
        assert!(
            Reader::new(Bytes::from_static(&[1, 0, 9, 1]), true)
                .tagged_fields()
                .is_err()
        );
    }
}
