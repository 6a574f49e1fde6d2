"""The Kafka item of `cargo xtask bench` (tests/src/bin/mink_bench/items/kafka.rs): a
librdkafka producer (confluent-kafka) and consumer against a Mink node's Kafka port. Prints one
JSON document.

    kafka_bench.py produce BROKER TOPIC SECONDS SIZE RATE INFLIGHT IDEMPOTENT
        a producer (idempotent when IDEMPOTENT is 1), acks=all, SIZE-byte values to
        partition 0 for SECONDS, at most RATE messages a second (0: as fast as it can),
        INFLIGHT requests in flight per connection: messages, bytes, seconds, and each
        message's produce-to-acknowledgement latency (p50, p99, p999 in ms). librdkafka's
        idempotent producer keeps one ProduceRequest in flight whatever INFLIGHT says.
    kafka_bench.py consume BROKER TOPIC COUNT
        reads partition 0 from the beginning until COUNT messages: messages, bytes, seconds
"""

import json
import sys
import time


def percentile(sorted_values, p):
    if not sorted_values:
        return 0.0
    index = max(0, min(len(sorted_values) - 1, int(len(sorted_values) * p + 0.999999) - 1))
    return sorted_values[index]


def produce(broker, topic, seconds, size, rate, inflight, idempotent):
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": broker,
        "enable.idempotence": idempotent,
        "max.in.flight.requests.per.connection": inflight,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1048576,
        "queue.buffering.max.kbytes": 65536,
    })
    latencies = []
    failed = []

    def report(err, msg):
        if err is not None:
            failed.append(str(err))
        else:
            latencies.append(msg.latency() * 1000.0)

    value = b"v" * size
    # Warmed up first: connected, producer id taken, metadata known (startup is not measured).
    warm_start = time.time()
    producer.produce(topic, value=value, key=b"warm-up", partition=0)
    producer.flush(60)
    warm_up_ms = (time.time() - warm_start) * 1000.0
    started = time.time()
    sent = 0
    while time.time() - started < seconds:
        if rate > 0:
            due = started + sent / rate
            pause = due - time.time()
            if pause > 0:
                producer.poll(min(pause, 0.01))
                continue
        try:
            producer.produce(topic, value=value, key=b"%d" % sent, partition=0,
                             on_delivery=report)
            sent += 1
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    elapsed = time.time() - started
    latencies.sort()
    import confluent_kafka
    return {
        "librdkafka": confluent_kafka.libversion()[0],
        "messages": len(latencies),
        "bytes": len(latencies) * size,
        "seconds": elapsed,
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "p999_ms": percentile(latencies, 0.999),
        "warm_up_ms": warm_up_ms,
        "failed": failed[:3],
    }


def consume(broker, topic, count):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": broker,
        "group.id": "bench-replay",
        "enable.auto.commit": False,
        "fetch.max.bytes": 52428800,
        "max.partition.fetch.bytes": 16777216,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    read = 0
    size = 0
    started = time.time()
    while read < count and time.time() - started < 300:
        for msg in consumer.consume(num_messages=10000, timeout=1.0):
            if msg.error() is None:
                read += 1
                size += len(msg.value() or b"")
    elapsed = time.time() - started
    consumer.close()
    return {"messages": read, "bytes": size, "seconds": elapsed}


def main():
    phase, broker, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    if phase == "produce":
        out = produce(broker, topic, float(sys.argv[4]), int(sys.argv[5]),
                      float(sys.argv[6]), int(sys.argv[7]), sys.argv[8] == "1")
    elif phase == "consume":
        out = consume(broker, topic, int(sys.argv[4]))
    else:
        raise SystemExit("unknown phase " + phase)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
