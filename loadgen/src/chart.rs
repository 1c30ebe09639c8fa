//! `loadgen chart`: draws a result JSON as a PNG.
//!
//! A comparison (`"kind": "compare"`) becomes two panels: the metric per run for A and B side
//! by side, and the median latencies (mean, p50, p99, p99.9) of each side. A single run
//! becomes its latency-by-percentile curve. Text is rendered with a TrueType font loaded at
//! run time (`LOADGEN_FONT`, else DejaVu Sans from the usual system paths), so the binary has
//! no system library dependency for charts.

use plotters::prelude::*;
use plotters::style::FontStyle;
use serde_json::Value;

use crate::config::ChartConfig;

/// Chart size in pixels.
const WIDTH_PX: u32 = 1280;
const HEIGHT_PX: u32 = 540;
/// Where a TrueType font is looked for when `LOADGEN_FONT` is not set.
const FONT_PATHS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];
/// Largest font file accepted.
const FONT_BYTES_MAX: u64 = 32 * 1024 * 1024;
/// Largest input JSON accepted.
const INPUT_BYTES_MAX: u64 = 64 * 1024 * 1024;

const COLOR_A: RGBColor = RGBColor(0x4c, 0x72, 0xb0);
const COLOR_B: RGBColor = RGBColor(0xdd, 0x84, 0x52);

fn load_font() -> Result<(), String> {
    let path = std::env::var("LOADGEN_FONT")
        .ok()
        .or_else(|| {
            FONT_PATHS
                .iter()
                .find(|p| std::path::Path::new(p).exists())
                .map(|p| p.to_string())
        })
        .ok_or("no TrueType font found for chart text; set LOADGEN_FONT=/path/to/font.ttf")?;
    let size = std::fs::metadata(&path)
        .map_err(|e| format!("{path}: {e}"))?
        .len();
    if size > FONT_BYTES_MAX {
        return Err(format!("{path}: font larger than {FONT_BYTES_MAX} bytes"));
    }
    let bytes = std::fs::read(&path).map_err(|e| format!("{path}: {e}"))?;
    // plotters keeps fonts for the life of the process; one font per process is leaked once.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{path}: not a usable TrueType font"))
}

pub fn draw(config: &ChartConfig) -> Result<(), String> {
    let size = std::fs::metadata(&config.input)
        .map_err(|e| format!("{}: {e}", config.input))?
        .len();
    if size > INPUT_BYTES_MAX {
        return Err(format!(
            "{}: larger than {INPUT_BYTES_MAX} bytes",
            config.input
        ));
    }
    let text =
        std::fs::read_to_string(&config.input).map_err(|e| format!("{}: {e}", config.input))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", config.input))?;
    load_font()?;
    let result = if value.get("kind").and_then(Value::as_str) == Some("compare") {
        draw_compare(config, &value)
    } else {
        draw_run(config, &value)
    };
    result.map_err(|e| format!("chart {}: {e}", config.output))
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64().filter(|x| x.is_finite())
}

/// Grouped bars: `groups[g][s]` is series `s` of group `g`; returns the y range top.
fn draw_grouped_bars(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    group_labels: &[String],
    series: &[(&str, RGBColor, Vec<Option<f64>>)],
    y_desc: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let top = series
        .iter()
        .flat_map(|(_, _, v)| v.iter().flatten().copied())
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.18;
    let groups = group_labels.len().max(1);
    let labels = group_labels.to_vec();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(72)
        .build_cartesian_2d(-0.5f64..(groups as f64 - 0.5), 0f64..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.min(40))
        .x_label_formatter(&move |x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&move |y| {
            if top >= 100.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        })
        .y_desc(y_desc)
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .draw()?;
    let n = series.len().max(1) as f64;
    let width = 0.8 / n;
    for (s, (name, color, values)) in series.iter().enumerate() {
        let color = *color;
        let bars = values.iter().enumerate().filter_map(move |(g, v)| {
            let v = (*v)?;
            let x0 = g as f64 - 0.4 + s as f64 * width;
            Some(Rectangle::new(
                [(x0 + 0.01, 0.0), (x0 + width - 0.01, v)],
                color.filled(),
            ))
        });
        chart
            .draw_series(bars)?
            .label(name.to_string())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

fn draw_compare(config: &ChartConfig, value: &Value) -> Result<(), Box<dyn std::error::Error>> {
    let metric = value["metric"]
        .as_str()
        .unwrap_or("throughput_rps")
        .to_string();
    let name_a = value["a"]["name"].as_str().unwrap_or("A").to_string();
    let name_b = value["b"]["name"].as_str().unwrap_or("B").to_string();
    let runs_a: Vec<Value> = value["a"]["runs"].as_array().cloned().unwrap_or_default();
    let runs_b: Vec<Value> = value["b"]["runs"].as_array().cloned().unwrap_or_default();
    let runs = runs_a.len().max(runs_b.len());
    let per_run =
        |runs: &[Value]| -> Vec<Option<f64>> { runs.iter().map(|r| num(&r[&metric])).collect() };

    let root = BitMapBackend::new(&config.output, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = config
        .title
        .clone()
        .unwrap_or_else(|| format!("{name_b} vs {name_a}"));
    let ratio = num(&value["ratio"]["median"]);
    let heading = match ratio {
        Some(r) => format!("{title}   (B/A {metric}: median {r:.3})"),
        None => title,
    };
    let (header, body) = root.split_vertically(40);
    header.draw(&Text::new(
        heading,
        (14, 10),
        ("sans-serif", 22).into_font(),
    ))?;
    let (left, right) = body.split_horizontally(WIDTH_PX * 55 / 100);

    let run_labels: Vec<String> = (1..=runs).map(|i| format!("run {i}")).collect();
    draw_grouped_bars(
        &left,
        &format!("{metric} per run (interleaved A, B)"),
        &run_labels,
        &[
            (&format!("A: {name_a}"), COLOR_A, per_run(&runs_a)),
            (&format!("B: {name_b}"), COLOR_B, per_run(&runs_b)),
        ],
        &metric,
    )?;

    let fields = [
        ("mean_ms", "mean"),
        ("p50_ms", "p50"),
        ("p99_ms", "p99"),
        ("p999_ms", "p99.9"),
    ];
    let medians = |side: &str| -> Vec<Option<f64>> {
        fields
            .iter()
            .map(|(f, _)| num(&value[side]["median"][*f]))
            .collect()
    };
    let (la, lb) = (medians("a"), medians("b"));
    if la.iter().chain(&lb).any(Option::is_some) {
        let labels: Vec<String> = fields.iter().map(|(_, l)| l.to_string()).collect();
        draw_grouped_bars(
            &right,
            "latency, median over runs",
            &labels,
            &[
                (&format!("A: {name_a}"), COLOR_A, la),
                (&format!("B: {name_b}"), COLOR_B, lb),
            ],
            "ms",
        )?;
    } else {
        right.draw(&Text::new(
            "no latency data",
            (40, 40),
            ("sans-serif", 18).into_font(),
        ))?;
    }
    root.present()?;
    Ok(())
}

/// A `[[percentile, ms], …]` curve from a run's JSON.
fn curve(value: &Value) -> Vec<(f64, f64)> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((num(&p[0])?, num(&p[1])?)))
                .collect()
        })
        .unwrap_or_default()
}

/// The figures printed under a single run's title, chosen by scenario.
fn run_facts(value: &Value) -> String {
    let fanout = value["scenario"].as_str() == Some("blocking-fanout");
    let keys: &[(&str, &str)] = if fanout {
        &[
            ("answered", "answered"),
            ("watchers", "of"),
            ("wake_p99_ms", "p99 ms"),
            ("wake_from_write_sent_p99_ms", "p99 from send ms"),
            ("write_latency_ms", "write ms"),
            ("rss_per_watcher_bytes", "RSS B/watcher"),
            ("others_woken", "others woken"),
        ]
    } else {
        &[
            ("throughput_rps", "req/s"),
            ("p50_ms", "p50 ms"),
            ("p99_ms", "p99 ms"),
            ("errors", "errors"),
        ]
    };
    keys.iter()
        .filter_map(|(key, label)| {
            let v = num(&value[*key])?;
            Some(if v.fract() == 0.0 {
                format!("{label} {v:.0}")
            } else {
                format!("{label} {v:.2}")
            })
        })
        .collect::<Vec<_>>()
        .join("   ")
}

fn draw_run(config: &ChartConfig, value: &Value) -> Result<(), Box<dyn std::error::Error>> {
    let points = curve(&value["percentiles"]);
    if points.is_empty() {
        return Err(
            "the input has neither \"kind\": \"compare\" nor a \"percentiles\" curve".into(),
        );
    }
    let scenario = value["scenario"].as_str().unwrap_or("run");
    let title = config
        .title
        .clone()
        .unwrap_or_else(|| format!("{scenario}: latency by percentile"));
    let root = BitMapBackend::new(&config.output, (WIDTH_PX, HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE)?;
    let (header, body) = root.split_vertically(64);
    header.draw(&Text::new(title, (14, 8), ("sans-serif", 22).into_font()))?;
    header.draw(&Text::new(
        run_facts(value),
        (14, 38),
        ("sans-serif", 16).into_font(),
    ))?;
    let labels: Vec<String> = points.iter().map(|(p, _)| format!("p{p}")).collect();
    let mut series: Vec<(String, RGBColor, Vec<Option<f64>>)> = Vec::new();
    if scenario == "blocking-fanout" {
        series.push((
            "after the write's response".into(),
            COLOR_A,
            points.iter().map(|(_, ms)| Some(*ms)).collect(),
        ));
        let from_send = curve(&value["percentiles_from_write_sent"]);
        if from_send.len() == points.len() {
            series.push((
                "after the write was sent".into(),
                COLOR_B,
                from_send.iter().map(|(_, ms)| Some(*ms)).collect(),
            ));
        }
    } else {
        let name = value["label"]
            .as_str()
            .or(value["target"].as_str())
            .unwrap_or(scenario)
            .to_string();
        series.push((
            name,
            COLOR_A,
            points.iter().map(|(_, ms)| Some(*ms)).collect(),
        ));
    }
    let borrowed: Vec<(&str, RGBColor, Vec<Option<f64>>)> = series
        .iter()
        .map(|(n, c, v)| (n.as_str(), *c, v.clone()))
        .collect();
    let caption = if scenario == "blocking-fanout" {
        "wake-up latency at percentile"
    } else {
        "latency at percentile"
    };
    draw_grouped_bars(&body, caption, &labels, &borrowed, "ms")?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn draws_a_comparison_and_a_run_as_png() {
        if load_font().is_err() {
            eprintln!("SKIPPED: no TrueType font on this machine (set LOADGEN_FONT)");
            return;
        }
        let dir = std::env::temp_dir().join(format!("loadgen-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let compare = json!({
            "kind": "compare", "metric": "throughput_rps",
            "a": {"name": "wrk", "runs": [{"throughput_rps": 100.0}, {"throughput_rps": 110.0}],
                  "median": {"p50_ms": 1.0, "p99_ms": 3.0, "mean_ms": 1.2, "p999_ms": 5.0}},
            "b": {"name": "loadgen", "runs": [{"throughput_rps": 120.0}, {"throughput_rps": 118.0}],
                  "median": {"p50_ms": 0.8, "p99_ms": 2.0, "mean_ms": 1.0, "p999_ms": null}},
            "ratio": {"median": 1.13}
        });
        let fanout = json!({
            "scenario": "blocking-fanout", "answered": 10, "watchers": 10, "wake_p99_ms": 4.5,
            "percentiles": [[50.0, 1.0], [99.0, 4.5], [100.0, 9.0]],
            "percentiles_from_write_sent": [[50.0, 2.0], [99.0, 5.5], [100.0, 10.0]]
        });
        let run = json!({"scenario": "kv-get", "throughput_rps": 10.5, "percentiles": [[50.0, 1.0], [100.0, 2.0]]});
        for (name, v) in [("compare", compare), ("fanout", fanout), ("run", run)] {
            let input = dir.join(format!("{name}.json"));
            let output = dir.join(format!("{name}.png"));
            std::fs::write(&input, v.to_string()).unwrap();
            draw(&ChartConfig {
                input: input.to_string_lossy().into(),
                output: output.to_string_lossy().into(),
                title: None,
            })
            .unwrap();
            let png = std::fs::read(&output).unwrap();
            assert!(png.starts_with(b"\x89PNG"), "{name} is not a PNG");
            assert!(png.len() > 5_000, "{name} PNG suspiciously small");
        }
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{}").unwrap();
        assert!(draw(&ChartConfig {
            input: bad.to_string_lossy().into(),
            output: dir.join("bad.png").to_string_lossy().into(),
            title: None
        })
        .is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
