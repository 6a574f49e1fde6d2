//! confluent-kafka (librdkafka inside) and kafka-python against the Kafka front end of a node
//! on local files (tests/clients/kafka_clients.py): topics made and deleted with the admin
//! client, an idempotent producer that keeps producing while the node restarts, a group of two
//! consumers splitting the partitions and committing, the node restarted again before the group
//! resumes from its commits: every record read exactly once, in order per partition, keys and
//! headers intact, and the same rows over HTTP (NDJSON and Arrow). The admin client's operator calls (configs,
//! records deleted, the cluster, the group and its offsets). kafka-python produces, consumes
//! and asks for offsets by time.

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mink_metadata::RedbKv;
use mink_s3stream::storage::ObjectStoreBackend;
use mink_server::{Node, Settings};
use serde_json::{Value, json};

/// A node on local files in `dir`, its Kafka port at `kafka` (`:0` for any).
async fn start(dir: &Path, kafka: SocketAddr) -> Node {
    let mut s = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    s.flight.listen = None;
    s.kafka.listen = Some(kafka);
    // Both consumers of the group join its first generation.
    s.kafka.group_initial_rebalance_delay = Duration::from_millis(1500);
    let store = ObjectStoreBackend::local(dir.join("objects")).unwrap();
    let kv = RedbKv::open(dir.join("meta.redb")).unwrap();
    Node::builder()
        .settings(s)
        .object_store(Arc::new(store))
        .metadata(Arc::new(kv))
        .start()
        .await
        .unwrap()
}

/// Runs one phase of the script; its progress lines come through `progress` as they are
/// printed, its last line is returned as JSON.
async fn phase(
    args: Vec<String>,
    progress: Option<tokio::sync::mpsc::UnboundedSender<String>>,
) -> Value {
    let script = mink_tests::client_script("kafka_clients.py");
    let run = tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new(mink_tests::python())
            .arg(script)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python starts");
        let stderr = child.stderr.take().unwrap();
        let errors =
            std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
        let mut last = String::new();
        for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap_or_default();
            if let (Some(tx), true) = (&progress, line.starts_with("progress ")) {
                let _ = tx.send(line.clone());
            }
            last = line;
        }
        let status = child.wait().unwrap();
        (
            status.success(),
            last,
            errors.join().unwrap_or_default(),
            args,
        )
    });
    let (ok, last, errors, args) = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the client finishes within 4 minutes")
        .unwrap();
    assert!(ok, "kafka_clients.py {args:?} failed:\n{last}\n{errors}");
    serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {last}\n{errors}"))
}

/// A JSON answer over HTTP.
async fn get_json(http: &reqwest::Client, url: String) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluent_kafka_and_kafka_python_through_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = start(dir.path(), "127.0.0.1:0".parse().unwrap()).await;
    let kafka = node.kafka_addr().expect("kafka listens");
    let broker = kafka.to_string();

    let admin = phase(args(&["admin", &broker]), None).await;
    assert_eq!(admin["partitions"]["orders"], 2, "{admin}");
    assert_eq!(admin["again"], "TOPIC_ALREADY_EXISTS", "{admin}");
    assert_eq!(admin["compacted"], "INVALID_CONFIG", "{admin}");
    assert_eq!(admin["deleted_scratch"], true, "{admin}");
    assert_eq!(admin["missing"], "UNKNOWN_TOPIC_OR_PART", "{admin}");
    let http = reqwest::Client::new();
    let table: Value = get_json(&http, format!("{}/v1/tables/orders", node.url())).await;
    assert_eq!(table["buckets"], 2, "{table}");
    assert_eq!(
        table["retention"]["policy"]["age_ms"], 86_400_000,
        "{table}"
    );
    let scratch = http
        .get(format!("{}/v1/tables/scratch", node.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(scratch.status(), 404);

    // An idempotent producer; the node restarts while it produces.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let producing = tokio::spawn(phase(
        args(&["produce", &broker, "orders", "0", "600"]),
        Some(tx),
    ));
    assert_eq!(rx.recv().await.as_deref(), Some("progress half"));
    node.shutdown().await.unwrap();
    node = start(dir.path(), kafka).await;
    let produced = producing.await.unwrap();
    assert_eq!(produced["errors"], json!([]), "{produced}");
    assert_eq!(produced["delivered"].as_array().unwrap().len(), 600);

    // Two consumers of one group, then a restart, more records, and the group again.
    let first = phase(args(&["consume", &broker, "orders", "g", "600"]), None).await;
    let assigned = first["assigned"].as_object().unwrap();
    assert_eq!(assigned.len(), 2, "each consumer gets a partition: {first}");
    node.shutdown().await.unwrap();
    node = start(dir.path(), kafka).await;
    let more = phase(args(&["produce", &broker, "orders", "600", "100"]), None).await;
    assert_eq!(more["delivered"].as_array().unwrap().len(), 100, "{more}");
    let second = phase(args(&["consume", &broker, "orders", "g", "100"]), None).await;

    // Every record once, in offset order per partition, as produced.
    let mut by_partition: BTreeMap<u64, Vec<(u64, String)>> = BTreeMap::new();
    for phase in [&first, &second] {
        for record in phase["records"].as_array().unwrap() {
            let partition = record[0].as_u64().unwrap();
            let key = record[2].as_str().unwrap().to_owned();
            let n: u64 = key[1..].parse().unwrap();
            assert_eq!(partition, n % 2, "{record}");
            assert_eq!(record[3], format!("v{n:05}"));
            assert_eq!(record[4], json!([["n", n.to_string()], ["n", "again"]]));
            by_partition
                .entry(partition)
                .or_default()
                .push((record[1].as_u64().unwrap(), key));
        }
    }
    for (partition, records) in &by_partition {
        let offsets: Vec<u64> = records.iter().map(|r| r.0).collect();
        assert_eq!(
            offsets,
            (0..350).collect::<Vec<_>>(),
            "partition {partition}: each offset once, in order"
        );
        let keys: Vec<&String> = records.iter().map(|r| &r.1).collect();
        let expected: Vec<String> = (0..700)
            .filter(|n| n % 2 == *partition)
            .map(|n| format!("k{n:05}"))
            .collect();
        assert_eq!(keys, expected.iter().collect::<Vec<_>>());
    }
    // The same rows over HTTP.
    let rows = http
        .get(format!(
            "{}/v1/tables/orders/buckets/1/records?offset=0",
            node.url()
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(rows.lines().count(), 350, "{rows}");
    let first: Value = serde_json::from_str(rows.lines().next().unwrap()).unwrap();
    // NDJSON shows binary columns as hex: key "k00001".
    assert_eq!(first["key"], "6b3030303031", "{first}");
    // And as Arrow: the Kafka schema's columns, the keys and values as produced.
    let arrow = http
        .get(format!(
            "{}/v1/tables/orders/buckets/1/records?offset=0",
            node.url()
        ))
        .header("accept", "application/vnd.apache.arrow.stream")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(arrow), None)
        .expect("an Arrow IPC stream");
    let mut keys = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let key = batch
            .column_by_name("key")
            .expect("a key column")
            .as_any()
            .downcast_ref::<arrow_array::BinaryArray>()
            .expect("binary keys")
            .clone();
        let value = batch
            .column_by_name("value")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::BinaryArray>()
            .unwrap()
            .clone();
        for i in 0..batch.num_rows() {
            let (k, v) = (
                String::from_utf8_lossy(key.value(i)).into_owned(),
                String::from_utf8_lossy(value.value(i)).into_owned(),
            );
            assert_eq!(v, format!("v{}", &k[1..]));
            keys.push(k);
        }
    }
    let expected: Vec<String> = (0..700)
        .filter(|n| n % 2 == 1)
        .map(|n| format!("k{n:05}"))
        .collect();
    assert_eq!(keys, expected, "the rows of bucket 1 over Arrow, in order");

    // What operators' tools call: configs, records deleted, the cluster, the group.
    let ops = phase(args(&["operators", &broker, "orders", "g"]), None).await;
    assert_eq!(
        ops["configs"]["retention.ms"],
        json!(["86400000", 1]),
        "{ops}"
    );
    assert_eq!(
        ops["altered"]["retention.bytes"],
        json!(["1073741824", 1]),
        "{ops}"
    );
    assert_eq!(ops["bad"], "INVALID_CONFIG", "{ops}");
    assert_eq!(ops["broker_auto_create"], "false", "{ops}");
    assert_eq!(ops["low_watermark"], 10, "{ops}");
    assert_eq!(ops["cluster"][0], "mink", "{ops}");
    assert_eq!(ops["cluster"][1], 1, "one broker: {ops}");
    assert_eq!(ops["groups"], json!(["g"]), "{ops}");
    assert_eq!(ops["group_state"], "EMPTY", "{ops}");
    assert_eq!(
        ops["committed"],
        json!([["orders", 0, 350], ["orders", 1, 350]]),
        "{ops}"
    );
    let table: Value = get_json(&http, format!("{}/v1/tables/orders", node.url())).await;
    assert_eq!(
        table["retention"]["policy"]["bytes"], 1_073_741_824,
        "{table}"
    );
    let offsets: Value = get_json(
        &http,
        format!("{}/v1/tables/orders/buckets/0/offsets", node.url()),
    )
    .await;
    assert_eq!(offsets["log_start"], 10, "{offsets}");

    // kafka-python: produce, read back, offsets by time (none after the newest record).
    let create = phase(args(&["admin-create", &broker, "kp"]), None).await;
    assert_eq!(create["created"], true, "{create}");
    let kp = phase(args(&["kafka-python", &broker, "kp"]), None).await;
    assert_eq!(kp["offsets"], json!([0, 1, 2, 3, 4]), "{kp}");
    assert_eq!(kp["read"].as_array().unwrap().len(), 5, "{kp}");
    assert_eq!(kp["read"][4], json!([4, "kp4", "value 4"]));
    assert_eq!(kp["by_time"], 0, "{kp}");
    assert_eq!(kp["future"], Value::Null, "{kp}");
    assert_eq!(kp["end"], 5, "{kp}");
    node.shutdown().await.unwrap();
}
