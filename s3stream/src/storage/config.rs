//! [`S3Config`]: where an S3 (or S3-compatible) bucket is and how to reach it, as the server's
//! TOML configuration spells it.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Settings for an S3 or S3-compatible bucket, shared by
/// [`ObjectStoreBackend::s3`](super::ObjectStoreBackend::s3) and
/// [`AwsS3Backend::new`](super::AwsS3Backend::new).
///
/// In TOML (every field but `bucket` has a default):
///
/// ```toml
/// bucket = "mink-data"
/// endpoint = "http://127.0.0.1:9000"   # omit for AWS
/// region = "us-east-1"
/// access_key = "..."                   # omit both keys to use the AWS default credential chain
/// secret_key = "..."
/// allow_http = true
/// prefix = "cluster-a"                 # root prefix for every key
/// max_retries = 3
/// request_timeout_ms = 30000
/// put_integrity = "crc64nvme"          # or "signed", "none"
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct S3Config {
    /// Endpoint URL of an S3-compatible server (`http://127.0.0.1:9000`); `None` for AWS.
    pub endpoint: Option<String>,
    /// The bucket, which must exist.
    pub bucket: String,
    /// The region (S3-compatible servers usually accept `us-east-1`).
    pub region: String,
    /// Access key id; with `secret_key`, static credentials. Both `None`: the environment / AWS
    /// default credential chain.
    pub access_key: Option<String>,
    /// Secret access key. Never printed by `Debug`.
    pub secret_key: Option<String>,
    /// Allow plain-HTTP endpoints (local test servers).
    pub allow_http: bool,
    /// Root prefix prepended (with `/`) to every key, so several users can share a bucket.
    pub prefix: String,
    /// Path-style addressing (`endpoint/bucket/key`). `None`: path style when `endpoint` is set
    /// (local servers), virtual-hosted style for AWS.
    pub path_style: Option<bool>,
    /// How many times the client retries a failed request (throttling, 5xx, connection errors)
    /// before returning the error.
    pub max_retries: u32,
    /// Time limit for one request attempt, in milliseconds.
    pub request_timeout_ms: u64,
    /// How a PUT proves its body to the store (see [`PutIntegrity`]). Read by
    /// [`ObjectStoreBackend::s3`](super::ObjectStoreBackend::s3), the node's client; the
    /// `aws-sdk-s3` backend keeps the SDK's own signing.
    pub put_integrity: PutIntegrity,
}

/// How a PUT's body is protected on its way to the store.
///
/// SigV4 can sign the body's SHA-256 (`Signed`), which costs the node a SHA-256 of every byte it
/// writes: on an S3-compatible server on the same machine, a quarter of the node's CPU under
/// load. `Crc64Nvme` signs the request without the body's hash (`UNSIGNED-PAYLOAD`) and sends
/// the body's CRC64-NVME in `x-amz-checksum-crc64nvme`, which S3 checks before it stores the
/// object, at a small fraction of the cost. `None` sends neither, for a store that refuses the
/// checksum header: TLS is then the only check in transit (reads still check every batch's
/// CRC32C).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PutIntegrity {
    /// An unsigned body with its CRC64-NVME checksum, checked by the store (the default).
    #[default]
    Crc64Nvme,
    /// The body's SHA-256 in the request's signature.
    Signed,
    /// An unsigned body without a checksum.
    None,
}

impl fmt::Display for PutIntegrity {
    /// The value as the TOML configuration spells it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PutIntegrity::Crc64Nvme => "crc64nvme",
            PutIntegrity::Signed => "signed",
            PutIntegrity::None => "none",
        })
    }
}

impl Default for S3Config {
    fn default() -> Self {
        S3Config {
            endpoint: None,
            bucket: String::new(),
            region: "us-east-1".to_owned(),
            access_key: None,
            secret_key: None,
            allow_http: false,
            prefix: String::new(),
            path_style: None,
            max_retries: 3,
            request_timeout_ms: 30_000,
            put_integrity: PutIntegrity::default(),
        }
    }
}

impl S3Config {
    /// A configuration for a local S3-compatible server: path style, plain HTTP allowed, static
    /// credentials.
    pub fn local_server(
        endpoint: impl Into<String>,
        bucket: impl Into<String>,
        region: impl Into<String>,
        access_key: impl Into<String>,
        secret_key: impl Into<String>,
    ) -> Self {
        S3Config {
            endpoint: Some(endpoint.into()),
            bucket: bucket.into(),
            region: region.into(),
            access_key: Some(access_key.into()),
            secret_key: Some(secret_key.into()),
            allow_http: true,
            path_style: Some(true),
            ..S3Config::default()
        }
    }

    /// The same configuration under another root prefix.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Whether requests use path-style addressing.
    pub fn uses_path_style(&self) -> bool {
        self.path_style.unwrap_or(self.endpoint.is_some())
    }

    /// The per-attempt request timeout.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key", &self.access_key)
            .field(
                "secret_key",
                &self.secret_key.as_ref().map(|_| "<redacted>"),
            )
            .field("allow_http", &self.allow_http)
            .field("prefix", &self.prefix)
            .field("path_style", &self.path_style)
            .field("max_retries", &self.max_retries)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("put_integrity", &self.put_integrity)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_secret() {
        let c = S3Config::local_server("http://h", "b", "us-east-1", "ak", "very-secret");
        let s = format!("{c:?}");
        assert!(!s.contains("very-secret"), "{s}");
        assert!(s.contains("<redacted>"));
        assert!(c.uses_path_style());
    }

    #[test]
    fn reads_from_toml_with_defaults() {
        let c: S3Config = toml::from_str(
            r#"
            bucket = "mink-data"
            endpoint = "http://127.0.0.1:9000"
            access_key = "ak"
            secret_key = "sk"
            allow_http = true
            prefix = "cluster-a"
            "#,
        )
        .unwrap();
        assert_eq!(c.bucket, "mink-data");
        assert_eq!(c.region, "us-east-1");
        assert_eq!(c.max_retries, 3);
        assert_eq!(c.put_integrity, PutIntegrity::Crc64Nvme);
        assert!(
            c.uses_path_style(),
            "path style by default with an endpoint"
        );
        let aws: S3Config = toml::from_str("bucket = \"b\"").unwrap();
        assert!(!aws.uses_path_style());
        assert!(toml::from_str::<S3Config>("bucket = \"b\"\nbukket = \"typo\"").is_err());
        let back: S3Config = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn put_integrity_reads_its_three_values_and_refuses_others() {
        for (text, want) in [
            ("crc64nvme", PutIntegrity::Crc64Nvme),
            ("signed", PutIntegrity::Signed),
            ("none", PutIntegrity::None),
        ] {
            let c: S3Config =
                toml::from_str(&format!("bucket = \"b\"\nput_integrity = \"{text}\"")).unwrap();
            assert_eq!(c.put_integrity, want, "{text}");
        }
        let err = toml::from_str::<S3Config>("bucket = \"b\"\nput_integrity = \"md5\"")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("crc64nvme"),
            "the error names the values: {err}"
        );
    }
}
