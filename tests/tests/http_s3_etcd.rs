//! The end-to-end HTTP suite of `mink-server` (server/tests/suite) against a real S3 server and
//! etcd: the node keeps WAL and data objects in the test bucket under a unique prefix and its
//! metadata in etcd under a unique prefix.

#[path = "../../server/tests/suite/mod.rs"]
#[macro_use]
mod suite;

use mink_s3stream::storage::S3Config;
use mink_server::Settings;
use mink_server::settings::{MetadataBackend, MetadataSettings, StorageBackend, StorageSettings};
use suite::Backend;

fn s3_etcd(test: &str) -> Backend {
    let s3 = mink_tests::s3_server();
    let prefix = mink_tests::unique_prefix(&format!("http-{test}"));
    let settings = Settings {
        storage: StorageSettings {
            backend: StorageBackend::S3,
            s3: S3Config::local_server(
                s3.endpoint,
                s3.bucket,
                mink_tests::S3_REGION,
                mink_tests::S3_ACCESS_KEY_ID,
                mink_tests::S3_SECRET_ACCESS_KEY,
            )
            .with_prefix(prefix.clone()),
            ..StorageSettings::default()
        },
        metadata: MetadataSettings {
            backend: MetadataBackend::Etcd,
            etcd_endpoints: mink_tests::etcd_endpoints(),
            etcd_prefix: format!("{prefix}/"),
            ..MetadataSettings::default()
        },
        ..Settings::default()
    };
    Backend {
        settings,
        dir: None,
    }
}

http_suite!(s3_etcd);
