//! Agent metrics for `/v1/agent/metrics`: counters bumped with relaxed atomics (no locks on
//! any path) and gauges the agent samples when the endpoint is read. Rendered as go-metrics'
//! `DisplayMetrics` JSON, or in the Prometheus text format with `?format=prometheus`.

use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonically increasing counter.
pub struct Counter {
    pub name: &'static str,
    pub help: &'static str,
    value: AtomicU64,
}

impl Counter {
    pub const fn new(name: &'static str, help: &'static str) -> Counter {
        Counter {
            name,
            help,
            value: AtomicU64::new(0),
        }
    }
    pub fn add(&self, n: u64) {
        self.value.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

pub static CATALOG_REGISTERS: Counter = Counter::new(
    "consul.client.api.catalog_register",
    "Catalog registrations received over HTTP.",
);
pub static CATALOG_DEREGISTERS: Counter = Counter::new(
    "consul.client.api.catalog_deregister",
    "Catalog deregistrations received over HTTP.",
);
pub static AGENT_SERVICE_REGISTERS: Counter = Counter::new(
    "consul.client.api.agent_service_register",
    "Services registered through the agent API.",
);
pub static CHECK_RUNS: Counter = Counter::new("consul.agent.checks.runs", "Check probes run.");
pub static CHECK_STATUS_CHANGES: Counter = Counter::new(
    "consul.agent.checks.status_changes",
    "Local check status transitions.",
);
pub static SYNC_ROUNDS: Counter = Counter::new(
    "consul.agent.anti_entropy.syncs",
    "Anti-entropy sync rounds that sent changes.",
);
pub static FULL_SYNCS: Counter = Counter::new(
    "consul.agent.anti_entropy.full_syncs",
    "Anti-entropy full comparisons against the catalog.",
);
pub static SYNC_OPERATIONS: Counter = Counter::new(
    "consul.agent.anti_entropy.operations",
    "Catalog operations sent by anti-entropy.",
);
pub static SYNC_ERRORS: Counter = Counter::new(
    "consul.agent.anti_entropy.errors",
    "Anti-entropy operations the catalog refused or that failed to reach it.",
);

/// Every counter, for rendering.
pub fn counters() -> [&'static Counter; 9] {
    [
        &CATALOG_REGISTERS,
        &CATALOG_DEREGISTERS,
        &AGENT_SERVICE_REGISTERS,
        &CHECK_RUNS,
        &CHECK_STATUS_CHANGES,
        &SYNC_ROUNDS,
        &FULL_SYNCS,
        &SYNC_OPERATIONS,
        &SYNC_ERRORS,
    ]
}

/// A gauge sampled for one response.
pub struct Gauge {
    pub name: &'static str,
    pub help: &'static str,
    pub value: f64,
}

/// go-metrics `DisplayMetrics` JSON, stamped with `now_unix_secs`.
pub fn render_json(gauges: &[Gauge], now_unix_secs: u64, pretty: bool) -> Vec<u8> {
    let counters: Vec<serde_json::Value> = counters()
        .iter()
        .map(|c| {
            let v = c.get() as f64;
            serde_json::json!({
                "Name": c.name, "Count": c.get(), "Rate": v / 10.0, "Sum": v,
                "Min": if c.get() > 0 { 1.0 } else { 0.0 }, "Max": v, "Mean": if c.get() > 0 { 1.0 } else { 0.0 },
                "Stddev": 0.0, "Labels": {}
            })
        })
        .collect();
    let gauges: Vec<serde_json::Value> = gauges
        .iter()
        .map(|g| serde_json::json!({"Name": g.name, "Value": g.value, "Labels": {}}))
        .collect();
    let body = serde_json::json!({
        "Timestamp": format!("{now_unix_secs} +0000 UTC"),
        "Gauges": gauges,
        "Points": [],
        "Counters": counters,
        "Samples": [],
    });
    let mut out = Vec::new();
    crate::consul::json::write_serde(&mut out, &body, pretty);
    out
}

fn prometheus_name(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The Prometheus text exposition format.
pub fn render_prometheus(gauges: &[Gauge]) -> Vec<u8> {
    let mut out = String::new();
    for g in gauges {
        let name = prometheus_name(g.name);
        out.push_str(&format!(
            "# HELP {name} {}\n# TYPE {name} gauge\n{name} {}\n",
            g.help, g.value
        ));
    }
    for c in counters() {
        let name = prometheus_name(c.name);
        out.push_str(&format!(
            "# HELP {name} {}\n# TYPE {name} counter\n{name} {}\n",
            c.help,
            c.get()
        ));
    }
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_both_formats() {
        CHECK_RUNS.add(2);
        let gauges = [Gauge {
            name: "consul.runtime.alloc_bytes",
            help: "Resident memory.",
            value: 5.0,
        }];
        let text = String::from_utf8(render_prometheus(&gauges)).unwrap();
        assert!(text
            .contains("# TYPE consul_runtime_alloc_bytes gauge\nconsul_runtime_alloc_bytes 5\n"));
        assert!(text.contains("consul_agent_checks_runs "));
        let json: serde_json::Value =
            serde_json::from_slice(&render_json(&gauges, 1_700_000_000, false)).unwrap();
        assert_eq!(json["Gauges"][0]["Value"], 5.0);
        assert_eq!(json["Timestamp"], "1700000000 +0000 UTC");
        assert!(json["Counters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["Name"] == "consul.agent.checks.runs"));
    }
}
