//! The `dns_config` block and the DNS keys at the top level (`domain`, `alt_domain`,
//! `recursors`): Consul's defaults, its limits, and the checks it makes on domains and
//! recursor addresses.

use super::values::{get_bool, get_duration, get_i64, get_string, get_strings, get_u32};
use serde_json::{Map, Value};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Consul's default `dns_config.udp_answer_limit`.
pub const DNS_UDP_ANSWER_LIMIT_DEFAULT: usize = 3;
/// Consul's default `dns_config.max_stale`: 87600h (ten years, i.e. effectively unbounded).
pub const DNS_MAX_STALE_DEFAULT: Duration = Duration::from_secs(87_600 * 3600);
/// Consul's default `dns_config.recursor_timeout`.
pub const DNS_RECURSOR_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);
/// Port assumed for a recursor given without one.
pub const DNS_RECURSOR_PORT_DEFAULT: u16 = 53;
/// Most recursors praetor accepts; more would only lengthen the worst-case failover.
pub const DNS_RECURSORS_MAX: usize = 16;

/// Consul's `dns_config.soa` block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SoaConfig {
    pub refresh_seconds: u32,
    pub retry_seconds: u32,
    pub expire_seconds: u32,
    pub min_ttl_seconds: u32,
}

/// How recursors are tried: in order, or starting from a random one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecursorStrategy {
    Sequential,
    Random,
}

/// The DNS interface's configuration, with Consul's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct DnsConfig {
    /// The domain answered authoritatively, lowercase, without the trailing dot ("consul").
    pub domain: String,
    /// A second domain answered like `domain` (`alt_domain`), if any.
    pub alt_domain: Option<String>,
    /// Upstream servers for names outside the domains, tried per `recursor_strategy`.
    pub recursors: Vec<SocketAddr>,
    pub recursor_strategy: RecursorStrategy,
    pub recursor_timeout: Duration,
    pub allow_stale: bool,
    pub max_stale: Duration,
    pub node_ttl: Duration,
    /// `service_ttl`: exact service names, and prefixes (keys ending in `*`, stored without it).
    pub service_ttl_exact: Vec<(String, Duration)>,
    pub service_ttl_prefix: Vec<(String, Duration)>,
    pub udp_answer_limit: usize,
    /// Most A/AAAA answers per service lookup (0: no limit).
    pub a_record_limit: usize,
    pub enable_truncate: bool,
    pub only_passing: bool,
    pub enable_additional_node_meta_txt: bool,
    pub soa: SoaConfig,
    /// The top-level `translate_wan_addrs`: answers about another datacenter's nodes use
    /// their `wan` tagged addresses.
    pub translate_wan_addrs: bool,
}

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            domain: "consul".to_string(),
            alt_domain: None,
            recursors: Vec::new(),
            recursor_strategy: RecursorStrategy::Sequential,
            recursor_timeout: DNS_RECURSOR_TIMEOUT_DEFAULT,
            allow_stale: true,
            max_stale: DNS_MAX_STALE_DEFAULT,
            node_ttl: Duration::ZERO,
            service_ttl_exact: Vec::new(),
            service_ttl_prefix: Vec::new(),
            udp_answer_limit: DNS_UDP_ANSWER_LIMIT_DEFAULT,
            a_record_limit: 0,
            enable_truncate: false,
            only_passing: false,
            enable_additional_node_meta_txt: true,
            soa: SoaConfig {
                refresh_seconds: 3600,
                retry_seconds: 600,
                expire_seconds: 86_400,
                min_ttl_seconds: 0,
            },
            translate_wan_addrs: false,
        }
    }
}

impl DnsConfig {
    /// The TTL for a service: an exact `service_ttl` key wins, then the longest matching
    /// `prefix*` key (`*` alone matches everything), else 0.
    pub fn service_ttl(&self, service: &str) -> Duration {
        if let Some((_, ttl)) = self
            .service_ttl_exact
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(service))
        {
            return *ttl;
        }
        self.service_ttl_prefix
            .iter()
            .filter(|(prefix, _)| {
                service.len() >= prefix.len()
                    && service.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
            })
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, ttl)| *ttl)
            .unwrap_or(Duration::ZERO)
    }
}

/// Normalizes a domain: lowercase, no leading or trailing dot, valid labels.
pub(super) fn normalize_domain(key: &str, text: &str) -> Result<String, String> {
    let domain = text.trim().trim_matches('.').to_ascii_lowercase();
    if domain.is_empty() {
        return Err(format!("{key}: must not be empty or the root"));
    }
    crate::proto::dns::WireName::from_dotted(&domain)
        .map_err(|_| format!("{key}: {text:?} is not a valid domain name"))?;
    Ok(domain)
}

/// Parses a recursor address: `ip`, `ip:port`, `[ipv6]:port` or a bare IPv6 address.
pub fn parse_recursor(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Ok(ip) = text
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        return Ok(SocketAddr::new(ip, DNS_RECURSOR_PORT_DEFAULT));
    }
    Err(format!(
        "recursors: {text:?} is not an IP address with an optional port"
    ))
}

pub(super) fn dns_config_from(raw: &Map<String, Value>) -> Result<DnsConfig, String> {
    let mut config = DnsConfig {
        translate_wan_addrs: get_bool(raw, "translate_wan_addrs")?.unwrap_or(false),
        ..DnsConfig::default()
    };
    if let Some(domain) = get_string(raw, "domain")? {
        config.domain = normalize_domain("domain", &domain)?;
    }
    if let Some(alt) = get_string(raw, "alt_domain")? {
        if !alt.trim().trim_matches('.').is_empty() {
            let alt = normalize_domain("alt_domain", &alt)?;
            if alt == config.domain {
                return Err("alt_domain: must differ from domain".to_string());
            }
            config.alt_domain = Some(alt);
        }
    }
    let empty = Map::new();
    let section = match raw.get("dns_config") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(other) => return Err(format!("dns_config: expected an object, got {other}")),
    };
    let recursors = get_strings(raw, "recursors")?;
    if recursors.len() > DNS_RECURSORS_MAX {
        return Err(format!(
            "recursors: at most {DNS_RECURSORS_MAX} are supported, got {}",
            recursors.len()
        ));
    }
    config.recursors = recursors
        .iter()
        .map(|r| parse_recursor(r))
        .collect::<Result<_, _>>()?;
    apply_staleness_and_recursion(section, &mut config)?;
    apply_service_ttls(section, &mut config)?;
    apply_answer_settings(section, &mut config)?;
    if let Some(Value::Object(soa)) = section.get("soa") {
        let field = |key: &str, default: u32| -> Result<u32, String> {
            Ok(get_u32(soa, key)
                .map_err(|e| format!("dns_config.soa.{e}"))?
                .unwrap_or(default))
        };
        config.soa = SoaConfig {
            refresh_seconds: field("refresh", config.soa.refresh_seconds)?,
            retry_seconds: field("retry", config.soa.retry_seconds)?,
            expire_seconds: field("expire", config.soa.expire_seconds)?,
            min_ttl_seconds: field("min_ttl", config.soa.min_ttl_seconds)?,
        };
    }
    Ok(config)
}

/// Prefixes a key error with `dns_config.`.
fn in_dns_config(e: String) -> String {
    format!("dns_config.{e}")
}

/// `dns_config`'s stale reads, node TTL and recursor timeout and strategy.
fn apply_staleness_and_recursion(
    section: &Map<String, Value>,
    config: &mut DnsConfig,
) -> Result<(), String> {
    if let Some(v) = get_bool(section, "allow_stale").map_err(in_dns_config)? {
        config.allow_stale = v;
    }
    if let Some(v) = get_duration(section, "max_stale").map_err(in_dns_config)? {
        config.max_stale = v;
    }
    if let Some(v) = get_duration(section, "node_ttl").map_err(in_dns_config)? {
        config.node_ttl = v;
    }
    if let Some(v) = get_duration(section, "recursor_timeout").map_err(in_dns_config)? {
        if v.is_zero() {
            return Err("dns_config.recursor_timeout: must be positive".to_string());
        }
        config.recursor_timeout = v;
    }
    if let Some(strategy) = get_string(section, "recursor_strategy").map_err(in_dns_config)? {
        config.recursor_strategy = match strategy.as_str() {
            "sequential" | "" => RecursorStrategy::Sequential,
            "random" => RecursorStrategy::Random,
            other => {
                return Err(format!(
                    "dns_config.recursor_strategy: {other:?} is not sequential or random"
                ))
            }
        };
    }
    Ok(())
}

/// `dns_config.service_ttl`: exact service names, and prefixes ending in `*`.
fn apply_service_ttls(section: &Map<String, Value>, config: &mut DnsConfig) -> Result<(), String> {
    match section.get("service_ttl") {
        None | Some(Value::Null) => {}
        Some(Value::Object(ttls)) => {
            for key in ttls.keys() {
                let ttl = get_duration(ttls, key)
                    .map_err(|e| format!("dns_config.service_ttl.{e}"))?
                    .unwrap_or(Duration::ZERO);
                match key.strip_suffix('*') {
                    Some(prefix) => config.service_ttl_prefix.push((prefix.to_string(), ttl)),
                    None => config.service_ttl_exact.push((key.clone(), ttl)),
                }
            }
        }
        Some(other) => {
            return Err(format!(
                "dns_config.service_ttl: expected an object of durations, got {other}"
            ))
        }
    }
    Ok(())
}

/// `dns_config`'s answer limits, truncation, health filter and node metadata TXT.
fn apply_answer_settings(
    section: &Map<String, Value>,
    config: &mut DnsConfig,
) -> Result<(), String> {
    let limit = |key: &str| -> Result<Option<usize>, String> {
        match get_i64(section, key).map_err(in_dns_config)? {
            Some(v) if v < 0 => Err(format!("dns_config.{key}: must not be negative")),
            other => Ok(other.map(|v| v as usize)),
        }
    };
    if let Some(v) = limit("udp_answer_limit")? {
        config.udp_answer_limit = v;
    }
    if let Some(v) = limit("a_record_limit")? {
        config.a_record_limit = v;
    }
    if let Some(v) = get_bool(section, "enable_truncate").map_err(in_dns_config)? {
        config.enable_truncate = v;
    }
    if let Some(v) = get_bool(section, "only_passing").map_err(in_dns_config)? {
        config.only_passing = v;
    }
    if let Some(v) = get_bool(section, "enable_additional_node_meta_txt").map_err(in_dns_config)? {
        config.enable_additional_node_meta_txt = v;
    }
    Ok(())
}
