//! [`ObjectStoreBackend`]: [`ObjectStorage`] over the `object_store` crate: in memory, a local
//! directory, or S3 and S3-compatible servers.
//!
//! Error mapping: object_store's `NotFound` -> [`StorageError::NotFound`]; `Precondition` and
//! `AlreadyExists` (local/memory create, S3 409) on `put_if_absent` -> [`StorageError::Precondition`].
//! object_store reports other HTTP failures as `Generic` errors whose status is only visible in
//! the message, so the source chain is inspected: a transport timeout -> [`StorageError::Timeout`],
//! connection failures -> [`StorageError::Unavailable`], `SlowDown`/503/429 ->
//! [`StorageError::Throttled`], 500/502/504 -> [`StorageError::Unavailable`]. A failed ranged
//! GET is confirmed with a HEAD to report [`StorageError::InvalidRange`] with the object's size.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::object_store as os;
use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use os::aws::{AmazonS3Builder, Checksum};
use os::local::LocalFileSystem;
use os::memory::InMemory;
use os::path::Path;
use os::{
    ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
};

use super::config::PutIntegrity;
use super::key::Root;
use super::pieces::{self, short_body};
use super::{
    ObjectMeta, ObjectStorage, PutResult, Result, S3Config, StorageError, StorageOp, check_range,
    validate_key, validate_prefix,
};

/// Reads `pieces` of `file` each into its own buffer (not zeroed first: `read_to_end` fills
/// the buffer's spare capacity).
fn read_pieces(
    mut file: &std::fs::File,
    path: &std::path::Path,
    key: &str,
    pieces: Vec<Range<u64>>,
) -> Result<Vec<Bytes>> {
    use std::io::{Read, Seek, SeekFrom};
    let failed = |e: std::io::Error| StorageError::Unavailable {
        op: StorageOp::Get,
        key: key.to_owned(),
        source: format!("read {}: {e}", path.display()).into(),
    };
    let Some(first) = pieces.first() else {
        return Ok(Vec::new());
    };
    file.seek(SeekFrom::Start(first.start)).map_err(failed)?;
    pieces
        .into_iter()
        .map(|piece| {
            let len = piece.end - piece.start;
            let mut buf = Vec::with_capacity(len as usize);
            file.take(len).read_to_end(&mut buf).map_err(failed)?;
            if buf.len() as u64 != len {
                return Err(short_body(key, buf.len() as u64, &piece));
            }
            Ok(Bytes::from(buf))
        })
        .collect()
}

/// [`ObjectStorage`] over any `object_store::ObjectStore`.
#[derive(Debug, Clone)]
pub struct ObjectStoreBackend {
    store: Arc<dyn ObjectStore>,
    root: Root,
    name: String,
}

impl ObjectStoreBackend {
    /// An empty in-memory store (object_store's `InMemory`), for tests.
    pub fn memory() -> Self {
        ObjectStoreBackend {
            store: Arc::new(InMemory::new()),
            root: Root::new("").expect("the empty root is valid"),
            name: "object_store:memory".to_owned(),
        }
    }

    /// A store in the local directory `dir` (created if missing). Every PUT is written to a
    /// temporary file, fsynced and renamed into place, so an acknowledged object survives a crash
    /// and is never seen half-written. Empty directories are removed on delete.
    pub fn local(dir: impl AsRef<std::path::Path>) -> Result<Self> {
        let dir = dir.as_ref();
        let config_err = |message: String, source: Box<dyn std::error::Error + Send + Sync>| {
            StorageError::Config {
                message,
                source: Some(source),
            }
        };
        std::fs::create_dir_all(dir).map_err(|e| {
            config_err(
                format!("cannot create object directory {}", dir.display()),
                Box::new(e),
            )
        })?;
        let fs = LocalFileSystem::new_with_prefix(dir)
            .map_err(|e| {
                config_err(
                    format!("cannot open object directory {}", dir.display()),
                    Box::new(e),
                )
            })?
            // No automatic cleanup of emptied directories: a delete that removes the last object
            // of `wal/{node}/` would remove the directory while a concurrent PUT creates it
            // again and fsyncs it, and that PUT fails with "no such file or directory". Empty
            // directories cost nothing.
            .with_fsync(true);
        Ok(ObjectStoreBackend {
            store: Arc::new(fs),
            root: Root::new("").expect("the empty root is valid"),
            name: format!("object_store:file://{}", dir.display()),
        })
    }

    /// A store in an S3 bucket (or an S3-compatible server's), under `config.prefix`.
    pub fn s3(config: &S3Config) -> Result<Self> {
        let mut builder = match (&config.access_key, &config.secret_key) {
            (Some(ak), Some(sk)) => AmazonS3Builder::new()
                .with_access_key_id(ak)
                .with_secret_access_key(sk),
            (None, None) => AmazonS3Builder::from_env(),
            _ => {
                return Err(StorageError::Config {
                    message: "S3 access_key and secret_key must be given together (or neither, \
                              to use the environment's credentials)"
                        .to_owned(),
                    source: None,
                });
            }
        };
        let retry = RetryConfig {
            max_retries: config.max_retries as usize,
            retry_timeout: Duration::from_secs(120),
            ..RetryConfig::default()
        };
        builder = builder
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_allow_http(config.allow_http)
            .with_virtual_hosted_style_request(!config.uses_path_style())
            .with_retry(retry)
            .with_client_options(
                ClientOptions::new()
                    .with_allow_http(config.allow_http)
                    .with_timeout(config.request_timeout()),
            );
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        builder = match config.put_integrity {
            PutIntegrity::Crc64Nvme => builder
                .with_unsigned_payload(true)
                .with_checksum_algorithm(Checksum::CRC64NVME),
            PutIntegrity::Signed => builder.with_unsigned_payload(false),
            PutIntegrity::None => builder.with_unsigned_payload(true),
        };
        let store = builder.build().map_err(|e| StorageError::Config {
            message: format!("cannot build the S3 client for bucket {:?}", config.bucket),
            source: Some(Box::new(e)),
        })?;
        let root = Root::new(&config.prefix)?;
        let name = format!("object_store:s3://{}/{}", config.bucket, root.as_str());
        Ok(ObjectStoreBackend {
            store: Arc::new(store),
            root,
            name,
        })
    }

    /// Wraps any `object_store` store; every key is placed under `prefix`.
    pub fn from_store(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        name: impl Into<String>,
    ) -> Result<Self> {
        Ok(ObjectStoreBackend {
            store,
            root: Root::new(prefix)?,
            name: name.into(),
        })
    }

    fn path(&self, key: &str) -> Result<Path> {
        validate_key(key)?;
        Path::parse(self.root.join(key)).map_err(|_| StorageError::InvalidKey {
            key: key.to_owned(),
            reason: "is not a valid object_store path",
        })
    }

    async fn put_mode(&self, op: StorageOp, key: &str, data: PutPayload) -> Result<PutResult> {
        let path = self.path(key)?;
        let mode = match op {
            StorageOp::PutIfAbsent => PutMode::Create,
            _ => PutMode::Overwrite,
        };
        let opts = PutOptions {
            mode,
            ..PutOptions::default()
        };
        let res = self
            .store
            .put_opts(&path, data, opts)
            .await
            .map_err(|e| map_error(op, key, e))?;
        Ok(PutResult::new(res.e_tag))
    }

    /// Explains a failed ranged GET: if the object is there and the range starts at or past its
    /// end, the error is an invalid range.
    async fn explain_range_error(
        &self,
        key: &str,
        range: &Range<u64>,
        err: StorageError,
    ) -> StorageError {
        if !matches!(err, StorageError::Other { .. }) {
            return err;
        }
        match self.head(key).await {
            Ok(meta) if range.start >= meta.size => StorageError::InvalidRange {
                key: key.to_owned(),
                range: range.clone(),
                size: Some(meta.size),
            },
            Err(not_found @ StorageError::NotFound { .. }) => not_found,
            _ => err,
        }
    }
}

fn system_time(meta: &os::ObjectMeta) -> Option<SystemTime> {
    let secs = u64::try_from(meta.last_modified.timestamp()).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(
        secs,
        meta.last_modified.timestamp_subsec_nanos(),
    ))
}

/// The HTTP status in an object_store error message (`... status code: 503 ...`).
fn status_in_message(message: &str) -> Option<u16> {
    let at = message.find("status code: ")? + "status code: ".len();
    message.get(at..at + 3)?.parse().ok()
}

/// Translates an object_store error into a [`StorageError`] (see the module doc).
pub(crate) fn map_error(op: StorageOp, key: &str, err: os::Error) -> StorageError {
    let key = key.to_owned();
    match err {
        os::Error::NotFound { .. } => return StorageError::NotFound { key },
        os::Error::Precondition { .. } | os::Error::AlreadyExists { .. }
            if op == StorageOp::PutIfAbsent =>
        {
            return StorageError::Precondition { key, op };
        }
        _ => {}
    }
    enum Kind {
        Throttled,
        Timeout,
        Unavailable,
        Other,
    }
    let mut kind = Kind::Other;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = cur {
        if let Some(http) = e.downcast_ref::<os::client::HttpError>() {
            use os::client::HttpErrorKind as H;
            match http.kind() {
                H::Timeout => {
                    kind = Kind::Timeout;
                    break;
                }
                H::Connect | H::Request | H::Interrupted => {
                    kind = Kind::Unavailable;
                    break;
                }
                _ => {}
            }
        }
        let message = e.to_string();
        if message.contains("SlowDown") {
            kind = Kind::Throttled;
            break;
        }
        match status_in_message(&message) {
            Some(503 | 429) => {
                kind = Kind::Throttled;
                break;
            }
            Some(500 | 502 | 504) => {
                kind = Kind::Unavailable;
                break;
            }
            _ => {}
        }
        cur = e.source();
    }
    let source = Box::new(err);
    match kind {
        Kind::Throttled => StorageError::Throttled { op, key, source },
        Kind::Timeout => StorageError::Timeout { op, key, source },
        Kind::Unavailable => StorageError::Unavailable { op, key, source },
        Kind::Other => StorageError::Other { op, key, source },
    }
}

#[async_trait]
impl ObjectStorage for ObjectStoreBackend {
    fn name(&self) -> &str {
        &self.name
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<PutResult> {
        self.put_mode(StorageOp::Put, key, data.into()).await
    }

    /// The parts as one payload of several chunks: sent in order over HTTP with the
    /// `Content-Length` of their sum, or written one after another to a local file; no copy.
    async fn put_parts(&self, key: &str, parts: Vec<Bytes>) -> Result<PutResult> {
        self.put_mode(StorageOp::Put, key, parts.into_iter().collect())
            .await
    }

    async fn put_if_absent(&self, key: &str, data: Bytes) -> Result<PutResult> {
        self.put_mode(StorageOp::PutIfAbsent, key, data.into())
            .await
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        let path = self.path(key)?;
        let map = |e| map_error(StorageOp::Get, key, e);
        let res = self.store.get(&path).await.map_err(map)?;
        res.bytes().await.map_err(map)
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let path = self.path(key)?;
        check_range(key, &range)?;
        match self.store.get_range(&path, range.clone()).await {
            Ok(bytes) => Ok(bytes),
            Err(e) => {
                let err = map_error(StorageOp::Get, key, e);
                Err(self.explain_range_error(key, &range, err).await)
            }
        }
    }

    async fn get_range_pieces(
        &self,
        key: &str,
        range: Range<u64>,
        piece_len: u64,
    ) -> Result<Vec<Bytes>> {
        let path = self.path(key)?;
        check_range(key, &range)?;
        let options = os::GetOptions {
            range: Some(os::GetRange::Bounded(range.clone())),
            ..Default::default()
        };
        let result = match self.store.get_opts(&path, options).await {
            Ok(result) => result,
            Err(e) => {
                let err = map_error(StorageOp::Get, key, e);
                return Err(self.explain_range_error(key, &range, err).await);
            }
        };
        let pieces = pieces::ranges(&result.range, piece_len);
        let read_error = |e| map_error(StorageOp::Get, key, e);
        match result.payload {
            // A local file: each piece read straight into its own buffer.
            os::GetResultPayload::File(file, file_path) => {
                let file_key = key.to_owned();
                tokio::task::spawn_blocking(move || {
                    read_pieces(&file, &file_path, &file_key, pieces)
                })
                .await
                .map_err(|e| StorageError::Unavailable {
                    op: StorageOp::Get,
                    key: key.to_owned(),
                    source: Box::new(e),
                })?
            }
            // A response body: its chunks copied into the pieces as they arrive (the one copy
            // that joining them into one buffer would make).
            os::GetResultPayload::Stream(mut stream) => {
                let mut filler = pieces::Filler::new(&result.range, piece_len);
                while let Some(chunk) = stream.try_next().await.map_err(read_error)? {
                    filler.push(&chunk);
                }
                filler
                    .finish()
                    .map_err(|got| short_body(key, got, &result.range))
            }
        }
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let path = self.path(key)?;
        let meta = self
            .store
            .head(&path)
            .await
            .map_err(|e| map_error(StorageOp::Head, key, e))?;
        Ok(ObjectMeta::new(key, meta.size, system_time(&meta)))
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        match self.store.delete(&path).await {
            Ok(()) | Err(os::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(map_error(StorageOp::Delete, key, e)),
        }
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        let paths = keys
            .iter()
            .map(|k| self.path(k))
            .collect::<Result<Vec<_>>>()?;
        if paths.is_empty() {
            return Ok(());
        }
        let results: Vec<_> = self
            .store
            .delete_stream(futures::stream::iter(paths.into_iter().map(Ok)).boxed())
            .collect()
            .await;
        for res in results {
            match res {
                Ok(_) | Err(os::Error::NotFound { .. }) => {}
                Err(e) => {
                    let what = format!("{} keys from {:?}", keys.len(), keys[0]);
                    return Err(map_error(StorageOp::DeleteMany, &what, e));
                }
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
        // object_store lists whole path segments; list the enclosing folder and filter.
        let dir = full_prefix
            .rfind('/')
            .map(|at| Path::from_iter(full_prefix[..at].split('/')));
        let metas: Vec<os::ObjectMeta> = self
            .store
            .list(dir.as_ref())
            .try_collect()
            .await
            .map_err(|e| map_error(StorageOp::List, prefix, e))?;
        let mut out: Vec<ObjectMeta> = metas
            .iter()
            .filter(|m| m.location.as_ref().starts_with(full_prefix.as_str()))
            .filter_map(|m| {
                let key = self.root.strip(m.location.as_ref())?;
                Some(ObjectMeta::new(key, m.size, system_time(m)))
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_parsing() {
        assert_eq!(
            status_in_message("Server returned non-2xx status code: 503 Service Unavailable: x"),
            Some(503)
        );
        assert_eq!(status_in_message("no status here"), None);
        assert_eq!(status_in_message("status code: 5"), None);
    }
}
