//! Item 13: fan-out. One 1 KiB row appended to a bucket that 1, 100 and 1,000 readers follow,
//! parked at its tail, by SSE and by long-poll: the time from the append's acknowledgement to
//! the last reader holding the row (goal: within 10 ms with 1,000 readers).

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, mpsc, watch};

use crate::lean_http::Connection;
use crate::node::cpu_seconds;
use crate::raw_fanout::RawFanout;
use crate::report::{RUNS, median, pct, signed_ms, spread, verdict};
use crate::rows::{kv_fields, ndjson_row};

use super::Bench;
use crate::Error;

/// The readers of each case.
const READERS: [usize; 3] = [1, 100, 1000];

/// The cases of the bare server (`raw_fanout.rs`).
const FLOOR: &str = "floor: a bare server";

/// One case's figures: per round, the acknowledgement to the median and to the last reader.
struct Case {
    median: Vec<f64>,
    last: Vec<f64>,
    /// Node and driver CPU seconds over the case.
    cpu: (f64, f64),
}

impl Bench {
    /// Item 13: one append -> 1 / 100 / 1,000 parked SSE and long-poll readers.
    pub(crate) async fn fan_out(&mut self) -> Result<(), Error> {
        let rounds = if self.options.quick { 10 } else { 30 };
        self.client.create_table("fanout", kv_fields(), 1).await?;
        let mut next = 0u64;
        // Each run has every case, long-polls first: an SSE stream whose client went away
        // counts as parked until the node next writes to it, and long-poll rounds wait for the
        // parked count.
        let mut runs: Vec<Vec<(&str, usize, Case)>> = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let mut cases = Vec::new();
            for readers in READERS {
                let case = self.fan_out_long_poll(readers, rounds, &mut next).await?;
                cases.push(("long-poll", readers, case));
            }
            for readers in READERS {
                let case = self.fan_out_sse(readers, rounds, &mut next).await?;
                cases.push(("SSE", readers, case));
            }
            for readers in READERS {
                let case = self.fan_out_floor(readers, rounds).await?;
                cases.push((FLOOR, readers, case));
            }
            runs.push(cases);
        }
        let mut rows = String::new();
        let mut last_at_1000: Vec<(&str, f64)> = Vec::new();
        let kinds: Vec<(&str, usize)> = runs[0].iter().map(|(n, r, _)| (*n, *r)).collect();
        for (k, (name, readers)) in kinds.into_iter().enumerate() {
            // Per run: the median reader's and the last reader's p50 and p99 over its rounds,
            // and the CPU per delivery.
            let per_reader = |cpu: f64| cpu / (readers * rounds) as f64 * 1e6;
            let figures: Vec<(f64, f64, f64, f64, f64)> = runs
                .iter_mut()
                .map(|run| {
                    let case = &mut run[k].2;
                    let (median, last) = (pct(&mut case.median), pct(&mut case.last));
                    (
                        median.p50,
                        last.p50,
                        last.p99,
                        per_reader(case.cpu.0),
                        per_reader(case.cpu.1),
                    )
                })
                .collect();
            let mut all_last: Vec<f64> = runs
                .iter()
                .flat_map(|run| run[k].2.last.iter().copied())
                .collect();
            self.report.latency(
                &format!("13. {name}, {readers} readers, last"),
                &pct(&mut all_last),
            );
            let last_p50 = median(figures.iter().map(|f| f.1)).0;
            if readers == 1000 {
                last_at_1000.push((name, last_p50));
            }
            let _ = writeln!(
                rows,
                "| {name} | {readers} | {} | {} | {} | {} | {} | {} |",
                spread(figures.iter().map(|f| f.0), 2),
                spread(figures.iter().map(|f| f.1), 2),
                spread(figures.iter().map(|f| f.2), 2),
                spread(figures.iter().map(|f| f.3), 1),
                spread(figures.iter().map(|f| f.4), 1),
                if readers == 1000 && name != FLOOR {
                    verdict(last_p50 <= 10.0).to_owned()
                } else {
                    String::new()
                },
            );
        }
        let _ = write!(
            self.report.md,
            "### 13. Fan-out: the writer's acknowledgement -> readers parked on one bucket ({RUNS} runs of {rounds} appends of a 1 KiB row per case)\n\n\
             | reader | readers | median reader p50 ms | last reader p50 ms | last reader p99 ms | node (floor: its server) CPU µs per delivery | driver CPU µs per delivery | goal: last <= 10 ms at 1,000 |\n\
             |---|---|---|---|---|---|---|---|\n{rows}\n\
             Measured on the client: per append, the time from the append's response to each reader \
             holding the row (an SSE event, or a long-poll's whole response). Every reader is parked \
             before each append (the node's `parked_reads` gauge says so for long-polls). The driver \
             reads all the readers' connections on the same two cores as the node; each reader is \
             one kept-alive HTTP/1.1 connection whose responses the driver decodes itself \
             (`mink_bench/lean_http.rs`), not through its HTTP client. Each figure is the median of \
             the {RUNS} runs' own figures (each over its appends), the lowest and the highest in \
             brackets; the goal is met when the median of the last reader's p50 meets it.\n\n\
             The floor is a bare server in a process of its own (`mink_bench/raw_fanout.rs`): each \
             reader a parked task woken by a watch channel, which writes one chunk of an SSE body \
             of the same size as the node's event; nothing is stored, checked, rendered or routed. \
             It is what any server answering that many parked readers through loopback TCP can \
             reach on this machine, with the driver reading them on the same two cores.\n\n",
        );
        let floor = last_at_1000
            .iter()
            .find(|(name, _)| *name == FLOOR)
            .map(|(_, last)| *last);
        if let Some(floor) = floor.filter(|f| *f > 0.0) {
            let ratios: Vec<String> = last_at_1000
                .iter()
                .filter(|(name, _)| *name != FLOOR)
                .map(|(name, last)| format!("{name} {:.2}x", last / floor))
                .collect();
            let _ = writeln!(
                self.report.md,
                "The last of 1,000 readers against the floor's last ({floor:.2} ms): {}.\n",
                ratios.join(", ")
            );
        }
        Ok(())
    }

    /// `readers` SSE streams from `next`, then `rounds` appends, each waited for by every one.
    async fn fan_out_sse(
        &mut self,
        readers: usize,
        rounds: usize,
        next: &mut u64,
    ) -> Result<Case, Error> {
        let c = &self.client;
        let url = format!("{}?offset={next}&live=sse", c.records("fanout", 0));
        let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Instant)>();
        let mut tasks = Vec::with_capacity(readers);
        for _ in 0..readers {
            let mut reader = Connection::connect(&url).await?;
            reader.get(&url, "text/event-stream").await?;
            let (tx, first) = (tx.clone(), *next);
            tasks.push(tokio::spawn(async move {
                for round in 0..rounds {
                    let id = first + round as u64 + 1;
                    let wants = [format!("id: {id}\n"), format!("id:{id}\n")];
                    let wants = [wants[0].as_bytes(), wants[1].as_bytes()];
                    reader.read_until(&wants).await?;
                    let _ = tx.send((round, Instant::now()));
                }
                Ok::<_, Error>(())
            }));
        }
        // Every stream has its headers and counts as parked; give the last ones time to find
        // nothing past `next` and park on the tail.
        tokio::time::sleep(Duration::from_millis(100 + readers as u64 / 5)).await;
        let case = self.node_rounds(readers, rounds, next, &mut rx, |_| async { Ok(()) });
        let case = case.await;
        for task in tasks {
            task.abort();
        }
        case
    }

    /// `rounds` appends, each to `readers` long-polls parked before it (each reader one
    /// kept-alive connection, one long-poll per round).
    async fn fan_out_long_poll(
        &mut self,
        readers: usize,
        rounds: usize,
        next: &mut u64,
    ) -> Result<Case, Error> {
        let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Instant)>();
        let records = self.client.records("fanout", 0);
        let (round_tx, round_rx) = watch::channel(None::<usize>);
        let start = *next;
        let mut tasks = Vec::with_capacity(readers);
        for _ in 0..readers {
            let mut reader = Connection::connect(&records).await?;
            let (tx, records, mut round_rx) = (tx.clone(), records.clone(), round_rx.clone());
            tasks.push(tokio::spawn(async move {
                while round_rx.changed().await.is_ok() {
                    let Some(round) = *round_rx.borrow_and_update() else {
                        continue;
                    };
                    let offset = start + round as u64;
                    let url = format!("{records}?offset={offset}&live=long-poll&timeout_ms=20000");
                    reader.get(&url, "*/*").await?;
                    reader.read_to_end().await?;
                    let _ = tx.send((round, Instant::now()));
                }
                Ok::<_, Error>(())
            }));
        }
        let client = self.client.clone();
        let case = self.node_rounds(readers, rounds, next, &mut rx, move |round| {
            let (client, round_tx) = (client.clone(), round_tx.clone());
            async move {
                round_tx.send_replace(Some(round));
                client.wait_metric("parked_reads", readers as f64).await?;
                // Counted from their admission: let the last ones find the tail and park.
                tokio::time::sleep(Duration::from_millis(10 + readers as u64 / 20)).await;
                Ok(())
            }
        });
        let case = case.await;
        for task in tasks {
            task.abort();
        }
        case
    }

    /// `readers` streams from the bare server, then `rounds` triggers, each waited for by every
    /// one.
    async fn fan_out_floor(&mut self, readers: usize, rounds: usize) -> Result<Case, Error> {
        let server = RawFanout::start().await?;
        let pid = server.pid();
        let (tx, mut rx) = mpsc::unbounded_channel::<(usize, Instant)>();
        let url = server.events();
        let mut tasks = Vec::with_capacity(readers);
        for _ in 0..readers {
            let mut reader = Connection::connect(&url).await?;
            reader.get(&url, "text/event-stream").await?;
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..rounds {
                    let wants = format!("id: {}\n", round + 1);
                    reader.read_until(&[wants.as_bytes()]).await?;
                    let _ = tx.send((round, Instant::now()));
                }
                Ok::<_, Error>(())
            }));
        }
        let trigger = Arc::new(Mutex::new(Connection::connect(&server.base).await?));
        tokio::time::sleep(Duration::from_millis(100 + readers as u64 / 5)).await;
        let before = |_| async { Ok(()) };
        let append = |round: usize| {
            let (trigger, url) = (Arc::clone(&trigger), server.trigger(round as u64 + 1));
            async move {
                let mut trigger = trigger.lock().await;
                trigger.get(&url, "*/*").await?;
                trigger.read_to_end().await.map(|_| ())
            }
        };
        let case = rounds_of(pid, readers, rounds, &mut rx, before, append).await;
        for task in tasks {
            task.abort();
        }
        case
    }

    /// The rounds of a case on the node: `before(round)` readies the readers, then one append of
    /// a row, then every reader's receipt of it.
    async fn node_rounds<F, Fut>(
        &self,
        readers: usize,
        rounds: usize,
        next: &mut u64,
        receipts: &mut mpsc::UnboundedReceiver<(usize, Instant)>,
        before: F,
    ) -> Result<Case, Error>
    where
        F: Fn(usize) -> Fut,
        Fut: Future<Output = Result<(), Error>>,
    {
        let pid = self.node.pid().ok_or("the node is not running")?;
        let first = *next;
        let client = &self.client;
        let append = |round: usize| async move {
            client
                .append(
                    "fanout",
                    0,
                    "application/x-ndjson",
                    ndjson_row(first + round as u64),
                )
                .await
                .map(|_| ())
        };
        let case = rounds_of(pid, readers, rounds, receipts, before, append).await;
        *next += rounds as u64;
        case
    }
}

/// The rounds of a case against the process `pid`: `before(round)` readies the readers, then
/// `append(round)`, then every reader's receipt of it.
async fn rounds_of<F, Fut, A, AFut>(
    pid: u32,
    readers: usize,
    rounds: usize,
    receipts: &mut mpsc::UnboundedReceiver<(usize, Instant)>,
    before: F,
    append: A,
) -> Result<Case, Error>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
    A: Fn(usize) -> AFut,
    AFut: Future<Output = Result<(), Error>>,
{
    let cpu0 = (cpu_seconds(pid), cpu_seconds(std::process::id()));
    let mut case = Case {
        median: Vec::with_capacity(rounds),
        last: Vec::with_capacity(rounds),
        cpu: (0.0, 0.0),
    };
    for round in 0..rounds {
        before(round).await?;
        append(round).await?;
        let acked = Instant::now();
        let mut times = Vec::with_capacity(readers);
        while times.len() < readers {
            let (r, at) = tokio::time::timeout(Duration::from_secs(20), receipts.recv())
                .await
                .map_err(|_| format!("fan-out: a reader had no row 20 s after append {round}"))?
                .ok_or("fan-out: the readers stopped")?;
            if r != round {
                return Err(format!(
                    "fan-out: a receipt of round {r} during round {round}"
                ));
            }
            times.push(signed_ms(acked, at));
        }
        times.sort_by(f64::total_cmp);
        case.median.push(times[times.len() / 2]);
        case.last.push(times[times.len() - 1]);
        // The readers park again before the next append.
        tokio::time::sleep(Duration::from_millis(20 + readers as u64 / 10)).await;
    }
    let cpu1 = (cpu_seconds(pid), cpu_seconds(std::process::id()));
    let delta = |a: Option<f64>, b: Option<f64>| b.zip(a).map_or(0.0, |(b, a)| b - a);
    case.cpu = (delta(cpu0.0, cpu1.0), delta(cpu0.1, cpu1.1));
    Ok(case)
}
