//! Conformance suite for `mink_s3stream::storage::ObjectStorage`.
//!
//! One set of test bodies (module `cases`), each taking an `Arc<dyn ObjectStorage>`, instantiated
//! by the `conformance!` macro for every backend: object_store in memory, object_store on a local
//! directory, object_store on the S3 server, and aws-sdk-s3 on the S3 server. The S3 backends
//! need `MINK_TEST_S3_ENDPOINT` / `MINK_TEST_S3_BUCKET` (`cargo xtask test` sets them) and fail
//! loudly without them. Every test writes under its own unique root prefix.
//!
//! Files: this one (the backends, the macro, tests about one kind of backend), `cases.rs` (the
//! test bodies), `latency_profile.rs` (the latency model).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mink_s3stream::storage::{
    AwsS3Backend, ObjectStorage, ObjectStoreBackend, S3Config, StorageError,
};
use mink_tests::{S3_ACCESS_KEY_ID, S3_REGION, S3_SECRET_ACCESS_KEY, s3_server, unique_prefix};
use tempfile::TempDir;

/// A backend under test, with whatever must live as long as it.
struct Fixture {
    store: Arc<dyn ObjectStorage>,
    _dir: Option<TempDir>,
}

fn s3_config(test: &str) -> S3Config {
    let server = s3_server();
    S3Config::local_server(
        server.endpoint,
        server.bucket,
        S3_REGION,
        S3_ACCESS_KEY_ID,
        S3_SECRET_ACCESS_KEY,
    )
    .with_prefix(format!("object-storage/{}", unique_prefix(test)))
}

async fn object_store_memory(_test: &str) -> Fixture {
    Fixture {
        store: Arc::new(ObjectStoreBackend::memory()),
        _dir: None,
    }
}

async fn object_store_local(_test: &str) -> Fixture {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let store = ObjectStoreBackend::local(dir.path().join("objects")).expect("open local store");
    Fixture {
        store: Arc::new(store),
        _dir: Some(dir),
    }
}

async fn object_store_s3(test: &str) -> Fixture {
    let store = ObjectStoreBackend::s3(&s3_config(test)).expect("build object_store S3 backend");
    Fixture {
        store: Arc::new(store),
        _dir: None,
    }
}

async fn aws_sdk_s3(test: &str) -> Fixture {
    let store = AwsS3Backend::new(s3_config(test))
        .await
        .expect("build aws-sdk-s3 backend");
    Fixture {
        store: Arc::new(store),
        _dir: None,
    }
}

/// Instantiates every test body in `cases` for one backend constructor.
macro_rules! conformance {
    ($backend:ident) => {
        mod $backend {
            conformance!(@tests $backend:
                put_get_round_trip,
                put_parts_writes_their_concatenation,
                ranged_gets,
                ranged_gets_in_pieces,
                head_reports_size_and_time,
                missing_objects_are_not_found,
                delete_is_idempotent,
                delete_many_deletes_listed_keys,
                delete_many_over_one_request,
                put_if_absent_fails_when_present,
                put_if_absent_has_one_winner,
                list_by_string_prefix,
                overwrite_replaces_object,
                empty_objects,
                large_objects,
                concurrent_puts,
                invalid_keys_are_rejected,
                counting_counts_requests_and_bytes,
                fault_injection_fails_what_it_says,
                fault_injection_rates_are_seeded,
                fault_injection_slow_and_ambiguous_puts
            );
        }
    };
    (@tests $backend:ident: $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let fixture = super::$backend(stringify!($case)).await;
                super::cases::$case(fixture.store.clone()).await;
            }
        )*
    };
}

conformance!(object_store_memory);
conformance!(object_store_local);
conformance!(object_store_s3);
conformance!(aws_sdk_s3);

/// Distinct, position-dependent bytes, so a misplaced range is detected.
fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i % 251) as u8 ^ seed)
        .collect::<Vec<u8>>()
        .into()
}

mod cases;

// ---- Tests that are about one kind of backend rather than the trait's contract. ----

/// Two stores on one bucket under different root prefixes never see each other's objects, and
/// both S3 backends lay keys out the same way, so either can read what the other wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_root_prefixes_keep_stores_apart_and_backends_agree() {
    let config_a = s3_config("prefix-a");
    let config_b = s3_config("prefix-b");
    let a = ObjectStoreBackend::s3(&config_a).unwrap();
    let a_aws = AwsS3Backend::new(config_a).await.unwrap();
    let b = AwsS3Backend::new(config_b).await.unwrap();
    a.put("same/key", pattern(10, 1)).await.unwrap();
    b.put("same/key", pattern(20, 2)).await.unwrap();
    assert_eq!(a.get("same/key").await.unwrap(), pattern(10, 1));
    assert_eq!(b.get("same/key").await.unwrap(), pattern(20, 2));
    assert_eq!(a.list("").await.unwrap().len(), 1);
    // The aws-sdk backend with a's prefix sees a's object, and vice versa.
    assert_eq!(a_aws.get("same/key").await.unwrap(), pattern(10, 1));
    a_aws.put("other", pattern(5, 3)).await.unwrap();
    assert_eq!(a.head("other").await.unwrap().size, 5);
    a.delete_many(&["same/key".into(), "other".into()])
        .await
        .unwrap();
    assert!(a_aws.list("").await.unwrap().is_empty());
    b.delete("same/key").await.unwrap();
}

mod latency_profile;
