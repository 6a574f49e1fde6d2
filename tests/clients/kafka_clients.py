"""Kafka clients users run (confluent-kafka, with librdkafka inside, and kafka-python)
against a Mink node's Kafka port. Driven by tests/tests/clients/kafka_clients.rs, one phase
per run; each prints one JSON document on its last line (progress lines before it start with
"progress ").

    kafka_clients.py admin BROKER            CreateTopics/DeleteTopics through the admin client
    kafka_clients.py admin-create BROKER TOPIC
                                             one topic of one partition
    kafka_clients.py produce BROKER TOPIC FIRST COUNT
                                             an idempotent producer, acks=all, keys and headers
    kafka_clients.py consume BROKER TOPIC GROUP COUNT
                                             two consumers of GROUP until COUNT records are read
    kafka_clients.py operators BROKER TOPIC GROUP
                                             configs, records deleted, the cluster, groups
    kafka_clients.py kafka-python BROKER TOPIC
                                             kafka-python: produce, consume, offsets by time
"""

import json
import sys
import threading
import time


def admin(broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    client = AdminClient({"bootstrap.servers": broker})
    out = {}
    futures = client.create_topics(
        [
            NewTopic("orders", num_partitions=2, replication_factor=1,
                     config={"retention.ms": "86400000"}),
            NewTopic("scratch", num_partitions=1, replication_factor=1),
        ],
        operation_timeout=10,
    )
    for name, future in futures.items():
        future.result(timeout=30)
        out["created_" + name] = True
    metadata = client.list_topics(timeout=10)
    out["partitions"] = {
        name: len(t.partitions) for name, t in metadata.topics.items()
    }
    # Created twice: the second answer is TOPIC_ALREADY_EXISTS.
    again = client.create_topics([NewTopic("orders", 2, 1)])["orders"]
    try:
        again.result(timeout=30)
        out["again"] = "created"
    except KafkaException as e:
        out["again"] = e.args[0].name()
    # A config Mink does not serve is refused by name.
    bad = client.create_topics(
        [NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"})]
    )["compacted"]
    try:
        bad.result(timeout=30)
        out["compacted"] = "created"
    except KafkaException as e:
        out["compacted"] = e.args[0].name()
    for name, future in client.delete_topics(["scratch"], operation_timeout=10).items():
        future.result(timeout=30)
        out["deleted_" + name] = True
    missing = client.delete_topics(["never-was"])["never-was"]
    try:
        missing.result(timeout=30)
        out["missing"] = "deleted"
    except KafkaException as e:
        out["missing"] = e.args[0].name()
    return out


def admin_create(broker, topic):
    from confluent_kafka.admin import AdminClient, NewTopic

    client = AdminClient({"bootstrap.servers": broker})
    client.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    return {"created": True}


def produce(broker, topic, first, count):
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": broker,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "lz4",
        # Through a node restart: keep retrying until it is back.
        "message.timeout.ms": 120000,
        "reconnect.backoff.max.ms": 500,
    })
    delivered = []
    errors = []

    def report(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append([msg.partition(), msg.offset(), msg.key().decode()])

    for i in range(first, first + count):
        key = "k%05d" % i
        producer.produce(
            topic,
            key=key,
            value=("v%05d" % i).encode(),
            partition=i % 2,
            headers=[("n", str(i).encode()), ("n", b"again")],
            on_delivery=report,
        )
        producer.poll(0)
        if (i - first) == count // 2:
            producer.flush(60)
            # The test restarts the node now, while the rest is produced.
            print("progress half", flush=True)
    left = producer.flush(120)
    return {"delivered": delivered, "errors": errors, "left": left}


def consume(broker, topic, group, count):
    from confluent_kafka import Consumer

    records = []
    assigned = {}
    lock = threading.Lock()
    deadline = time.time() + 90

    def run(name):
        consumer = Consumer({
            "bootstrap.servers": broker,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
        })

        def on_assign(c, partitions):
            with lock:
                assigned.setdefault(name, []).extend(p.partition for p in partitions)

        consumer.subscribe([topic], on_assign=on_assign)
        while time.time() < deadline:
            with lock:
                if len(records) >= count:
                    break
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            # Committed before it counts: a record is read once even across rebalances.
            consumer.commit(message=msg, asynchronous=False)
            with lock:
                records.append([
                    msg.partition(), msg.offset(), msg.key().decode(),
                    msg.value().decode(),
                    [[k, v.decode()] for k, v in (msg.headers() or [])], name,
                ])
        consumer.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"records": records, "assigned": assigned}


def operators(broker, topic, group):
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
    from confluent_kafka.admin import (
        AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType,
    )

    client = AdminClient({"bootstrap.servers": broker})
    out = {}

    def configs():
        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries = client.describe_configs([resource])[resource].result(timeout=30)
        return {name: [e.value, int(e.source)] for name, e in entries.items()}

    out["configs"] = configs()
    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", "1073741824",
                    incremental_operation=AlterConfigOpType.SET),
    ])
    client.incremental_alter_configs([change])[change].result(timeout=30)
    out["altered"] = configs()
    bad = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.insync.replicas", "2", incremental_operation=AlterConfigOpType.SET),
    ])
    try:
        client.incremental_alter_configs([bad])[bad].result(timeout=30)
        out["bad"] = "altered"
    except KafkaException as e:
        out["bad"] = e.args[0].name()
    tp = TopicPartition(topic, 0, 10)
    deleted = client.delete_records([tp])[tp].result(timeout=30)
    out["low_watermark"] = deleted.low_watermark
    cluster = client.describe_cluster().result(timeout=30)
    out["cluster"] = [cluster.cluster_id, len(cluster.nodes), cluster.controller.id]
    # A broker's configs are asked of that broker, by its id.
    broker_resource = ConfigResource(ResourceType.BROKER, str(cluster.controller.id))
    broker_configs = client.describe_configs([broker_resource])[broker_resource].result(timeout=30)
    out["broker_auto_create"] = broker_configs["auto.create.topics.enable"].value
    listed = client.list_consumer_groups().result(timeout=30)
    out["groups"] = sorted(g.group_id for g in listed.valid)
    described = client.describe_consumer_groups([group])[group].result(timeout=30)
    out["group_state"] = described.state.name
    offsets = client.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    out["committed"] = sorted(
        [p.topic, p.partition, p.offset] for p in offsets.topic_partitions)
    return out


def kafka_python(broker, topic):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=broker, acks="all")
    before = int(time.time() * 1000) - 1
    offsets = []
    for i in range(5):
        meta = producer.send(topic, key=b"kp%d" % i, value=b"value %d" % i,
                             partition=0).get(timeout=30)
        offsets.append(meta.offset)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker, consumer_timeout_ms=3000,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    read = [[m.offset, m.key.decode(), m.value.decode()] for m in consumer]
    by_time = consumer.offsets_for_times({tp: before})[tp]
    future = consumer.offsets_for_times({tp: int(time.time() * 1000) + 3600_000})[tp]
    end = consumer.end_offsets([tp])[tp]
    consumer.close()
    return {
        "offsets": offsets,
        "read": read,
        "by_time": by_time.offset if by_time else None,
        "future": future.offset if future else None,
        "end": end,
    }


def main():
    phase, broker = sys.argv[1], sys.argv[2]
    if phase == "admin":
        out = admin(broker)
    elif phase == "admin-create":
        out = admin_create(broker, sys.argv[3])
    elif phase == "produce":
        out = produce(broker, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif phase == "consume":
        out = consume(broker, sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif phase == "operators":
        out = operators(broker, sys.argv[3], sys.argv[4])
    elif phase == "kafka-python":
        out = kafka_python(broker, sys.argv[3])
    else:
        raise SystemExit("unknown phase " + phase)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
