//! CRC32C of a concatenation from the CRCs of its pieces, without reading the pieces.
//!
//! A block's CRC32C covers its header and every frame, payloads included. A payload whose CRC is
//! already known (an appended batch whose own CRC the tablet checked when the request arrived)
//! need not be read again to extend the block's CRC over it: [`combine`] extends a CRC over
//! `len` bytes whose CRC is given. So a large payload goes from the request to the PUT without
//! being read in user space (it is sent as a part of its own, docs/write-copies.md).
//!
//! The arithmetic is over GF(2) modulo the CRC-32C polynomial, in the reflected bit order the
//! CRC uses (bit 31 is x^0): extending `crc1` over `len` bytes multiplies it by x^(8 * len);
//! x^(2^k) is tabled for every k a length can need, so a combine is one multiplication per set
//! bit of the length plus one, each at most 32 shifts, whatever the length.

/// The CRC-32C polynomial, reflected.
const POLY: u32 = 0x82F6_3B78;

/// `a * b` modulo the polynomial (both reflected).
const fn multiply(a: u32, mut b: u32) -> u32 {
    let mut m: u32 = 1 << 31;
    let mut product = 0;
    loop {
        if a & m != 0 {
            product ^= b;
            if a & (m - 1) == 0 {
                return product;
            }
        }
        m >>= 1;
        if m == 0 {
            return product;
        }
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
}

/// `X2N[k]` is x^(2^k) modulo the polynomial.
const X2N: [u32; 64] = {
    let mut table = [0u32; 64];
    table[0] = 1 << 30; // x^1
    let mut k = 1;
    while k < 64 {
        table[k] = multiply(table[k - 1], table[k - 1]);
        k += 1;
    }
    table
};

/// x^(8 * len) modulo the polynomial.
fn x_pow_8n(len: u64) -> u32 {
    let mut result: u32 = 1 << 31; // x^0
    let mut n = len;
    let mut k = 3; // 8 * len = len << 3
    while n != 0 {
        if n & 1 != 0 {
            result = multiply(X2N[k], result);
        }
        n >>= 1;
        k += 1;
    }
    result
}

/// The CRC32C of `a` followed by `b`, from `crc1` (of `a`), `crc2` (of `b`) and `b`'s length:
/// what `crc32c::crc32c_append(crc1, b)` returns when `crc2 == crc32c::crc32c(b)`.
pub fn combine(crc1: u32, crc2: u32, len2: u64) -> u32 {
    if len2 == 0 {
        return crc1;
    }
    multiply(x_pow_8n(len2), crc1) ^ crc2
}

#[cfg(test)]
mod tests {
    use super::combine;
    use proptest::prelude::*;

    #[test]
    fn combining_matches_appending() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for split in [0, 1, 3, 29, 1000, 65_536, 131_071, 199_999, 200_000] {
            let (a, b) = data.split_at(split);
            let whole = crc32c::crc32c(&data);
            let joined = combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len() as u64);
            assert_eq!(joined, whole, "split at {split}");
        }
    }

    proptest! {
        #[test]
        fn any_split_of_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..4096), at in any::<prop::sample::Index>()) {
            let split = at.index(data.len() + 1);
            let (a, b) = data.split_at(split);
            prop_assert_eq!(
                combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len() as u64),
                crc32c::crc32c(&data)
            );
        }
    }
}
