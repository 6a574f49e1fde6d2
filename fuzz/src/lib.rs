//! The harnesses of the fuzz targets for every decoder outside the codec that reads bytes from
//! storage or from the network, and the seed inputs of each.
//!
//! Each module holds the targets of one source of bytes; each target is `run(data)` (arbitrary
//! bytes in: decode, check what the decoder promises, never panic) and `seeds()` (valid inputs
//! made by the matching encoder, which `seed_corpus` writes to `corpus/{target}/`). Decoders that
//! check a CRC are run twice, on the bytes as they came and again with every CRC the layout names
//! recomputed, so that mutations get past the checksum into the parser.
//!
//! The batch decoder itself has its own target in `codec/fuzz`, which builds the codec alone.

pub mod http;
pub mod metadata;
pub mod objects;
pub mod tablet;

/// A target: its name (the binary under `fuzz_targets/`), its harness and its seeds.
pub struct Target {
    /// The name `cargo fuzz run` takes.
    pub name: &'static str,
    /// Decodes one input.
    pub run: fn(&[u8]),
    /// Valid inputs to start from.
    pub seeds: fn() -> Vec<Vec<u8>>,
}

/// Every target of this crate.
pub const TARGETS: &[Target] = &[
    Target {
        name: "wal_object",
        run: objects::run_wal,
        seeds: objects::wal_seeds,
    },
    Target {
        name: "committed_object",
        run: objects::run_committed,
        seeds: objects::committed_seeds,
    },
    Target {
        name: "stream_manifest",
        run: objects::run_manifest,
        seeds: objects::manifest_seeds,
    },
    Target {
        name: "metadata_value",
        run: metadata::run,
        seeds: metadata::seeds,
    },
    Target {
        name: "writer_snapshot",
        run: tablet::run_snapshot,
        seeds: tablet::snapshot_seeds,
    },
    Target {
        name: "tablet_registry",
        run: tablet::run_registry,
        seeds: tablet::registry_seeds,
    },
    Target {
        name: "ndjson_rows",
        run: http::run_ndjson,
        seeds: http::ndjson_seeds,
    },
    Target {
        name: "arrow_rows",
        run: http::run_arrow,
        seeds: http::arrow_seeds,
    },
    Target {
        name: "table_schema",
        run: http::run_schema,
        seeds: http::schema_seeds,
    },
];

/// The little-endian `u32` at `at`, if the bytes reach that far.
fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let word = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(word.try_into().ok()?))
}

/// The little-endian `u64` at `at`, if the bytes reach that far.
fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    let word = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(word.try_into().ok()?))
}

/// Writes `value` little-endian at `at`, if the bytes reach that far.
fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    if let Some(word) = at.checked_add(4).and_then(|end| bytes.get_mut(at..end)) {
        word.copy_from_slice(&value.to_le_bytes());
    }
}
