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

/// How many times the items that report a median run each figure (issue 18: at least three
/// times; a goal is met when the median meets it).
pub(crate) const RUNS: usize = 3;

/// The median of `values` with the lowest and the highest: `(median, low, high)` (the upper
/// middle for an even count; zeros when empty).
pub(crate) fn median(values: impl IntoIterator<Item = f64>) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.into_iter().collect();
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// A median with its spread, `"median (low-high)"`, each with `decimals` decimals; the median
/// alone for a single value.
pub(crate) fn spread(values: impl IntoIterator<Item = f64>, decimals: usize) -> String {
    let v: Vec<f64> = values.into_iter().collect();
    let (m, lo, hi) = median(v.iter().copied());
    if v.len() < 2 {
        format!("{m:.decimals$}")
    } else if lo < 0.0 {
        // "-0.14--0.08" would read badly.
        format!("{m:.decimals$} ({lo:.decimals$} to {hi:.decimals$})")
    } else {
        format!("{m:.decimals$} ({lo:.decimals$}-{hi:.decimals$})")
    }
}

/// A ratio's median in bold with its spread: `"**1.04x** (1.02-1.40)"`.
pub(crate) fn spread_ratio(values: impl IntoIterator<Item = f64>) -> String {
    let v: Vec<f64> = values.into_iter().collect();
    let (m, lo, hi) = median(v.iter().copied());
    if v.len() < 2 {
        format!("**{m:.2}x**")
    } else {
        format!("**{m:.2}x** ({lo:.2}-{hi:.2})")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_runs_comes_with_its_lowest_and_highest() {
        assert_eq!(median([3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), (3.0, 1.0, 4.0));
        assert_eq!(median(Vec::new()), (0.0, 0.0, 0.0));
        assert_eq!(spread([307.04, 300.1, 412.3], 1), "307.0 (300.1-412.3)");
        assert_eq!(spread([5.0], 1), "5.0");
        assert_eq!(spread([-0.1, -0.2, 0.3], 2), "-0.10 (-0.20 to 0.30)");
        assert_eq!(spread_ratio([1.4, 1.02, 1.04]), "**1.04x** (1.02-1.40)");
        assert_eq!(spread_ratio([0.5]), "**0.50x**");
    }
}
