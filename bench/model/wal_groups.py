#!/usr/bin/env python3
"""A discrete-event model of the WAL writer's group commit under a closed load.

`CLIENTS` writers each keep one append of `APPEND` bytes in flight; after an acknowledgement a
writer sends its next append a few milliseconds later. The writer has `SLOTS` PUT slots; a PUT
takes the S3 Standard model's time (log-normal first byte, p50 30 ms / p99 150 ms, plus the
object's size at 90 MB/s per request), hedged as the node hedges (a second request after the
0.95 quantile of the last 128 PUTs, at least 50 ms). Acknowledgements leave in submission order.

Policies of when the open group is sealed while every slot is busy:
  all     at `max_object_bytes` only (the writer before docs/wal-group-split.md)
  cap     at a fixed smaller size
  share   at an even share of the bytes in flight and waiting over the slots, at least a floor
          (the writer now, `min_split_bytes`: 4 MiB by default)

Prints, per policy and load, the throughput, the mean WAL object, raw PUTs with SLOTS in flight
of that size in the same model, their ratio, and the append p50/p99. Used to choose the policy
(docs/wal-group-split.md); the node's own figures come from `mink_bench` item 2.
"""

import heapq
import math
import random
import statistics

Z99 = 2.326347874
SLOTS = 8
APPEND = 64 << 10
MAX_OBJECT = 8 << 20
BANDWIDTH = 90e6
SECONDS = 30.0
WARMUP = 3.0


def lognormal(rng, p50, p99):
    mu = math.log(p50)
    sigma = (math.log(p99) - mu) / Z99
    return math.exp(mu + sigma * rng.gauss(0, 1))


def put_time(rng, size):
    return lognormal(rng, 0.030, 0.150) + size / BANDWIDTH


def run(policy, clients, cap=MAX_OBJECT, floor=1 << 20, seed=1):
    rng = random.Random(seed)
    events, seq = [], 0

    def at(t, kind, data):
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, data))

    for c in range(clients):
        at(rng.uniform(0, 0.01), "submit", c)
    open_group, sealed, groups, done, awaiting = [], [], {}, set(), []
    inflight = inflight_bytes = next_id = acked = 0
    latencies, sizes, recent = [], [], []

    def seal_at():
        if policy == "all" or inflight < SLOTS:
            return MAX_OBJECT
        if policy == "cap":
            return cap
        waiting = inflight_bytes + sum(len(g) for g in sealed) * APPEND + len(open_group) * APPEND
        return min(MAX_OBJECT, max(floor, waiting / SLOTS))

    def dispatch(t):
        nonlocal inflight, inflight_bytes, next_id, open_group
        while inflight < SLOTS and (sealed or open_group):
            if sealed:
                group = sealed.pop(0)
            else:
                group, open_group = open_group, []
            next_id += 1
            inflight += 1
            size = len(group) * APPEND
            inflight_bytes += size
            groups[next_id] = group
            awaiting.append(next_id)
            sizes.append(size)
            took = put_time(rng, size)
            if len(recent) >= 16:
                last = sorted(recent[-128:])
                delay = max(last[int(0.95 * (len(last) - 1))], 0.05)
                if took > delay:
                    took = min(took, delay + put_time(rng, size))
            recent.append(took)
            at(t + took, "done", next_id)

    while events:
        t, _, kind, data = heapq.heappop(events)
        if t > SECONDS:
            break
        if kind == "submit":
            open_group.append((data, t))
            if len(open_group) * APPEND >= seal_at():
                sealed.append(open_group)
                open_group = []
            dispatch(t)
            continue
        inflight -= 1
        inflight_bytes -= len(groups[data]) * APPEND
        done.add(data)
        while awaiting and awaiting[0] in done:
            for client, submitted in groups.pop(awaiting.pop(0)):
                if t > WARMUP:
                    acked += 1
                    latencies.append(t - submitted)
                at(t + rng.uniform(0.002, 0.004), "submit", client)
        dispatch(t)
    latencies.sort()
    return (
        acked * APPEND / (SECONDS - WARMUP) / 1e6,
        statistics.mean(sizes),
        latencies[len(latencies) // 2] * 1000,
        latencies[int(len(latencies) * 0.99)] * 1000,
    )


def raw(size, seed=2):
    rng = random.Random(seed)
    total = 0
    for _ in range(SLOTS):
        t = 0.0
        while t < SECONDS:
            t += put_time(rng, size)
            total += size
    return total / SECONDS / 1e6


if __name__ == "__main__":
    for clients in (64, 256, 1000):
        for name, policy, options in (
            ("all", "all", {}),
            ("cap 2M", "cap", {"cap": 2 << 20}),
            ("share 1M", "share", {"floor": 1 << 20}),
            ("share 4M", "share", {"floor": 4 << 20}),
        ):
            mbps, mean, p50, p99 = run(policy, clients, **options)
            baseline = raw(int(mean))
            print(
                f"{clients:5} writers  {name:8} {mbps:6.1f} MB/s  mean object {mean / 1024:5.0f} KiB"
                f"  raw x{SLOTS} {baseline:6.1f} MB/s  ratio {mbps / baseline:.2f}"
                f"  p50 {p50:4.0f} ms  p99 {p99:4.0f} ms"
            )
