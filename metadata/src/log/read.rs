//! Reading records, shared by every key family: decoding what a get or a scan returned into typed
//! records (with the version a compare-and-swap must present), and the page size of scans.

use crate::error::Result;
use crate::kv::KeyValue;
use crate::value::{MetaRecord, decode};

/// Keys per page when scanning.
pub(super) const SCAN_PAGE: usize = 512;

/// Decodes a read's value, with the version a compare-and-swap must present.
pub(super) fn get_record<R: MetaRecord>(kv: &Option<KeyValue>) -> Result<Option<(R, u64)>> {
    kv.as_ref()
        .map(|kv| Ok((decode::<R>(&kv.key, &kv.value)?, kv.version)))
        .transpose()
}

/// Decodes every value of a scan.
pub(super) fn decode_all<R: MetaRecord>(kvs: &[KeyValue]) -> Result<Vec<R>> {
    kvs.iter()
        .map(|kv| decode::<R>(&kv.key, &kv.value))
        .collect()
}
