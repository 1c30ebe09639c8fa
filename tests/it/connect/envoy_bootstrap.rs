//! The `Proxy.Config` keys that shape the Envoy bootstrap `praetor connect envoy` writes,
//! against real Envoy: `envoy_prometheus_bind_addr` answers `/metrics` with Envoy's
//! prometheus stats (and 404 elsewhere), `envoy_stats_bind_addr` answers `/stats`, an
//! extra static cluster shows in `/config_dump`, a statsd sink sends datagrams to a UDP
//! socket every flush interval; every such bootstrap passes `envoy --mode validate`, and
//! bad values end `connect envoy` non-zero with one readable line.

use crate::common;
use crate::envoy;

use common::{praetor_binary, Agent, TempDir};
use envoy::{envoy_binary, free_port, register, wait_for, Envoy};
use serde_json::{json, Value};
use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::Duration;

/// How long Envoy may take to start and serve its static listeners.
const ENVOY_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Registers `web` with a sidecar whose `Proxy.Config` is `config`.
fn register_web(agent: &Agent, config: Value) {
    let ip = agent.ip.to_string();
    register(
        agent,
        json!({
            "Name": "web", "Port": free_port(agent.ip), "Address": ip,
            "Connect": {"SidecarService": {
                "Address": ip, "Port": free_port(agent.ip),
                "Proxy": {"LocalServiceAddress": ip, "Config": config},
            }}
        }),
    );
}

/// `(status, body)` of a GET with curl.
fn curl(url: &str) -> Result<(u16, String), String> {
    let output = Command::new("curl")
        .args(["-s", "--max-time", "5", "-w", "\n%{http_code}", url])
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').ok_or("no status")?;
    let status: u16 = status.trim().parse().map_err(|_| text.clone())?;
    if status == 0 {
        return Err(format!("no answer from {url}"));
    }
    Ok((status, body.to_string()))
}

#[test]
fn prometheus_stats_and_extra_clusters_reach_envoy() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("envoy-bootstrap-keys");
    let ip = agent.ip;
    let prometheus = SocketAddr::new(ip, free_port(ip));
    let stats = SocketAddr::new(ip, free_port(ip));
    let statsd = UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
    statsd
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let extra = json!({
        "name": "extra_static_zipkin",
        "connect_timeout": "4.321s",
        "type": "STATIC",
        "load_assignment": {"cluster_name": "extra_static_zipkin", "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": ip.to_string(), "port_value": 9411}}}}
        ]}]}
    });
    register_web(
        &agent,
        json!({
            "envoy_prometheus_bind_addr": prometheus.to_string(),
            "envoy_stats_bind_addr": stats.to_string(),
            "envoy_extra_static_clusters_json": extra.to_string(),
            "envoy_statsd_url": format!("udp://{}", statsd.local_addr().unwrap()),
            "envoy_stats_flush_interval": "1s",
            "envoy_stats_tags": ["team=payments"],
        }),
    );
    let envoy = Envoy::start(&agent, &dir, "web", &["-sidecar-for", "web"]);
    let metrics = wait_for(
        "the prometheus listener answers",
        ENVOY_READY_TIMEOUT,
        || match curl(&format!("http://{prometheus}/metrics"))? {
            (200, body) => Ok(body),
            (status, body) => Err(format!("{status}: {body}\n{}", envoy.log())),
        },
    );
    assert!(
        metrics.contains("# TYPE envoy_"),
        "not Envoy's prometheus stats: {metrics}"
    );
    // The tag from `envoy_stats_tags` labels every stat.
    assert!(metrics.contains("team=\"payments\""), "{metrics}");
    // Only `/metrics`: the rest of the admin stays closed.
    assert_eq!(
        curl(&format!("http://{prometheus}/config_dump")).unwrap().0,
        404
    );
    assert_eq!(curl(&format!("http://{prometheus}/stats")).unwrap().0, 404);
    // `envoy_stats_bind_addr` passes the `/stats` prefix only.
    let (status, body) = curl(&format!("http://{stats}/stats")).unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("server.live: 1"), "{body}");
    assert_eq!(curl(&format!("http://{stats}/clusters")).unwrap().0, 404);

    let dump = envoy.admin_get("/config_dump");
    assert!(dump.contains("\"extra_static_zipkin\""), "{dump}");
    assert!(dump.contains("4.321s"), "{dump}");
    assert!(dump.contains("envoy_prometheus_metrics_listener"));

    // The statsd sink flushes every second to our UDP socket.
    let mut datagram = [0u8; 65536];
    let (n, _) = statsd
        .recv_from(&mut datagram)
        .expect("a statsd datagram within 10s");
    // Statsd lines: `envoy.<stat>:<value>|<type>`.
    let text = String::from_utf8_lossy(&datagram[..n]);
    assert!(
        text.lines()
            .all(|l| l.starts_with("envoy.") && l.contains(':') && l.contains('|')),
        "{text}"
    );
}

/// Every bootstrap shaped by `Proxy.Config` is one Envoy accepts; bad values are refused
/// before Envoy starts.
#[test]
fn bootstrap_keys_pass_envoy_validation_and_bad_values_are_refused() {
    let agent = Agent::dev(&[]);
    let dir = TempDir::new("envoy-bootstrap-validate");
    let ip = agent.ip.to_string();
    let http = format!("-http-addr={}", agent.http_addr());
    let cluster = |name: &str| {
        json!({
            "name": name, "connect_timeout": "1s", "type": "STATIC",
            "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [
                {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 9411}}}}
            ]}]}
        })
        .to_string()
    };
    let listener = json!({
        "name": "extra_tcp",
        "address": {"socket_address": {"address": ip, "port_value": 0}},
        "filter_chains": [{"filters": [{"name": "envoy.filters.network.tcp_proxy", "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
            "stat_prefix": "extra", "cluster": "zipkin"
        }}]}]
    })
    .to_string();
    let tracing = json!({"http": {"name": "envoy.tracers.zipkin", "typedConfig": {
        "@type": "type.googleapis.com/envoy.config.trace.v3.ZipkinConfig",
        "collector_cluster": "zipkin",
        "collector_endpoint_version": "HTTP_JSON",
        "collector_endpoint": "/api/v2/spans"
    }}})
    .to_string();
    let cases = [
        json!({"envoy_prometheus_bind_addr": format!("{ip}:9102"), "envoy_stats_bind_addr": format!("{ip}:9103")}),
        json!({
            "envoy_statsd_url": "udp://127.0.0.1:8125",
            "envoy_dogstatsd_url": "unix:///tmp/dogstatsd.sock",
            "envoy_stats_flush_interval": "5s",
            "envoy_stats_tags": ["team=payments", "canary"],
        }),
        json!({
            "envoy_extra_static_clusters_json": format!("{}, {}", cluster("zipkin"), cluster("other")),
            "envoy_extra_static_listeners_json": listener,
            "envoy_tracing_json": tracing,
            "envoy_extra_stats_sinks_json": json!({"name": "envoy.stat_sinks.statsd", "typed_config": {
                "@type": "type.googleapis.com/envoy.config.metrics.v3.StatsdSink",
                "tcp_cluster_name": "zipkin"
            }}).to_string(),
            "envoy_stats_config_json": json!({"use_all_default_tags": false, "stats_tags": [
                {"tag_name": "only", "fixed_value": "this"}
            ]}).to_string(),
        }),
        json!({
            "envoy_extra_static_clusters_json": json!({"name": "self_admin", "connect_timeout": "2s",
                "type": "STATIC", "load_assignment": {"cluster_name": "self_admin", "endpoints": []}}).to_string(),
            "envoy_prometheus_bind_addr": format!("{ip}:9102"),
        }),
    ];
    for (i, config) in cases.iter().enumerate() {
        register_web(&agent, config.clone());
        let output = Command::new(praetor_binary())
            .args([
                "connect",
                "envoy",
                "-bootstrap",
                &http,
                "-sidecar-for",
                "web",
            ])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{config}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("not applied"), "{config}: {stderr}");
        let path = dir.path().join(format!("bootstrap-{i}.json"));
        std::fs::write(&path, &output.stdout).unwrap();
        let validate = Command::new(envoy_binary())
            .args(["--mode", "validate", "--config-path"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            validate.status.success(),
            "{config}: envoy refused the bootstrap: {}\n{}",
            String::from_utf8_lossy(&validate.stdout),
            String::from_utf8_lossy(&validate.stderr)
        );
    }

    let refused = [
        (
            json!({"envoy_statsd_url": "not-a-url"}),
            "unsupported address protocol \"\" for envoy.stat_sinks.statsd sink",
        ),
        (
            json!({"envoy_dogstatsd_url": "http://127.0.0.1:8125"}),
            "unsupported address protocol \"http\" for envoy.stat_sinks.dog_statsd sink",
        ),
        (
            json!({"envoy_extra_static_clusters_json": "{\"name\": \"x\""}),
            "failed to parse envoy_extra_static_clusters_json: ",
        ),
        (
            json!({"envoy_tracing_json": "not json"}),
            "failed to parse envoy_tracing_json: ",
        ),
        (
            json!({"envoy_prometheus_bind_addr": "9102"}),
            "invalid envoy_prometheus_metrics bind address: ",
        ),
    ];
    for (config, message) in refused {
        register_web(&agent, config.clone());
        let output = Command::new(praetor_binary())
            .args([
                "connect",
                "envoy",
                "-bootstrap",
                &http,
                "-sidecar-for",
                "web",
            ])
            .output()
            .unwrap();
        assert!(!output.status.success(), "{config}");
        assert!(output.stdout.is_empty(), "{config}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{config}: {stderr}");
        assert!(stderr.contains(message), "{config}: {stderr}");
    }

    // The template key is not applied, and `connect envoy` says so.
    register_web(&agent, json!({"envoy_bootstrap_json_tpl": "{}"}));
    let output = Command::new(praetor_binary())
        .args([
            "connect",
            "envoy",
            "-bootstrap",
            &http,
            "-sidecar-for",
            "web",
        ])
        .output()
        .unwrap();
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr)
        .contains("Proxy.Config envoy_bootstrap_json_tpl accepted but not applied"));
}
