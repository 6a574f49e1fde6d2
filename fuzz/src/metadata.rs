//! Target `metadata_value`: a value read from the metadata KV, decoded as every record kind the
//! metadata log stores (the framing of `mink_metadata::value`, then each record's body).

use std::fmt::Debug;

use mink_metadata::records::decode_id_counter;
use mink_metadata::value::{self, HEADER_LEN, MetaRecord};
use mink_metadata::{
    NodeRecord, ObjectRecord, StreamRecord, TableRecord, WalReservation, WriterSnapshot,
};

use crate::put_u32;

const KEY: &str = "mink/fuzz";

/// Decodes `data` as each record kind; then again with the header's length and CRC made to fit.
pub fn run(data: &[u8]) {
    check(data);
    let mut sealed = data.to_vec();
    seal(&mut sealed);
    check(&sealed);
}

fn check(raw: &[u8]) {
    round_trip::<TableRecord>(raw);
    round_trip::<StreamRecord>(raw);
    if let Some(object) = round_trip::<ObjectRecord>(raw) {
        object.validate().expect("a decoded object record is valid");
    }
    round_trip::<WalReservation>(raw);
    round_trip::<NodeRecord>(raw);
    round_trip::<WriterSnapshot>(raw);
    if let Ok(next) = decode_id_counter(KEY, raw) {
        assert_eq!(raw.len(), HEADER_LEN + 8, "a counter is exactly one u64");
        assert_eq!(
            u64::from_le_bytes(raw[HEADER_LEN..].try_into().unwrap()),
            next
        );
    }
}

/// A record that decodes encodes to a value that decodes to the same record.
fn round_trip<R: MetaRecord + PartialEq + Debug>(raw: &[u8]) -> Option<R> {
    let record = value::decode::<R>(KEY, raw).ok()?;
    let again = value::encode(&record);
    let back = value::decode::<R>(KEY, &again).expect("an encoded record decodes");
    assert_eq!(back, record);
    Some(record)
}

/// Makes the header's body length and CRC32C match the bytes after it.
fn seal(raw: &mut [u8]) {
    if raw.len() < HEADER_LEN {
        return;
    }
    let len = u32::try_from(raw.len() - HEADER_LEN).unwrap_or(u32::MAX);
    let crc = crc32c::crc32c(&raw[HEADER_LEN..]);
    put_u32(raw, 6, len);
    put_u32(raw, 10, crc);
}

/// Parses a record from JSON (so the seeds follow the records' fields as they change) and frames it.
fn framed<R: MetaRecord + serde::de::DeserializeOwned>(json: &str) -> Option<Vec<u8>> {
    serde_json::from_str::<R>(json)
        .ok()
        .map(|r| value::encode(&r).to_vec())
}

/// One value of each record kind.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = [
        framed::<TableRecord>(
            r#"{"name":"events","schemas":{"1":"{\"fields\":[{\"name\":\"id\",\"type\":\"int64\",\"nullable\":false}]}"},"bucket_count":4,"partitions":["default","eu"]}"#,
        ),
        framed::<StreamRecord>(
            r#"{"id":7,"epoch":3,"owner":"node-1","start_offset":10,"end_offset":99,"state":"open"}"#,
        ),
        framed::<ObjectRecord>(
            r#"{"id":12,"kind":"stream_set","key":"objects/12","size":4096,"ranges":[{"stream_id":7,"start_offset":10,"end_offset":99,"position":0,"len":2048},{"stream_id":8,"start_offset":0,"end_offset":1,"position":2048,"len":100}]}"#,
        ),
        framed::<WalReservation>(r#"{"node":"node-1","first_id":100,"end_id":164}"#),
        framed::<NodeRecord>(
            r#"{"node_id":"node-1","address":"127.0.0.1:6465","expires_at_ms":1700000000000,"lease":42}"#,
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    out.push(
        value::encode(&WriterSnapshot {
            offset: 77,
            data: bytes::Bytes::from_static(b"MKWW opaque snapshot bytes"),
        })
        .to_vec(),
    );
    // An id counter: the header of kind 7 and a u64 body.
    let mut counter = b"MKMV\x01\x07".to_vec();
    counter.extend_from_slice(&8u32.to_le_bytes());
    counter.extend_from_slice(&[0; 4]);
    counter.extend_from_slice(&1000u64.to_le_bytes());
    seal(&mut counter);
    out.push(counter);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_decodes_as_its_kind() {
        let seeds = seeds();
        assert_eq!(seeds.len(), 7);
        assert_eq!(decode_id_counter(KEY, &seeds[6]).unwrap(), 1000);
        for seed in seeds {
            run(&seed);
        }
    }
}
