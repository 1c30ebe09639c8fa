//! Latency histograms and the percentile summaries every report is made of.
//!
//! Latencies are recorded in nanoseconds into an HdrHistogram with three significant digits
//! (relative error ≤ 0.1 %), from 1 ns up to [`LATENCY_NS_MAX`]. A value above the ceiling is
//! recorded as the ceiling and counted in `saturated`, so a report can say that its max is a
//! lower bound instead of silently dropping the sample. Each worker thread owns its histogram;
//! they are merged once at the end of a run, so recording never touches shared memory.

use hdrhistogram::Histogram;

/// The largest latency a histogram distinguishes: one hour, in nanoseconds.
pub const LATENCY_NS_MAX: u64 = 3_600 * 1_000_000_000;

/// Significant decimal digits kept per recorded value.
const SIGNIFICANT_DIGITS: u8 = 3;

/// The percentiles printed in the latency-by-percentile curve (JSON `percentiles`, charts).
pub const CURVE_PERCENTILES: [f64; 12] = [
    0.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.99, 99.999, 100.0,
];

/// A latency histogram in nanoseconds.
#[derive(Clone)]
pub struct LatencyHistogram {
    inner: Histogram<u64>,
    saturated: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    pub fn new() -> Self {
        let inner = Histogram::new_with_bounds(1, LATENCY_NS_MAX, SIGNIFICANT_DIGITS)
            .expect("histogram bounds are constants and valid");
        Self {
            inner,
            saturated: 0,
        }
    }

    /// Records one latency. Zero is recorded as 1 ns (the histogram's floor); values above
    /// [`LATENCY_NS_MAX`] are recorded as the ceiling and counted as saturated.
    #[inline]
    pub fn record_ns(&mut self, latency_ns: u64) {
        if latency_ns > LATENCY_NS_MAX {
            self.saturated += 1;
        }
        self.inner.saturating_record(latency_ns.max(1));
    }

    #[inline]
    pub fn record(&mut self, latency: std::time::Duration) {
        self.record_ns(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Adds every sample of `other` into `self`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        // Both histograms have identical bounds, so addition cannot fail.
        self.inner
            .add(&other.inner)
            .expect("histograms with equal bounds always add");
        self.saturated += other.saturated;
    }

    /// Latency at `percentile` (0–100) in milliseconds; 0 for an empty histogram.
    pub fn percentile_ms(&self, percentile: f64) -> f64 {
        if self.inner.is_empty() {
            return 0.0;
        }
        let quantile = (percentile / 100.0).clamp(0.0, 1.0);
        ns_to_ms(self.inner.value_at_quantile(quantile))
    }

    pub fn summary(&self) -> LatencySummary {
        if self.inner.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: self.inner.len(),
            min_ms: ns_to_ms(self.inner.min()),
            mean_ms: self.inner.mean() / 1e6,
            p50_ms: self.percentile_ms(50.0),
            p90_ms: self.percentile_ms(90.0),
            p99_ms: self.percentile_ms(99.0),
            p999_ms: self.percentile_ms(99.9),
            max_ms: ns_to_ms(self.inner.max()),
            saturated: self.saturated,
        }
    }

    /// `(percentile, milliseconds)` pairs at [`CURVE_PERCENTILES`].
    pub fn curve(&self) -> Vec<(f64, f64)> {
        CURVE_PERCENTILES
            .iter()
            .map(|&p| (p, self.percentile_ms(p)))
            .collect()
    }
}

fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The numbers a report quotes for one latency distribution, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub min_ms: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    /// Samples above the histogram ceiling, recorded as the ceiling.
    pub saturated: u64,
}

/// Minimum, median and maximum of a set of values (used for run-to-run ratios).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

/// Spread of `values`, ignoring NaNs; `None` when nothing is left. The median of an even count
/// is the mean of the two middle values.
pub fn spread(values: &[f64]) -> Option<Spread> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(|a, b| a.total_cmp(b));
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Some(Spread {
        min: sorted[0],
        median,
        max: sorted[n - 1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= b.abs() * 0.002 + 1e-9
    }

    #[test]
    fn percentiles_of_a_uniform_distribution() {
        let mut h = LatencyHistogram::new();
        // 1 ms .. 1000 ms, one sample each.
        for ms in 1..=1000u64 {
            h.record_ns(ms * 1_000_000);
        }
        let s = h.summary();
        assert_eq!(s.count, 1000);
        assert!(close(s.p50_ms, 500.0), "p50 {}", s.p50_ms);
        assert!(close(s.p90_ms, 900.0), "p90 {}", s.p90_ms);
        assert!(close(s.p99_ms, 990.0), "p99 {}", s.p99_ms);
        assert!(close(s.p999_ms, 999.0), "p999 {}", s.p999_ms);
        assert!(close(s.max_ms, 1000.0), "max {}", s.max_ms);
        assert!(close(s.min_ms, 1.0), "min {}", s.min_ms);
        assert!(close(s.mean_ms, 500.5), "mean {}", s.mean_ms);
        assert_eq!(s.saturated, 0);
    }

    #[test]
    fn a_single_outlier_is_the_max_and_not_the_p99() {
        let mut h = LatencyHistogram::new();
        // One outlier in 2,000: above the 99.9th percentile (rank 1,998), so only max sees it.
        for _ in 0..1999 {
            h.record(Duration::from_micros(100));
        }
        h.record(Duration::from_secs(2));
        let s = h.summary();
        assert!(close(s.p99_ms, 0.1), "p99 {}", s.p99_ms);
        assert!(close(s.p999_ms, 0.1), "p99.9 {}", s.p999_ms);
        assert!(close(s.max_ms, 2000.0), "max {}", s.max_ms);
    }

    #[test]
    fn merging_adds_counts_and_keeps_extremes() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        for _ in 0..100 {
            a.record_ns(1_000_000);
        }
        for _ in 0..300 {
            b.record_ns(3_000_000);
        }
        a.merge(&b);
        let s = a.summary();
        assert_eq!(s.count, 400);
        assert!(close(s.p50_ms, 3.0));
        assert!(close(a.percentile_ms(25.0), 1.0));
        assert!(close(s.min_ms, 1.0));
    }

    #[test]
    fn values_beyond_the_ceiling_are_clamped_and_counted() {
        let mut h = LatencyHistogram::new();
        h.record_ns(LATENCY_NS_MAX * 2);
        h.record_ns(0);
        let s = h.summary();
        assert_eq!(s.count, 2);
        assert_eq!(s.saturated, 1);
        assert!(s.max_ms >= LATENCY_NS_MAX as f64 / 1e6 * 0.999);
        assert!(s.min_ms > 0.0);
    }

    #[test]
    fn an_empty_histogram_summarises_to_zeroes() {
        let h = LatencyHistogram::new();
        assert_eq!(h.summary(), LatencySummary::default());
        assert_eq!(h.percentile_ms(99.0), 0.0);
        assert_eq!(h.curve().len(), CURVE_PERCENTILES.len());
    }

    #[test]
    fn curve_is_monotonic() {
        let mut h = LatencyHistogram::new();
        let mut x: u64 = 12345;
        for _ in 0..10_000 {
            // xorshift: a spread of values without a dependency.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            h.record_ns(x % 50_000_000 + 1000);
        }
        let curve = h.curve();
        for pair in curve.windows(2) {
            assert!(pair[0].1 <= pair[1].1, "{:?}", curve);
        }
    }

    #[test]
    fn spread_of_odd_and_even_counts() {
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[f64::NAN]), None);
        assert_eq!(
            spread(&[3.0, 1.0, 2.0]),
            Some(Spread {
                min: 1.0,
                median: 2.0,
                max: 3.0
            })
        );
        assert_eq!(
            spread(&[4.0, 1.0, 2.0, 3.0]),
            Some(Spread {
                min: 1.0,
                median: 2.5,
                max: 4.0
            })
        );
    }
}
