//! `loadgen compare`: side A and side B run interleaved (A B A B …) so that drift in the
//! machine's load hits both alike; the report is each run plus the per-run ratios B/A with
//! their minimum, median and maximum.
//!
//! A ratio is taken per pair of neighbouring runs (run i of A with run i of B), never between
//! medians alone, so a noisy period shows up as spread instead of hiding in a median.

use serde_json::{json, Value};

use crate::config::CompareConfig;
use crate::engine::group_digits;
use crate::hist::spread;
use crate::run::run_scenario;

/// Latency fields whose ratios are reported besides the metric.
const LATENCY_FIELDS: [&str; 4] = ["mean_ms", "p50_ms", "p99_ms", "p999_ms"];

fn field(run: &Value, name: &str) -> f64 {
    run.get(name).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// B/A for each pair of runs.
fn ratios(a: &[Value], b: &[Value], name: &str) -> Vec<f64> {
    a.iter()
        .zip(b)
        .map(|(a, b)| {
            let (x, y) = (field(a, name), field(b, name));
            if x > 0.0 {
                y / x
            } else {
                f64::NAN
            }
        })
        .collect()
}

fn spread_json(values: &[f64]) -> Value {
    match spread(values) {
        Some(s) => json!({ "min": s.min, "median": s.median, "max": s.max, "per_run": values }),
        None => json!({ "min": null, "median": null, "max": null, "per_run": values }),
    }
}

/// Median of a field over runs.
fn median_of(runs: &[Value], name: &str) -> Option<f64> {
    spread(&runs.iter().map(|r| field(r, name)).collect::<Vec<_>>()).map(|s| s.median)
}

/// Builds the comparison object from the runs of each side.
pub fn summarize(config: &CompareConfig, a: &[Value], b: &[Value]) -> Value {
    let side = |name: &str, runs: &[Value], scenario: &str| {
        let mut medians = serde_json::Map::new();
        for f in std::iter::once(config.metric.as_str())
            .chain(LATENCY_FIELDS)
            .chain(["errors"])
        {
            medians.insert(f.to_string(), json!(median_of(runs, f)));
        }
        json!({ "name": name, "scenario": scenario, "runs": runs, "median": medians })
    };
    let mut latency_ratios = serde_json::Map::new();
    for f in LATENCY_FIELDS {
        latency_ratios.insert(f.to_string(), spread_json(&ratios(a, b, f)));
    }
    json!({
        "kind": "compare",
        "metric": config.metric,
        "runs": a.len().min(b.len()),
        "a": side(&config.name_a, a, config.a.scenario.name()),
        "b": side(&config.name_b, b, config.b.scenario.name()),
        "ratio": spread_json(&ratios(a, b, &config.metric)),
        "latency_ratios": latency_ratios,
    })
}

fn run_line(run: usize, side: &str, name: &str, metric: &str, value: &Value) -> String {
    format!(
        "{run:>3}  {side}  {name:<28.28} {:>14}  p50 {:>8.3}  p99 {:>8.3}  errors {}",
        format!("{:.1}", field(value, metric)),
        field(value, "p50_ms"),
        field(value, "p99_ms"),
        group_digits(field(value, "errors").max(0.0) as u64),
    )
}

pub fn run_compare(config: &CompareConfig) -> Result<(), String> {
    let mut a_runs = Vec::with_capacity(config.runs);
    let mut b_runs = Vec::with_capacity(config.runs);
    if !config.json {
        println!(
            "compare: A = {} ({}), B = {} ({}), {} interleaved runs each, metric {}",
            config.name_a,
            config.a.scenario.name(),
            config.name_b,
            config.b.scenario.name(),
            config.runs,
            config.metric
        );
        println!(
            "run  side name                         {:>14}",
            config.metric
        );
    }
    for run in 1..=config.runs {
        for (side, side_config, name) in [
            ("A", &config.a, &config.name_a),
            ("B", &config.b, &config.name_b),
        ] {
            if config.a.progress {
                eprintln!("[compare] run {run}/{} side {side}: {name}", config.runs);
            }
            let result = run_scenario(side_config)
                .map_err(|e| format!("run {run} side {side} ({name}): {e}"))?;
            let value = result.to_json();
            if value.get(&config.metric).and_then(Value::as_f64).is_none() {
                return Err(format!(
                    "metric {:?} is not a number in {} results",
                    config.metric,
                    side_config.scenario.name()
                ));
            }
            if !config.json {
                println!("{}", run_line(run, side, name, &config.metric, &value));
            }
            if side == "A" {
                a_runs.push(value)
            } else {
                b_runs.push(value)
            }
            let last = run == config.runs && side == "B";
            if !last {
                std::thread::sleep(config.pause);
            }
        }
    }
    let summary = summarize(config, &a_runs, &b_runs);
    if let Some(path) = &config.json_out {
        std::fs::write(path, format!("{summary:#}\n")).map_err(|e| format!("write {path}: {e}"))?;
    }
    if config.json {
        println!("{summary}");
    } else {
        let r = &summary["ratio"];
        println!(
            "median {}: A {:.1}  B {:.1}",
            config.metric,
            summary["a"]["median"][&config.metric]
                .as_f64()
                .unwrap_or(f64::NAN),
            summary["b"]["median"][&config.metric]
                .as_f64()
                .unwrap_or(f64::NAN)
        );
        println!(
            "ratio B/A {}: min {:.3}  median {:.3}  max {:.3}",
            config.metric,
            r["min"].as_f64().unwrap_or(f64::NAN),
            r["median"].as_f64().unwrap_or(f64::NAN),
            r["max"].as_f64().unwrap_or(f64::NAN)
        );
        for f in LATENCY_FIELDS {
            let l = &summary["latency_ratios"][f];
            println!(
                "ratio B/A {f}: min {:.3}  median {:.3}  max {:.3}",
                l["min"].as_f64().unwrap_or(f64::NAN),
                l["median"].as_f64().unwrap_or(f64::NAN),
                l["max"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{parse, Command};

    #[test]
    fn ratios_per_pair_with_spread() {
        let args: Vec<String> =
            "compare kv-get --target-a http://a:1 --target-b http://b:1 --runs 3"
                .split_whitespace()
                .map(String::from)
                .collect();
        let Command::Compare(config) = parse(&args).unwrap() else {
            panic!()
        };
        let a = vec![
            json!({"throughput_rps": 100.0, "p99_ms": 2.0}),
            json!({"throughput_rps": 200.0, "p99_ms": 2.0}),
            json!({"throughput_rps": 100.0, "p99_ms": 4.0}),
        ];
        let b = vec![
            json!({"throughput_rps": 50.0, "p99_ms": 1.0}),
            json!({"throughput_rps": 300.0, "p99_ms": 1.0}),
            json!({"throughput_rps": 80.0, "p99_ms": 1.0}),
        ];
        let s = summarize(&config, &a, &b);
        assert_eq!(s["ratio"]["min"], json!(0.5));
        assert_eq!(s["ratio"]["median"], json!(0.8));
        assert_eq!(s["ratio"]["max"], json!(1.5));
        assert_eq!(s["a"]["median"]["throughput_rps"], json!(100.0));
        assert_eq!(s["latency_ratios"]["p99_ms"]["median"], json!(0.5));
        assert_eq!(s["latency_ratios"]["p50_ms"]["median"], Value::Null);
        assert_eq!(s["runs"], json!(3));
    }
}
