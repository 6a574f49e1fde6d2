//! The stores the in-process benches run on, by name: `local` (object_store on a local
//! directory), `moto` (the S3 server named by `MINK_TEST_S3_ENDPOINT` / `MINK_TEST_S3_BUCKET`,
//! under a prefix of this process), `s3-standard` / `s3-express` (memory behind the latency
//! model of that S3 class).

use std::sync::Arc;

use mink_s3stream::storage::{
    LatencyProfile, LatencyStorage, ObjectStorage, ObjectStoreBackend, S3Config,
};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The store named `name`; `dir` is where `local` keeps its files.
pub(crate) fn store(name: &str, dir: &std::path::Path) -> Result<Arc<dyn ObjectStorage>, Error> {
    Ok(match name {
        "local" => Arc::new(ObjectStoreBackend::local(dir)?),
        "moto" => {
            let endpoint = std::env::var("MINK_TEST_S3_ENDPOINT")
                .map_err(|_| "MINK_TEST_S3_ENDPOINT is not set (run through cargo xtask bench)")?;
            let bucket =
                std::env::var("MINK_TEST_S3_BUCKET").unwrap_or_else(|_| "mink-test".into());
            let config = S3Config::local_server(
                endpoint,
                bucket,
                "us-east-1",
                "mink-test",
                "mink-test-secret",
            )
            .with_prefix(format!("bench-{}", std::process::id()));
            Arc::new(ObjectStoreBackend::s3(&config)?)
        }
        "s3-standard" => Arc::new(LatencyStorage::new(
            Arc::new(ObjectStoreBackend::memory()),
            LatencyProfile::s3_standard(),
            42,
        )),
        "s3-express" => Arc::new(LatencyStorage::new(
            Arc::new(ObjectStoreBackend::memory()),
            LatencyProfile::s3_express_one_zone(),
            42,
        )),
        other => return Err(format!("unknown store {other}").into()),
    })
}
