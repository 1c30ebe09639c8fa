//! Results: the JSON object a run prints with `--json`, and the human summary table.
//!
//! The JSON keys are a stable interface (bench/compare.sh and charts read them): every run has
//! `throughput_rps`, `ops_per_s`, `mean_ms`, `p50_ms`, `p90_ms`, `p99_ms`, `p999_ms`,
//! `max_ms`, `errors`, `error_kinds`; scenarios add their own keys (see docs/benchmarks.md).

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::config::RunConfig;
use crate::engine::{group_digits, ThreadStats};

/// The outcome of one run.
pub struct RunResult {
    pub config: RunConfig,
    pub stats: ThreadStats,
    /// The time throughput is divided by.
    pub measured: Duration,
    /// Scenario-specific fields, merged into the JSON object.
    pub extra: Map<String, Value>,
    /// Whether `op_latency` is meaningful (operations spanning several requests).
    pub multi_step: bool,
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

impl RunResult {
    pub fn throughput_rps(&self) -> f64 {
        per_second(self.stats.requests_ok, self.measured)
    }

    pub fn to_json(&self) -> Value {
        let c = &self.config;
        let s = &self.stats;
        let lat = s.latency.summary();
        let mut out = json!({
            "scenario": c.scenario.name(),
            "label": c.label,
            "target": c.target,
            "etcd": c.etcd,
            "mode": if c.rate.is_some() { "open" } else { "closed" },
            "connections": c.connections,
            "threads": c.effective_threads(),
            "duration_s": round3(self.measured.as_secs_f64()),
            "warmup_s": round3(c.warmup.as_secs_f64()),
            "rate": c.rate,
            "requests": s.requests_ok,
            "ops": s.ops,
            "errors": s.errors.total(),
            "error_kinds": s.errors.to_json(),
            "unexpected_statuses": s.statuses.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<Map<_, _>>(),
            "first_error": s.first_error,
            "throughput_rps": round3(self.throughput_rps()),
            "ops_per_s": round3(per_second(s.ops, self.measured)),
            "sent_rps": round3(per_second(s.sent, self.measured)),
            "mean_ms": round3_ms(lat.mean_ms),
            "min_ms": round3_ms(lat.min_ms),
            "p50_ms": round3_ms(lat.p50_ms),
            "p90_ms": round3_ms(lat.p90_ms),
            "p99_ms": round3_ms(lat.p99_ms),
            "p999_ms": round3_ms(lat.p999_ms),
            "max_ms": round3_ms(lat.max_ms),
            "latency_saturated": lat.saturated,
            "percentiles": s.latency.curve().iter().map(|(p, ms)| json!([p, round3_ms(*ms)])).collect::<Vec<_>>(),
        });
        let obj = out.as_object_mut().expect("built as an object");
        if self.multi_step {
            let op = s.op_latency.summary();
            obj.insert("op_mean_ms".into(), json!(round3_ms(op.mean_ms)));
            obj.insert("op_p50_ms".into(), json!(round3_ms(op.p50_ms)));
            obj.insert("op_p99_ms".into(), json!(round3_ms(op.p99_ms)));
            obj.insert("op_max_ms".into(), json!(round3_ms(op.max_ms)));
        }
        for (k, v) in &self.extra {
            obj.insert(k.clone(), v.clone());
        }
        out
    }

    /// The human summary.
    pub fn table(&self) -> String {
        let c = &self.config;
        let s = &self.stats;
        let lat = s.latency.summary();
        let mode = match c.rate {
            Some(rate) => format!("open loop at {} req/s", group_digits(rate as u64)),
            None => "closed loop".to_string(),
        };
        let mut out = String::new();
        out.push_str(&format!(
            "{}{} -> {}{}  ({mode}, {} connections, {} threads, {:.1} s)\n",
            c.scenario.name(),
            c.label
                .as_ref()
                .map(|l| format!(" [{l}]"))
                .unwrap_or_default(),
            c.target.as_deref().unwrap_or("?"),
            if c.etcd { " (etcd)" } else { "" },
            c.connections,
            c.effective_threads(),
            self.measured.as_secs_f64(),
        ));
        out.push_str(&format!(
            "  {:<14}{:>14.1} req/s\n",
            "throughput",
            self.throughput_rps()
        ));
        if s.ops != s.requests_ok {
            out.push_str(&format!(
                "  {:<14}{:>14.1} op/s\n",
                "operations",
                per_second(s.ops, self.measured)
            ));
        }
        out.push_str(&format!(
            "  {:<14}mean {:.3}  p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}\n",
            "latency ms", lat.mean_ms, lat.p50_ms, lat.p90_ms, lat.p99_ms, lat.p999_ms, lat.max_ms
        ));
        if self.multi_step {
            let op = s.op_latency.summary();
            out.push_str(&format!(
                "  {:<14}mean {:.3}  p50 {:.3}  p99 {:.3}  max {:.3}\n",
                "op latency ms", op.mean_ms, op.p50_ms, op.p99_ms, op.max_ms
            ));
        }
        out.push_str(&format!(
            "  {:<14}{} ok, {} errors",
            "requests",
            group_digits(s.requests_ok),
            group_digits(s.errors.total())
        ));
        if s.errors.total() > 0 {
            let e = &s.errors;
            out.push_str(&format!(
                " (connect {}, io {}, timeout {}, status {}, parse {}, protocol {})",
                e.connect, e.io, e.timeout, e.status, e.parse, e.protocol
            ));
        }
        out.push('\n');
        if !s.statuses.is_empty() {
            let list: Vec<String> = s
                .statuses
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            out.push_str(&format!("  {:<14}{}\n", "statuses", list.join(", ")));
        }
        if let Some(e) = &s.first_error {
            out.push_str(&format!("  {:<14}{}\n", "first error", e));
        }
        // Curves (arrays) are for charts and JSON; the table shows the single figures.
        for (k, v) in self.extra.iter().filter(|(_, v)| !v.is_array()) {
            out.push_str(&format!("  {k:<28}{}\n", compact(v)));
        }
        out
    }
}

fn round3_ms(v: f64) -> f64 {
    // Milliseconds with microsecond resolution.
    round3(v)
}

pub fn per_second(count: u64, over: Duration) -> f64 {
    if over.is_zero() {
        0.0
    } else {
        count as f64 / over.as_secs_f64()
    }
}

fn compact(v: &Value) -> String {
    match v {
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.abs() < 1e15 {
                group_digits(f.abs() as u64)
            } else {
                format!("{f:.3}")
            }
        }
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Prints a result as the config asks (JSON or table) and writes `--json-out`.
pub fn emit(result: &RunResult) -> Result<(), String> {
    let value = result.to_json();
    if let Some(path) = &result.config.json_out {
        std::fs::write(path, format!("{value:#}\n")).map_err(|e| format!("write {path}: {e}"))?;
    }
    if result.config.json {
        println!("{value}");
    } else {
        print!("{}", result.table());
    }
    Ok(())
}

/// Adds `rss_before_kib`, `rss_after_kib` and `<per_key>` (growth per item, bytes).
pub fn insert_rss(
    extra: &mut Map<String, serde_json::Value>,
    before: Option<u64>,
    after: Option<u64>,
    items: usize,
    per_key: &str,
) {
    if let (Some(before), Some(after)) = (before, after) {
        extra.insert("rss_before_kib".into(), json!(before));
        extra.insert("rss_after_kib".into(), json!(after));
        let growth_bytes = (after as f64 - before as f64) * 1024.0;
        extra.insert(
            per_key.into(),
            json!((growth_bytes / items.max(1) as f64).round()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Scenario;

    #[test]
    fn json_has_the_stable_keys() {
        let mut config = RunConfig::new(Scenario::KvGet);
        config.target = Some("http://127.0.0.1:1".into());
        let mut stats = ThreadStats::default();
        for ms in 1..=100u64 {
            stats.latency.record_ns(ms * 1_000_000);
        }
        stats.requests_ok = 100;
        stats.ops = 100;
        stats.errors.timeout = 2;
        let result = RunResult {
            config,
            stats,
            measured: Duration::from_secs(2),
            extra: Map::new(),
            multi_step: false,
        };
        let v = result.to_json();
        for key in [
            "throughput_rps",
            "p50_ms",
            "p99_ms",
            "p999_ms",
            "max_ms",
            "errors",
            "ops_per_s",
            "mean_ms",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["throughput_rps"], json!(50.0));
        assert_eq!(v["errors"], json!(2));
        // HdrHistogram reports the top of the 0.1 %-wide bucket.
        assert!(
            (v["p50_ms"].as_f64().unwrap() - 50.0).abs() < 0.05,
            "{}",
            v["p50_ms"]
        );
        assert_eq!(v["mode"], json!("closed"));
        let table = result.table();
        assert!(table.contains("50.0 req/s"), "{table}");
        assert!(table.contains("timeout 2"), "{table}");
    }
}
