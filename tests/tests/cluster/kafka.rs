//! Two nodes serving Kafka: Metadata lists both brokers and each partition under the node that
//! owns its bucket; kcat, bootstrapped from one node only, produces to every partition and
//! consumes them all (librdkafka follows the leaders), and a consumer group works through its
//! coordinator wherever that is, resuming from its commits.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;

use super::harness::Cluster;

async fn kcat(args: Vec<String>) -> String {
    let run = tokio::task::spawn_blocking(move || {
        let all: Vec<&str> = args.iter().map(String::as_str).collect();
        mink_tests::run_client(&mink_tests::kcat(), &all, Duration::from_secs(60))
    })
    .await
    .unwrap()
    .expect("kcat starts");
    assert!(run.success, "kcat failed:\n{}\n{}", run.stdout, run.stderr);
    run.stdout
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_clients_follow_partition_leaders_across_nodes() {
    const BUCKETS: u32 = 4;
    let cluster = Cluster::start_serving_kafka("cluster-kafka", 2).await;
    let headers_type = r#"List(non-null Struct("key": non-null Utf8, "value": Binary))"#;
    let created = cluster
        .http
        .post(format!("{}/v1/tables", cluster.url(0)))
        .json(
            &json!({"name": "kt", "buckets": BUCKETS, "schema": {"fields": [
                {"name": "key", "type": "binary"},
                {"name": "value", "type": "binary"},
                {"name": "headers", "type": headers_type, "nullable": false},
                {"name": "timestamp", "type": "timestamp_ms", "nullable": false},
            ]}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let owners = cluster.owners(0, "kt").await;
    assert_eq!(owners.len(), BUCKETS as usize);
    assert_eq!(
        owners.values().collect::<BTreeSet<_>>().len(),
        2,
        "buckets spread over both nodes: {owners:?}"
    );
    let bootstrap = format!("127.0.0.1:{}", cluster.kafka[0]);

    // Both brokers, and each partition led by its bucket's owner.
    let listing = kcat(strings(&["-b", &bootstrap, "-L", "-t", "kt"])).await;
    assert!(listing.contains(" 2 brokers:"), "{listing}");
    let leaders: BTreeMap<u32, String> = listing
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("partition ")?;
            let (partition, rest) = rest.split_once(", leader ")?;
            let leader = rest.split(',').next()?;
            Some((partition.parse().ok()?, leader.to_owned()))
        })
        .collect();
    assert_eq!(leaders.len(), BUCKETS as usize, "{listing}");
    for a in 0..BUCKETS {
        for b in 0..BUCKETS {
            assert_eq!(
                owners[&a] == owners[&b],
                leaders[&a] == leaders[&b],
                "leaders follow owners: {owners:?} {leaders:?}"
            );
        }
    }
    for (n, port) in cluster.kafka.iter().enumerate() {
        assert!(
            listing.contains(&format!("at 127.0.0.1:{port}")),
            "node {n}'s broker is listed:\n{listing}"
        );
    }

    // Produce to every partition through the one bootstrap address.
    let dir = tempfile::tempdir().unwrap();
    for partition in 0..BUCKETS {
        let file = dir.path().join(format!("p{partition}"));
        let body: String = (0..5).map(|i| format!("k{partition}-{i}:v\n")).collect();
        std::fs::write(&file, body).unwrap();
        kcat(strings(&[
            "-b",
            &bootstrap,
            "-P",
            "-t",
            "kt",
            "-p",
            &partition.to_string(),
            "-K",
            ":",
            "-X",
            "enable.idempotence=true",
            "-l",
            file.to_str().unwrap(),
        ]))
        .await;
    }
    let consumed = kcat(strings(&[
        "-b",
        &bootstrap,
        "-C",
        "-t",
        "kt",
        "-o",
        "beginning",
        "-e",
        "-f",
        "%p %k\\n",
    ]))
    .await;
    let mut seen: Vec<String> = consumed.lines().map(str::to_owned).collect();
    seen.sort();
    let mut expected: Vec<String> = (0..BUCKETS)
        .flat_map(|p| (0..5).map(move |i| format!("{p} k{p}-{i}")))
        .collect();
    expected.sort();
    assert_eq!(seen, expected);

    // A consumer group, through whichever node coordinates it; its commits hold.
    let group = |name: &str| {
        strings(&[
            "-b",
            &bootstrap,
            "-G",
            name,
            "-X",
            "auto.offset.reset=earliest",
            "-e",
            "-f",
            "%k\\n",
            "kt",
        ])
    };
    // Several groups: their coordinators spread over the nodes (rendezvous hashing).
    for name in ["ga", "gb", "gc", "gd"] {
        let first = kcat(group(name)).await;
        assert_eq!(first.lines().count(), 20, "{name}: {first}");
        let again = kcat(group(name)).await;
        assert_eq!(again.trim(), "", "{name} resumes from its commits");
    }
}
