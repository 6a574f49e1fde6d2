//! Property test: random appends (plain and idempotent, in order, retried and out of order), reads
//! and crash-reopens agree with a simple model of the log and the writer windows.

mod common;

use std::collections::{HashMap, VecDeque};

use common::*;
use mink_tablet::{Isolation, Tablet, TabletError, TabletSettings};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Seq {
    /// The writer's next sequence (0 for an unknown writer).
    Next,
    /// `k` behind the last one (a retry, or too old).
    Back(i32),
    /// Ahead of the next one.
    Ahead(i32),
}

#[derive(Debug, Clone)]
enum Op {
    Append {
        writer: Option<i64>,
        seq: Seq,
        rows: usize,
        extra_plain: usize,
    },
    Read {
        from: u8,
        to: u8,
        max_bytes: usize,
    },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let seq = prop_oneof![
        4 => Just(Seq::Next),
        2 => (0..7i32).prop_map(Seq::Back),
        1 => (1..3i32).prop_map(Seq::Ahead),
    ];
    prop_oneof![
        6 => (proptest::option::of(0..3i64), seq, 1..4usize, 0..2usize).prop_map(
            |(writer, seq, rows, extra_plain)| Op::Append { writer, seq, rows, extra_plain }
        ),
        3 => (any::<u8>(), any::<u8>(), prop_oneof![Just(1usize), Just(1 << 20)])
            .prop_map(|(from, to, max_bytes)| Op::Read { from, to, max_bytes }),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Default)]
struct Model {
    /// (base offset, rows) of every batch.
    log: Vec<(u64, u64)>,
    next: u64,
    /// writer -> (sequence, base offset) of its last five batches.
    windows: HashMap<i64, VecDeque<(i32, u64)>>,
}

enum Expect {
    Appended,
    Duplicate(u64),
    OutOfOrder(i32),
}

impl Model {
    fn sequence(&self, writer: i64, seq: &Seq) -> i32 {
        let last = self
            .windows
            .get(&writer)
            .and_then(|w| w.back())
            .map(|e| e.0);
        match (last, seq) {
            (None, Seq::Next) => 0,
            (None, Seq::Back(k)) => 100 + k,
            (None, Seq::Ahead(k)) => 200 + k,
            (Some(l), Seq::Next) => l + 1,
            (Some(l), Seq::Back(k)) => (l - k).max(0),
            (Some(l), Seq::Ahead(k)) => l + 1 + k,
        }
    }

    fn judge(&self, writer: i64, seq: i32) -> Expect {
        match self.windows.get(&writer) {
            None => Expect::Appended,
            Some(w) => {
                if let Some(e) = w.iter().find(|e| e.0 == seq) {
                    Expect::Duplicate(e.1)
                } else if seq == w.back().map_or(0, |e| e.0) + 1 {
                    Expect::Appended
                } else {
                    Expect::OutOfOrder(w.back().map_or(0, |e| e.0) + 1)
                }
            }
        }
    }

    fn append(&mut self, rows: u64, writer: Option<(i64, i32)>) -> u64 {
        let base = self.next;
        self.log.push((base, rows));
        self.next += rows;
        if let Some((writer, seq)) = writer {
            let w = self.windows.entry(writer).or_default();
            w.push_back((seq, base));
            while w.len() > 5 {
                w.pop_front();
            }
        }
        base
    }
}

async fn run(ops: Vec<Op>) {
    let world = World::new();
    let mut engine = world.engine("n1").await;
    let settings = TabletSettings {
        snapshot_every_appends: 7,
        ..TabletSettings::default()
    };
    let mut tablet: Tablet = open(&engine, settings.clone()).await;
    let mut model = Model::default();
    for op in ops {
        match op {
            Op::Append {
                writer,
                seq,
                rows,
                extra_plain,
            } => {
                let mut parts = Vec::new();
                let identity = writer.map(|w| (w, model.sequence(w, &seq)));
                parts.push(match identity {
                    Some((w, s)) => batch(rows, w, s),
                    None => plain(rows),
                });
                for _ in 0..extra_plain {
                    parts.push(plain(1));
                }
                let got = tablet.append(concat(&parts)).await;
                let expect = match identity {
                    Some((w, s)) => model.judge(w, s),
                    None => Expect::Appended,
                };
                match expect {
                    Expect::OutOfOrder(expected) => match got {
                        Err(TabletError::OutOfOrderSequence { expected: e, .. }) => {
                            assert_eq!(e, expected)
                        }
                        other => panic!("expected out of order, got {other:?}"),
                    },
                    Expect::Duplicate(base) => {
                        let got = got.unwrap();
                        assert!(got.batches[0].duplicate);
                        assert_eq!(got.batches[0].base_offset, base);
                        for _ in 0..extra_plain {
                            model.append(1, None);
                        }
                    }
                    Expect::Appended => {
                        let got = got.unwrap();
                        let base = model.append(rows as u64, identity);
                        for _ in 0..extra_plain {
                            model.append(1, None);
                        }
                        assert!(!got.batches[0].duplicate);
                        assert_eq!(got.base_offset(), base);
                        assert_eq!(got.next_offset(), model.next);
                    }
                }
                assert_eq!(tablet.offsets().log_end, model.next);
                assert_eq!(tablet.high_watermark(), model.next);
            }
            Op::Read {
                from,
                to,
                max_bytes,
            } => {
                let from = u64::from(from) % (model.next + 1);
                let to = from + u64::from(to);
                let want: Vec<(u64, u64)> = model
                    .log
                    .iter()
                    .copied()
                    // An empty range reads nothing, even from inside a batch.
                    .filter(|(base, rows)| {
                        from < to && base + rows > from && *base < to.min(model.next)
                    })
                    .collect();
                // Each read returns a non-empty prefix of what is left (one batch at max_bytes 1);
                // following next_offset yields exactly the model's batches.
                let mut have: Vec<(u64, u64)> = Vec::new();
                let mut cursor = from;
                while cursor < to {
                    let got = tablet
                        .read(cursor, to, None, Isolation::HighWatermark, max_bytes)
                        .await
                        .unwrap();
                    if got.batches.is_empty() {
                        break;
                    }
                    if max_bytes == 1 {
                        assert_eq!(got.batches.len(), 1);
                    }
                    assert!(got.next_offset > cursor);
                    cursor = got.next_offset;
                    have.extend(
                        got.batches
                            .iter()
                            .map(|b| (b.base_offset(), b.next_offset() - b.base_offset())),
                    );
                }
                assert_eq!(have, want);
            }
            Op::Reopen => {
                // A crash: no close. The writer windows must survive exactly.
                engine.abort();
                drop(tablet);
                engine = world.engine("n1").await;
                tablet = open(&engine, settings.clone()).await;
                let states = tablet.writers().await;
                let mut want: Vec<(i64, Vec<i32>)> = model
                    .windows
                    .iter()
                    .map(|(w, e)| (*w, e.iter().map(|e| e.0).collect()))
                    .collect();
                want.sort();
                let have: Vec<(i64, Vec<i32>)> = states
                    .iter()
                    .map(|s| (s.writer_id, s.batches.iter().map(|b| b.sequence).collect()))
                    .collect();
                assert_eq!(have, want);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_appends_retries_and_reads_agree_with_a_model(ops in proptest::collection::vec(op(), 1..40)) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(run(ops));
    }
}
