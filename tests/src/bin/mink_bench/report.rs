//! The figures and the report: percentiles, verdicts against the goals, and the Markdown and CSV
//! text the run writes.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Pct {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
    pub(crate) n: usize,
}

/// Percentiles in milliseconds (nearest rank).
pub(crate) fn pct(samples: &mut [f64]) -> Pct {
    samples.sort_by(f64::total_cmp);
    let at = |p: f64| {
        let i = ((samples.len() as f64) * p).ceil() as usize;
        samples
            .get(i.saturating_sub(1).min(samples.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    Pct {
        p50: at(0.5),
        p99: at(0.99),
        p999: at(0.999),
        n: samples.len(),
    }
}

pub(crate) fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "**missed**" }
}

/// What the run writes: the Markdown fragment and the CSV rows for the charts.
#[derive(Default)]
pub(crate) struct Report {
    pub(crate) md: String,
    /// Item 7, written during item 2 and shown last.
    pub(crate) rss_md: String,
    pub(crate) latency_csv: String,
    pub(crate) replay_csv: String,
    /// Item 15: `interval_ms,load_mbps,puts_per_s,p50_ms,p99_ms` per case.
    pub(crate) cost_csv: String,
}

impl Report {
    pub(crate) fn latency(&mut self, series: &str, p: &Pct) {
        let _ = writeln!(
            self.latency_csv,
            "{series},{:.4},{:.4},{:.4},{}",
            p.p50, p.p99, p.p999, p.n
        );
    }
}

pub(crate) fn signed_ms(acked: Instant, received: Instant) -> f64 {
    if received >= acked {
        ms(received - acked)
    } else {
        -ms(acked - received)
    }
}
