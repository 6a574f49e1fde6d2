//! `[http.body]`: the largest request body each kind of request may send.
//!
//! The limit is chosen from the request's format (its `Content-Type`) before anything is read:
//! a `Content-Length` over it is refused at once, a chunked body is cut as soon as it passes it
//! (413 `payload_too_large` either way).

use serde::{Deserialize, Serialize};

/// Body limits per format, in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BodyLimits {
    /// An append of mink batches (`application/vnd.mink.batches`). Default 8 MiB.
    pub max_append_bytes: usize,
    /// An append of an Arrow IPC stream. Default 8 MiB.
    pub max_arrow_bytes: usize,
    /// An append of NDJSON rows. Default 8 MiB.
    pub max_ndjson_bytes: usize,
    /// The JSON body of a control route (create a table, add a schema, trim). Default 1 MiB.
    pub max_json_bytes: usize,
    /// The rows of one NDJSON or Arrow append once decoded, counted as rows times the bytes a
    /// row of the table's schema takes when null (`limits.max_row_bytes` measures the same), as
    /// the body is decoded: a few bytes of `{}` per NDJSON row would otherwise decode to
    /// gigabytes on a wide table. Default 256 MiB.
    pub max_decoded_bytes: usize,
}

impl Default for BodyLimits {
    fn default() -> Self {
        BodyLimits {
            max_append_bytes: 8 << 20,
            max_arrow_bytes: 8 << 20,
            max_ndjson_bytes: 8 << 20,
            max_json_bytes: 1 << 20,
            max_decoded_bytes: 256 << 20,
        }
    }
}

impl BodyLimits {
    /// The largest of the limits: a request budget smaller than it could never admit such a body.
    pub fn largest(&self) -> usize {
        self.max_append_bytes
            .max(self.max_arrow_bytes)
            .max(self.max_ndjson_bytes)
            .max(self.max_json_bytes)
    }

    /// Refuses a zero limit, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        let limits = [
            ("http.body.max_append_bytes", self.max_append_bytes),
            ("http.body.max_arrow_bytes", self.max_arrow_bytes),
            ("http.body.max_ndjson_bytes", self.max_ndjson_bytes),
            ("http.body.max_json_bytes", self.max_json_bytes),
            ("http.body.max_decoded_bytes", self.max_decoded_bytes),
        ];
        match limits.iter().find(|(_, v)| *v == 0) {
            Some((name, _)) => Err(format!("{name} must be at least 1")),
            None => Ok(()),
        }
    }
}
