//! kcat's balanced consumer (`-G`, librdkafka's group protocol) against the Kafka front end:
//! a topic created on first produce, two consumers of one group splitting its partitions,
//! committed offsets that a later consumer of the group resumes from, and a group of its own
//! that starts again from the beginning.

use std::collections::BTreeSet;
use std::time::Duration;

use super::kcat::kcat;

/// One balanced consumer of `group` that reads `topic` from the committed offsets (or the
/// beginning) until every partition it is assigned is at its end; "partition offset key"
/// lines.
fn consume_args(broker: &str, group: &str, topic: &str) -> Vec<String> {
    [
        "-b",
        broker,
        "-G",
        group,
        "-X",
        "auto.offset.reset=earliest",
        "-e",
        "-f",
        "%p %o %k\\n",
        topic,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The sum of `mink_kafka_consumer_lag` over the partitions of `group`.
async fn lag(node: &mink_server::Node, group: &str) -> u64 {
    let text = reqwest::get(format!("{}/metrics", node.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("mink_kafka_requests_total{api=\"JoinGroup\"}"),
        "{text}"
    );
    let series: Vec<u64> = text
        .lines()
        .filter(|l| {
            l.starts_with("mink_kafka_consumer_lag{") && l.contains(&format!("group=\"{group}\""))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(series.len(), 2, "one series per partition:\n{text}");
    series.iter().sum()
}

fn lines(out: &str) -> Vec<String> {
    out.lines().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_groups_split_partitions_and_resume_from_committed_offsets() {
    let node = super::memory_node(|s| {
        s.kafka.listen = Some("127.0.0.1:0".parse().unwrap());
        s.kafka.auto_create_topics = true;
        s.kafka.default_partitions = 2;
        // Both consumers below join before the first generation completes.
        s.kafka.group_initial_rebalance_delay = Duration::from_millis(1500);
    })
    .await;
    let broker = node.kafka_addr().expect("kafka listens").to_string();
    let dir = tempfile::tempdir().unwrap();
    let produce = |keys: std::ops::Range<u32>, name: &str| {
        let file = dir.path().join(name);
        let body: String = keys.map(|i| format!("k{i}:v{i}\n")).collect();
        std::fs::write(&file, body).unwrap();
        [
            "-b",
            &broker,
            "-P",
            "-t",
            "orders",
            "-K",
            ":",
            "-X",
            "enable.idempotence=true",
            "-l",
            file.to_str().unwrap(),
        ]
        .map(str::to_owned)
        .to_vec()
    };
    // The topic does not exist: the first produce creates it with two partitions.
    kcat(produce(0..20, "first")).await;
    let listing = kcat(vec!["-b".into(), broker.clone(), "-L".into()]).await;
    assert!(
        listing.contains("topic \"orders\" with 2 partitions"),
        "{listing}"
    );

    // Two consumers of one group: each partition goes to one of them, every record is read
    // once.
    let (a, b) = tokio::join!(
        kcat(consume_args(&broker, "shared", "orders")),
        kcat(consume_args(&broker, "shared", "orders"))
    );
    let (a, b) = (lines(&a), lines(&b));
    let partitions = |l: &[String]| -> BTreeSet<String> {
        l.iter()
            .map(|x| x.split(' ').next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(a.len() + b.len(), 20, "a: {a:?}\nb: {b:?}");
    assert_eq!(partitions(&a).len(), 1, "{a:?}");
    assert_eq!(partitions(&b).len(), 1, "{b:?}");
    assert!(partitions(&a).is_disjoint(&partitions(&b)));
    let keys: BTreeSet<String> = a
        .iter()
        .chain(&b)
        .map(|l| l.rsplit(' ').next().unwrap().to_owned())
        .collect();
    assert_eq!(keys, (0..20).map(|i| format!("k{i}")).collect());

    // Their offsets were committed: the group now reads only what is new, and /metrics shows
    // it behind by those records.
    assert_eq!(lag(&node, "shared").await, 0);
    kcat(produce(20..23, "second")).await;
    assert_eq!(lag(&node, "shared").await, 3);
    let resumed = lines(&kcat(consume_args(&broker, "shared", "orders")).await);
    let mut keys: Vec<String> = resumed
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().to_owned())
        .collect();
    keys.sort();
    assert_eq!(keys, ["k20", "k21", "k22"], "{resumed:?}");
    assert_eq!(lag(&node, "shared").await, 0);
    // And once more: nothing left.
    let done = kcat(consume_args(&broker, "shared", "orders")).await;
    assert_eq!(done.trim(), "", "{done}");

    // Another group has no commits: it reads everything, in order within each partition.
    let fresh = lines(&kcat(consume_args(&broker, "other", "orders")).await);
    assert_eq!(fresh.len(), 23);
    for partition in ["0", "1"] {
        let offsets: Vec<u64> = fresh
            .iter()
            .filter(|l| l.starts_with(&format!("{partition} ")))
            .map(|l| l.split(' ').nth(1).unwrap().parse().unwrap())
            .collect();
        assert_eq!(offsets, (0..offsets.len() as u64).collect::<Vec<_>>());
    }
    node.shutdown().await.unwrap();
}
