//! Runs one scenario from its configuration: setup, load, and the result.

use std::time::{Duration, Instant};

use serde_json::{json, Map};

use crate::config::{RunConfig, Scenario};
use crate::engine::ThreadStats;
use crate::net::{parse_target, vm_rss_kib};
use crate::report::{insert_rss, RunResult};
use crate::setup::{json_array_len, preload_keys, register_instances, BlockingClient};
use crate::workloads::{health_path, make_workload};

/// Runs `config` to completion.
pub fn run_scenario(config: &RunConfig) -> Result<RunResult, String> {
    config.validate()?;
    let target = parse_target(config.target.as_deref().unwrap_or_default())?;
    let label = config
        .label
        .clone()
        .unwrap_or_else(|| config.scenario.name().to_string());
    let mut extra = Map::new();
    match config.scenario {
        Scenario::Dns => return crate::dnsrun::run_dns(config, &target, &label),
        Scenario::BlockingFanout => return crate::fanout::run_fanout(config, &target),
        Scenario::Register => return run_register(config, &target),
        Scenario::TcpStream | Scenario::TcpConnect => {
            return crate::tcprun::run_tcp(config, &target, &label)
        }
        Scenario::KvGet | Scenario::KvMixed if config.preload => preload_keys(config, &target)?,
        Scenario::HealthQuery => {
            if config.instances > 0 {
                register_instances(config, &target, &config.service, config.instances)?;
            }
            let mut client = BlockingClient::new(&target, config.timeout);
            let response =
                client.request("GET", &health_path(config, &config.service), None, b"")?;
            if response.status != 200 {
                return Err(format!(
                    "health query answered {}: {}",
                    response.status,
                    response.body_text()
                ));
            }
            extra.insert(
                "instances_visible".into(),
                json!(json_array_len(&response.body)),
            );
            extra.insert("response_bytes".into(), json!(response.body.len()));
        }
        _ => {}
    }
    let per_thread = crate::httprun::run_http(config, &target, &label, |index| {
        make_workload(config, &target, index)
    })?;
    let mut stats = ThreadStats::default();
    for s in &per_thread {
        stats.merge(s);
    }
    let measured = config.duration;
    let ops_per_s = crate::report::per_second(stats.ops, measured);
    match config.scenario {
        Scenario::CatalogChurn => {
            extra.insert(
                "registrations_per_s".into(),
                json!((ops_per_s * 1000.0).round() / 1000.0),
            );
        }
        Scenario::SessionLocks => {
            extra.insert(
                "cycles_per_s".into(),
                json!((ops_per_s * 1000.0).round() / 1000.0),
            );
        }
        Scenario::Txn => {
            extra.insert("txn_ops".into(), json!(config.txn_ops));
            extra.insert(
                "keys_written_per_s".into(),
                json!((ops_per_s * config.txn_ops as f64 * 1000.0).round() / 1000.0),
            );
        }
        _ => {}
    }
    let multi_step = matches!(
        config.scenario,
        Scenario::SessionLocks | Scenario::CatalogChurn
    );
    Ok(RunResult {
        config: config.clone(),
        stats,
        measured,
        extra,
        multi_step,
    })
}

/// `register`: registers `--instances` instances and reports the rate and, with `--rss-pid`,
/// the target's resident memory per instance.
fn run_register(config: &RunConfig, target: &crate::net::Target) -> Result<RunResult, String> {
    let rss_before = config.rss_pid.and_then(vm_rss_kib);
    let started = Instant::now();
    register_instances(config, target, &config.service, config.instances)?;
    let elapsed = started.elapsed().max(Duration::from_micros(1));
    // Let the target settle (anti-entropy, allocator) before its memory is read.
    if config.rss_pid.is_some() {
        std::thread::sleep(config.settle);
    }
    let rss_after = config.rss_pid.and_then(vm_rss_kib);
    let mut stats = ThreadStats {
        requests_ok: config.instances as u64,
        ops: config.instances as u64,
        ..Default::default()
    };
    stats.sent = stats.requests_ok;
    let mut extra = Map::new();
    extra.insert("instances".into(), json!(config.instances));
    extra.insert(
        "registrations_per_s".into(),
        json!(config.instances as f64 / elapsed.as_secs_f64()),
    );
    insert_rss(
        &mut extra,
        rss_before,
        rss_after,
        config.instances,
        "rss_per_instance_bytes",
    );
    let mut result_config = config.clone();
    result_config.duration = elapsed;
    Ok(RunResult {
        config: result_config,
        stats,
        measured: elapsed,
        extra,
        multi_step: false,
    })
}
