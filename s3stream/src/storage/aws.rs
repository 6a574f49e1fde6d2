//! [`AwsS3Backend`]: [`ObjectStorage`] over `aws-sdk-s3` directly, for AWS S3 and S3-compatible
//! servers (path-style addressing for local servers).
//!
//! Error mapping, from the HTTP status and the S3 error code of a service error: `SlowDown`,
//! 503 and 429 -> [`StorageError::Throttled`]; 404 / `NoSuchKey` -> [`StorageError::NotFound`];
//! 412 / `PreconditionFailed` -> [`StorageError::Precondition`] (only `put_if_absent` sends a
//! precondition); 416 / `InvalidRange` -> [`StorageError::InvalidRange`]; 409
//! `ConditionalRequestConflict`, 500, 502, 504 -> [`StorageError::Unavailable`]; everything else
//! -> [`StorageError::Other`]. SDK timeouts -> [`StorageError::Timeout`]; connection failures ->
//! [`StorageError::Unavailable`]. The SDK's standard retry mode retries throttling and transient
//! errors `max_retries` times before the error reaches the caller.

use std::ops::Range;
use std::time::SystemTime;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use bytes::Bytes;

use super::key::Root;
use super::pieces;
use super::{
    BoxError, ObjectMeta, ObjectStorage, PutResult, Result, S3Config, StorageError, StorageOp,
    check_range, validate_key, validate_prefix,
};

/// S3's limit of keys per `DeleteObjects` request.
const DELETE_BATCH: usize = 1000;

/// [`ObjectStorage`] over `aws-sdk-s3`.
#[derive(Debug, Clone)]
pub struct AwsS3Backend {
    client: Client,
    bucket: String,
    root: Root,
    name: String,
}

/// An SDK error with its full context rendered (the SDK's own `Display` says only "service
/// error"), keeping the SDK error as the source.
#[derive(Debug, thiserror::Error)]
#[error("{context}")]
struct AwsError {
    context: String,
    #[source]
    source: BoxError,
}

/// One key that `DeleteObjects` reported as not deleted.
#[derive(Debug, thiserror::Error)]
#[error("DeleteObjects did not delete {key:?}: {code}: {message}")]
struct DeleteObjectFailed {
    key: String,
    code: String,
    message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    NotFound,
    Precondition,
    Throttled,
    InvalidRange,
    Timeout,
    Unavailable,
    Other,
}

/// The kind of an S3 error response from its HTTP status and S3 error code.
fn classify(status: Option<u16>, code: Option<&str>) -> Kind {
    match code {
        Some("SlowDown" | "Throttling" | "ThrottlingException" | "RequestLimitExceeded") => {
            return Kind::Throttled;
        }
        Some("NoSuchKey" | "NotFound") => return Kind::NotFound,
        Some("PreconditionFailed") => return Kind::Precondition,
        Some("InvalidRange") => return Kind::InvalidRange,
        Some("ConditionalRequestConflict" | "InternalError" | "ServiceUnavailable") => {
            return Kind::Unavailable;
        }
        Some("RequestTimeout") => return Kind::Timeout,
        _ => {}
    }
    match status {
        Some(503 | 429) => Kind::Throttled,
        Some(404) => Kind::NotFound,
        Some(412) => Kind::Precondition,
        Some(416) => Kind::InvalidRange,
        Some(408) => Kind::Timeout,
        Some(409 | 500 | 502 | 504) => Kind::Unavailable,
        _ => Kind::Other,
    }
}

fn build(op: StorageOp, key: String, kind: Kind, source: BoxError) -> StorageError {
    match kind {
        Kind::NotFound => StorageError::NotFound { key },
        Kind::Precondition => StorageError::Precondition { key, op },
        Kind::Throttled => StorageError::Throttled { op, key, source },
        Kind::InvalidRange => StorageError::InvalidRange {
            key,
            range: 0..0,
            size: None,
        },
        Kind::Timeout => StorageError::Timeout { op, key, source },
        Kind::Unavailable => StorageError::Unavailable { op, key, source },
        Kind::Other => StorageError::Other { op, key, source },
    }
}

fn map_sdk_error<E>(op: StorageOp, key: &str, err: SdkError<E>) -> StorageError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let kind = match &err {
        SdkError::TimeoutError(_) => Kind::Timeout,
        SdkError::DispatchFailure(d) if d.is_timeout() => Kind::Timeout,
        SdkError::DispatchFailure(d) if d.is_io() => Kind::Unavailable,
        SdkError::ResponseError(_) => Kind::Unavailable,
        SdkError::ServiceError(s) => classify(Some(s.raw().status().as_u16()), s.err().code()),
        _ => Kind::Other,
    };
    let context = DisplayErrorContext(&err).to_string();
    let source = Box::new(AwsError {
        context,
        source: Box::new(err),
    });
    build(op, key.to_owned(), kind, source)
}

fn to_system_time(t: Option<&aws_sdk_s3::primitives::DateTime>) -> Option<SystemTime> {
    t.and_then(|t| SystemTime::try_from(*t).ok())
}

impl AwsS3Backend {
    /// A ranged GET's response, before its body is read.
    async fn get_range_output(
        &self,
        key: &str,
        range: Range<u64>,
    ) -> Result<aws_sdk_s3::operation::get_object::GetObjectOutput> {
        let full = self.full_key(key)?;
        check_range(key, &range)?;
        let res = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(full)
            .range(format!("bytes={}-{}", range.start, range.end - 1))
            .send()
            .await;
        let out = match res {
            Ok(out) => out,
            Err(e) => {
                return Err(match map_sdk_error(StorageOp::Get, key, e) {
                    StorageError::InvalidRange { key: k, .. } => {
                        let size = self.head(key).await.ok().map(|m| m.size);
                        StorageError::InvalidRange {
                            key: k,
                            range,
                            size,
                        }
                    }
                    other => other,
                });
            }
        };
        Ok(out)
    }

    /// Connects to the bucket described by `config` (no request is sent until the first call).
    /// Without static keys the AWS default credential chain (environment, profile, IMDS) is used.
    pub async fn new(config: S3Config) -> Result<Self> {
        if let Some(endpoint) = &config.endpoint
            && endpoint.starts_with("http://")
            && !config.allow_http
        {
            return Err(StorageError::Config {
                message: format!(
                    "endpoint {endpoint} is plain HTTP; set allow_http = true to use it"
                ),
                source: None,
            });
        }
        let builder = match (&config.access_key, &config.secret_key) {
            (Some(ak), Some(sk)) => aws_sdk_s3::config::Builder::new()
                .behavior_version(BehaviorVersion::latest())
                .credentials_provider(Credentials::new(ak, sk, None, None, "mink-s3-config")),
            (None, None) => {
                let shared = aws_config::defaults(BehaviorVersion::latest())
                    .region(Region::new(config.region.clone()))
                    .load()
                    .await;
                aws_sdk_s3::config::Builder::from(&shared)
            }
            _ => {
                return Err(StorageError::Config {
                    message: "S3 access_key and secret_key must be given together (or neither, \
                              to use the default credential chain)"
                        .to_owned(),
                    source: None,
                });
            }
        };
        let mut builder = builder
            .region(Region::new(config.region.clone()))
            .force_path_style(config.uses_path_style())
            .retry_config(RetryConfig::standard().with_max_attempts(config.max_retries + 1))
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_attempt_timeout(config.request_timeout())
                    .build(),
            )
            // Checksums only where S3 requires them (DeleteObjects): S3-compatible servers vary
            // in their support of the newer flexible checksums.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.endpoint_url(endpoint);
        }
        let root = Root::new(&config.prefix)?;
        let name = format!("aws-sdk-s3:s3://{}/{}", config.bucket, root.as_str());
        Ok(AwsS3Backend {
            client: Client::from_conf(builder.build()),
            bucket: config.bucket,
            root,
            name,
        })
    }

    /// The underlying SDK client, for callers that need an S3 feature this trait does not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn full_key(&self, key: &str) -> Result<String> {
        validate_key(key)?;
        Ok(self.root.join(key))
    }

    async fn put_inner(&self, op: StorageOp, key: &str, data: Bytes) -> Result<PutResult> {
        let full = self.full_key(key)?;
        let len = i64::try_from(data.len()).unwrap_or(i64::MAX);
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(full)
            .content_length(len)
            .body(ByteStream::from(data));
        if op == StorageOp::PutIfAbsent {
            req = req.if_none_match("*");
        }
        let out = req.send().await.map_err(|e| map_sdk_error(op, key, e))?;
        Ok(PutResult::new(out.e_tag))
    }
}

/// The whole body of a GET; a connection lost while reading it is a retryable failure.
/// The range of a `Content-Range: bytes START-END/SIZE` header, as a half-open range.
fn content_range(header: &str) -> Option<Range<u64>> {
    let (span, _size) = header.strip_prefix("bytes ")?.split_once('/')?;
    let (start, end) = span.split_once('-')?;
    let (start, end): (u64, u64) = (start.parse().ok()?, end.parse().ok()?);
    (start <= end).then(|| start..end + 1)
}

async fn collect_body(
    out: aws_sdk_s3::operation::get_object::GetObjectOutput,
    key: &str,
) -> Result<Bytes> {
    let body = out
        .body
        .collect()
        .await
        .map_err(|e| StorageError::Unavailable {
            op: StorageOp::Get,
            key: key.to_owned(),
            source: Box::new(e),
        })?;
    Ok(body.into_bytes())
}

#[async_trait]
impl ObjectStorage for AwsS3Backend {
    fn name(&self) -> &str {
        &self.name
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<PutResult> {
        self.put_inner(StorageOp::Put, key, data).await
    }

    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutResult> {
        self.put_inner(StorageOp::PutIfAbsent, key, data).await
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        let full = self.full_key(key)?;
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(full)
            .send()
            .await
            .map_err(|e| map_sdk_error(StorageOp::Get, key, e))?;
        collect_body(out, key).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let out = self.get_range_output(key, range).await?;
        collect_body(out, key).await
    }

    async fn get_range_pieces(
        &self,
        key: &str,
        range: Range<u64>,
        piece_len: u64,
    ) -> Result<Vec<Bytes>> {
        let mut out = self.get_range_output(key, range.clone()).await?;
        // The range the store answered with (clipped at the object's end).
        let answered = out
            .content_range
            .as_deref()
            .and_then(content_range)
            .unwrap_or(range);
        let mut filler = pieces::Filler::new(&answered, piece_len);
        while let Some(chunk) =
            out.body
                .try_next()
                .await
                .map_err(|e| StorageError::Unavailable {
                    op: StorageOp::Get,
                    key: key.to_owned(),
                    source: Box::new(e),
                })?
        {
            filler.push(&chunk);
        }
        filler
            .finish()
            .map_err(|got| pieces::short_body(key, got, &answered))
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let full = self.full_key(key)?;
        let out = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(full)
            .send()
            .await
            .map_err(|e| map_sdk_error(StorageOp::Head, key, e))?;
        let size = out
            .content_length
            .and_then(|l| u64::try_from(l).ok())
            .unwrap_or(0);
        Ok(ObjectMeta::new(
            key,
            size,
            to_system_time(out.last_modified.as_ref()),
        ))
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let full = self.full_key(key)?;
        match self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(full)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => match map_sdk_error(StorageOp::Delete, key, e) {
                StorageError::NotFound { .. } => Ok(()),
                other => Err(other),
            },
        }
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        let full: Vec<String> = keys
            .iter()
            .map(|k| self.full_key(k))
            .collect::<Result<_>>()?;
        for (chunk_keys, chunk) in keys.chunks(DELETE_BATCH).zip(full.chunks(DELETE_BATCH)) {
            let what = format!("{} keys from {:?}", chunk_keys.len(), chunk_keys[0]);
            let objects = chunk
                .iter()
                .map(|k| ObjectIdentifier::builder().key(k).build())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| StorageError::Other {
                    op: StorageOp::DeleteMany,
                    key: what.clone(),
                    source: Box::new(e),
                })?;
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|e| StorageError::Other {
                    op: StorageOp::DeleteMany,
                    key: what.clone(),
                    source: Box::new(e),
                })?;
            let out = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(delete)
                .send()
                .await
                .map_err(|e| map_sdk_error(StorageOp::DeleteMany, &what, e))?;
            for err in out.errors() {
                let code = err.code().unwrap_or_default();
                if code == "NoSuchKey" {
                    continue;
                }
                let full_key = err.key().unwrap_or_default();
                let key = self.root.strip(full_key).unwrap_or(full_key).to_owned();
                let source = Box::new(DeleteObjectFailed {
                    key: key.clone(),
                    code: code.to_owned(),
                    message: err.message().unwrap_or_default().to_owned(),
                });
                return Err(build(
                    StorageOp::DeleteMany,
                    key,
                    classify(None, Some(code)),
                    source,
                ));
            }
        }
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        validate_prefix(prefix)?;
        let full_prefix = if prefix.is_empty() {
            if self.root.as_str().is_empty() {
                String::new()
            } else {
                format!("{}/", self.root.as_str())
            }
        } else {
            self.root.join(prefix)
        };
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(full_prefix)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| map_sdk_error(StorageOp::List, prefix, e))?;
            for obj in page.contents() {
                let Some(key) = obj.key().and_then(|k| self.root.strip(k)) else {
                    continue;
                };
                let size = obj.size().and_then(|s| u64::try_from(s).ok()).unwrap_or(0);
                out.push(ObjectMeta::new(
                    key,
                    size,
                    to_system_time(obj.last_modified()),
                ));
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert_eq!(classify(Some(503), Some("SlowDown")), Kind::Throttled);
        assert_eq!(classify(Some(503), None), Kind::Throttled);
        assert_eq!(classify(Some(429), None), Kind::Throttled);
        assert_eq!(classify(Some(404), Some("NoSuchKey")), Kind::NotFound);
        assert_eq!(classify(Some(404), None), Kind::NotFound);
        assert_eq!(
            classify(Some(412), Some("PreconditionFailed")),
            Kind::Precondition
        );
        assert_eq!(
            classify(Some(416), Some("InvalidRange")),
            Kind::InvalidRange
        );
        assert_eq!(
            classify(Some(409), Some("ConditionalRequestConflict")),
            Kind::Unavailable
        );
        assert_eq!(
            classify(Some(500), Some("InternalError")),
            Kind::Unavailable
        );
        assert_eq!(classify(Some(403), Some("AccessDenied")), Kind::Other);
        assert_eq!(classify(None, Some("SlowDown")), Kind::Throttled);
    }
}
