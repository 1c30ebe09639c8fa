//! The agent's TLS settings: Consul's `tls { defaults {…} internal_rpc {…} https {…} grpc {…} }`
//! stanza, the older top-level keys it replaced, `auto_encrypt {…}`, and the gossip
//! `encrypt_verify_*` switches, resolved into one [`ProtocolTls`] per protocol.
//!
//! Resolution follows Consul's builder:
//! - The old top-level keys are rewritten into the stanza *per source document*, before the
//!   documents merge, and only where the same document does not set the new key
//!   ([`apply_deprecated_keys`]); each one warns with Consul's deprecation sentence. The old
//!   `verify_incoming` also pins `tls.grpc.verify_incoming` to false when the document leaves it
//!   unset, because before the stanza existed the gRPC port never checked client certificates.
//! - Each protocol takes a key from its own block, else from `defaults`
//!   ([`TlsConfig::from_merged`]). `verify_outgoing` is not valid under `grpc`,
//!   `verify_server_hostname` only under `internal_rpc`, `use_auto_cert` only under `grpc`.
//! - `verify_server_hostname` implies `verify_outgoing` on internal RPC: turning on the
//!   hostname check alone must still force TLS (CVE-2018-19653).
//! - Cipher suites only apply to TLS 1.2; a suite list under a TLS 1.3 minimum is an error, and
//!   a list inherited from `defaults` by a protocol whose minimum is 1.3 is dropped.
//!
//! praetor speaks TLS through rustls: TLS 1.0 and 1.1, and the CBC cipher suites Consul still
//! names, are refused with a sentence saying so rather than accepted and ignored.
//! Pure: no file is opened here; the files are read by [`crate::tls`].

use super::{get_bool, get_string, get_strings};
use serde_json::{Map, Value};
use std::net::IpAddr;
use std::path::PathBuf;

/// The protocol blocks of the `tls` stanza.
pub const PROTOCOL_BLOCKS: [&str; 3] = ["internal_rpc", "https", "grpc"];

/// The lowest TLS version a protocol accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    /// `TLSv1_2` (also `TLS_AUTO` and unset: Consul's default is TLS 1.2).
    Tls12,
    /// `TLSv1_3`.
    Tls13,
}

impl TlsVersion {
    /// Consul's name of the version.
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls12 => "TLSv1_2",
            TlsVersion::Tls13 => "TLSv1_3",
        }
    }
}

/// Consul's names for TLS versions, sorted, for its error message.
const TLS_VERSION_NAMES: &str = "TLS_AUTO, TLSv1_0, TLSv1_1, TLSv1_2, TLSv1_3";

/// The old spellings `tls_min_version` took at the top level, with the new name of each.
const DEPRECATED_TLS_VERSIONS: [(&str, &str); 4] = [
    ("tls10", "TLSv1_0"),
    ("tls11", "TLSv1_1"),
    ("tls12", "TLSv1_2"),
    ("tls13", "TLSv1_3"),
];

/// Parses a `tls_min_version` value (`key` names it in errors).
fn parse_tls_version(key: &str, text: &str) -> Result<TlsVersion, String> {
    match text {
        "" | "TLS_AUTO" | "TLSv1_2" => Ok(TlsVersion::Tls12),
        "TLSv1_3" => Ok(TlsVersion::Tls13),
        "TLSv1_0" | "TLSv1_1" => Err(format!(
            "{key}: {text} is not supported: praetor speaks TLS 1.2 and 1.3 only; use TLSv1_2 or TLSv1_3"
        )),
        other => Err(format!(
            "{key}: invalid TLS version: no matching TLS version found for {other}, please specify one of [{TLS_VERSION_NAMES}]"
        )),
    }
}

/// A TLS 1.2 cipher suite, by Consul's (IANA) name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CipherSuite {
    EcdheEcdsaWithAes128GcmSha256,
    EcdheEcdsaWithAes256GcmSha384,
    EcdheEcdsaWithChacha20Poly1305Sha256,
    EcdheRsaWithAes128GcmSha256,
    EcdheRsaWithAes256GcmSha384,
    EcdheRsaWithChacha20Poly1305Sha256,
}

/// Every suite praetor offers, by name.
pub const CIPHER_SUITES: [(&str, CipherSuite); 6] = [
    (
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        CipherSuite::EcdheEcdsaWithAes128GcmSha256,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        CipherSuite::EcdheEcdsaWithAes256GcmSha384,
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        CipherSuite::EcdheEcdsaWithChacha20Poly1305Sha256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        CipherSuite::EcdheRsaWithAes128GcmSha256,
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        CipherSuite::EcdheRsaWithAes256GcmSha384,
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        CipherSuite::EcdheRsaWithChacha20Poly1305Sha256,
    ),
];

/// Suites Consul's agent accepts that rustls does not implement (CBC mode).
const CONSUL_CBC_SUITES: [&str; 4] = [
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
];

/// Most suites in one list; there are six.
const CIPHER_SUITES_LISTED_MAX: usize = 64;

impl CipherSuite {
    pub fn name(self) -> &'static str {
        CIPHER_SUITES
            .iter()
            .find(|(_, suite)| *suite == self)
            .map(|(name, _)| *name)
            .expect("every suite is in the table")
    }
}

/// Parses a comma-separated `tls_cipher_suites` value as Consul does.
fn parse_cipher_suites(
    key: &str,
    text: &str,
    min_version: TlsVersion,
) -> Result<Vec<CipherSuite>, String> {
    if min_version == TlsVersion::Tls13 {
        return Err(format!("{key}: TLS 1.3 cipher suites are not configurable"));
    }
    let text = text.trim();
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = text.split(',').collect();
    if names.len() > CIPHER_SUITES_LISTED_MAX {
        return Err(format!(
            "{key}: more than {CIPHER_SUITES_LISTED_MAX} cipher suites listed"
        ));
    }
    let unknown: Vec<&str> = names
        .iter()
        .copied()
        .filter(|name| {
            !CIPHER_SUITES.iter().any(|(known, _)| known == name)
                && !CONSUL_CBC_SUITES.contains(name)
        })
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "{key}: invalid TLS cipher suites: no matching Consul Agent TLS cipher suite found for {}",
            unknown.join(",")
        ));
    }
    let mut suites = Vec::with_capacity(names.len());
    for name in names {
        let Some((_, suite)) = CIPHER_SUITES.iter().find(|(known, _)| *known == name) else {
            return Err(format!(
                "{key}: {name} is not supported: praetor offers only AEAD suites (AES-GCM and ChaCha20-Poly1305), not CBC"
            ));
        };
        if !suites.contains(suite) {
            suites.push(*suite);
        }
    }
    assert!(!suites.is_empty() && suites.len() <= CIPHER_SUITES.len());
    Ok(suites)
}

/// One protocol's resolved TLS settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolTls {
    /// `ca_file` / `ca_path`: the CA that peers' certificates must chain to.
    pub ca: CaSource,
    /// `cert_file` and `key_file`: this agent's certificate for the protocol (both or neither).
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    pub min_version: TlsVersion,
    /// TLS 1.2 suites to offer, in order; empty means every suite praetor offers.
    pub cipher_suites: Vec<CipherSuite>,
    /// Require and verify a client certificate on incoming connections.
    pub verify_incoming: bool,
    /// Dial with TLS and verify the server's chain against the CA (internal RPC, HTTPS checks).
    pub verify_outgoing: bool,
    /// Internal RPC only: the server's certificate must carry `server.<dc>.<domain>`.
    pub verify_server_hostname: bool,
    /// gRPC only: serve the auto-encrypt certificate when no manual one is given.
    pub use_auto_cert: bool,
}

impl Default for ProtocolTls {
    fn default() -> Self {
        ProtocolTls {
            ca: CaSource::default(),
            cert_file: None,
            key_file: None,
            min_version: TlsVersion::Tls12,
            cipher_suites: Vec::new(),
            verify_incoming: false,
            verify_outgoing: false,
            verify_server_hostname: false,
            use_auto_cert: false,
        }
    }
}

impl ProtocolTls {
    /// Whether a certificate is configured, i.e. TLS can be served.
    pub fn has_certificate(&self) -> bool {
        debug_assert_eq!(self.cert_file.is_some(), self.key_file.is_some());
        self.cert_file.is_some()
    }
}

/// `auto_encrypt { … }`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AutoEncrypt {
    /// Client agents: obtain the agent certificate from the servers.
    pub tls: bool,
    /// Servers: hand certificates to client agents that ask.
    pub allow_tls: bool,
    /// Extra DNS names and addresses a client asks for in its certificate.
    pub dns_san: Vec<String>,
    pub ip_san: Vec<IpAddr>,
}

/// The agent's TLS settings, one block per protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsConfig {
    pub internal_rpc: ProtocolTls,
    pub https: ProtocolTls,
    pub grpc: ProtocolTls,
    pub auto_encrypt: AutoEncrypt,
    /// `encrypt_verify_incoming` / `encrypt_verify_outgoing` (gossip; default true).
    pub encrypt_verify_incoming: bool,
    pub encrypt_verify_outgoing: bool,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            internal_rpc: ProtocolTls::default(),
            https: ProtocolTls::default(),
            grpc: ProtocolTls::default(),
            auto_encrypt: AutoEncrypt::default(),
            encrypt_verify_incoming: true,
            encrypt_verify_outgoing: true,
        }
    }
}

/// Most SAN entries `auto_encrypt` may ask for.
const AUTO_ENCRYPT_SANS_MAX: usize = 64;

/// Consul's deprecation sentence.
fn deprecation_warning(old: &str, new: &str) -> String {
    format!("config: The '{old}' field is deprecated. Use the '{new}' field instead.")
}

/// The old top-level keys: where each one moved (block, key).
const DEPRECATED_KEYS: [(&str, &str, &str); 10] = [
    ("ca_file", "defaults", "ca_file"),
    ("ca_path", "defaults", "ca_path"),
    ("cert_file", "defaults", "cert_file"),
    ("key_file", "defaults", "key_file"),
    ("tls_cipher_suites", "defaults", "tls_cipher_suites"),
    ("tls_min_version", "defaults", "tls_min_version"),
    ("verify_incoming", "defaults", "verify_incoming"),
    ("verify_incoming_https", "https", "verify_incoming"),
    ("verify_incoming_rpc", "internal_rpc", "verify_incoming"),
    ("verify_outgoing", "defaults", "verify_outgoing"),
];

/// Rewrites the old top-level TLS keys of one source document into its `tls` stanza, where the
/// document does not set the new key itself, and returns Consul's warnings. The old keys are
/// removed, so later documents override the stanza's keys as they would any other key.
pub fn apply_deprecated_keys(document: &mut Map<String, Value>) -> Vec<String> {
    let mut warnings = Vec::new();
    let mut moves: Vec<(&str, &str, Value)> = Vec::new();
    let mut legacy_verify_incoming = false;
    for (old, block, key) in DEPRECATED_KEYS {
        let Some(mut value) = document.remove(old) else {
            continue;
        };
        if old == "tls_min_version" {
            if let Some((_, new)) = DEPRECATED_TLS_VERSIONS
                .iter()
                .find(|(deprecated, _)| value.as_str() == Some(deprecated))
            {
                warnings.push(format!(
                    "config: 'tls_min_version' value '{}' is deprecated, please specify '{new}' instead",
                    value.as_str().unwrap_or_default()
                ));
                value = Value::String(new.to_string());
            }
        }
        legacy_verify_incoming |= old == "verify_incoming";
        warnings.push(deprecation_warning(old, &format!("tls.{block}.{key}")));
        moves.push((block, key, value));
    }
    if let Some(value) = document.remove("verify_server_hostname") {
        warnings.push(deprecation_warning(
            "verify_server_hostname",
            "tls.internal_rpc.verify_server_hostname",
        ));
        moves.push(("internal_rpc", "verify_server_hostname", value));
    }
    if document.remove("tls_prefer_server_cipher_suites").is_some() {
        warnings.push(
            "config: The 'tls_prefer_server_cipher_suites' field is deprecated and will be ignored."
                .to_string(),
        );
    }
    if moves.is_empty() {
        return warnings;
    }
    let tls = document
        .entry("tls")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(tls) = tls else {
        // The schema check already refused a `tls` that is not an object.
        return warnings;
    };
    for (block, key, value) in moves {
        let section = tls
            .entry(block)
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(section) = section {
            section.entry(key).or_insert(value);
        }
    }
    if legacy_verify_incoming {
        // Before the stanza, the gRPC port never asked for client certificates; the old key
        // must not start doing so through `defaults`.
        if let Some(Value::Object(grpc)) = Some(
            tls.entry("grpc")
                .or_insert_with(|| Value::Object(Map::new())),
        ) {
            grpc.entry("verify_incoming").or_insert(Value::Bool(false));
        }
    }
    warnings
}

fn block<'a>(
    tls: &'a Map<String, Value>,
    name: &str,
    empty: &'a Map<String, Value>,
) -> Result<&'a Map<String, Value>, String> {
    match tls.get(name) {
        None | Some(Value::Null) => Ok(empty),
        Some(Value::Object(map)) => Ok(map),
        Some(other) => Err(format!("tls.{name}: expected an object, got {other}")),
    }
}

/// Prefixes a key error with its block's name.
fn in_block(name: &str) -> impl Fn(String) -> String + '_ {
    move |e: String| format!("tls.{name}.{e}")
}

/// Refuses the keys Consul allows in one stanza only when they appear in another.
fn check_stanza_keys(tls: &Map<String, Value>, empty: &Map<String, Value>) -> Result<(), String> {
    let grpc_block = block(tls, "grpc", empty)?;
    if grpc_block.contains_key("verify_outgoing") {
        return Err("verify_outgoing is not valid in the tls.grpc stanza".to_string());
    }
    for name in ["defaults", "grpc", "https"] {
        if block(tls, name, empty)?.contains_key("verify_server_hostname") {
            return Err(
                "verify_server_hostname is only valid in the tls.internal_rpc stanza".to_string(),
            );
        }
    }
    for name in ["defaults", "https", "internal_rpc"] {
        if block(tls, name, empty)?.contains_key("use_auto_cert") {
            return Err("use_auto_cert is only valid in the tls.grpc stanza".to_string());
        }
    }
    Ok(())
}

/// `tls.defaults`, which each protocol's block inherits from.
struct TlsDefaults<'a> {
    block: &'a Map<String, Value>,
    min_version: TlsVersion,
    /// The default suites, checked against the default minimum version.
    suites: Option<Vec<CipherSuite>>,
}

impl<'a> TlsDefaults<'a> {
    fn from_block(defaults: &'a Map<String, Value>) -> Result<TlsDefaults<'a>, String> {
        let min_version =
            match get_string(defaults, "tls_min_version").map_err(in_block("defaults"))? {
                Some(text) => parse_tls_version("tls.defaults.tls_min_version", &text)?,
                None => TlsVersion::Tls12,
            };
        let suites =
            match get_string(defaults, "tls_cipher_suites").map_err(in_block("defaults"))? {
                Some(text) => Some(parse_cipher_suites(
                    "tls.defaults.tls_cipher_suites",
                    &text,
                    min_version,
                )?),
                None => None,
            };
        Ok(TlsDefaults {
            block: defaults,
            min_version,
            suites,
        })
    }
}

/// One protocol's settings: its own block's, else the defaults'.
fn resolve_protocol(
    tls: &Map<String, Value>,
    defaults: &TlsDefaults<'_>,
    name: &str,
) -> Result<ProtocolTls, String> {
    let empty = Map::new();
    let own = block(tls, name, &empty)?;
    let string = |key: &str| -> Result<Option<String>, String> {
        Ok(get_string(own, key)
            .map_err(in_block(name))?
            .or(get_string(defaults.block, key).map_err(in_block("defaults"))?)
            .filter(|s| !s.is_empty()))
    };
    let boolean = |key: &str| -> Result<bool, String> {
        Ok(get_bool(own, key)
            .map_err(in_block(name))?
            .or(get_bool(defaults.block, key).map_err(in_block("defaults"))?)
            .unwrap_or(false))
    };
    let (min_version, cipher_suites) = protocol_versions(own, defaults, name)?;
    let cert_file = string("cert_file")?;
    let key_file = string("key_file")?;
    match (&cert_file, &key_file) {
        (Some(_), None) => {
            return Err(format!(
                "tls.{name}: cert_file is set but key_file is not; both are needed to serve TLS"
            ))
        }
        (None, Some(_)) => {
            return Err(format!(
                "tls.{name}: key_file is set but cert_file is not; both are needed to serve TLS"
            ))
        }
        _ => {}
    }
    Ok(ProtocolTls {
        ca: CaSource {
            file: string("ca_file")?.map(PathBuf::from),
            path: string("ca_path")?.map(PathBuf::from),
        },
        cert_file: cert_file.map(PathBuf::from),
        key_file: key_file.map(PathBuf::from),
        min_version,
        cipher_suites,
        verify_incoming: boolean("verify_incoming")?,
        verify_outgoing: name != "grpc" && boolean("verify_outgoing")?,
        verify_server_hostname: name == "internal_rpc"
            && get_bool(own, "verify_server_hostname")
                .map_err(in_block(name))?
                .unwrap_or(false),
        use_auto_cert: name == "grpc"
            && get_bool(own, "use_auto_cert")
                .map_err(in_block(name))?
                .unwrap_or(false),
    })
}

/// A protocol's minimum version and cipher suites, its own or inherited.
fn protocol_versions(
    own: &Map<String, Value>,
    defaults: &TlsDefaults<'_>,
    name: &str,
) -> Result<(TlsVersion, Vec<CipherSuite>), String> {
    let min_version = match get_string(own, "tls_min_version").map_err(in_block(name))? {
        Some(text) => parse_tls_version(&format!("tls.{name}.tls_min_version"), &text)?,
        None => defaults.min_version,
    };
    let cipher_suites = match get_string(own, "tls_cipher_suites").map_err(in_block(name))? {
        Some(text) => {
            parse_cipher_suites(&format!("tls.{name}.tls_cipher_suites"), &text, min_version)?
        }
        // Inherited suites that do not fit a TLS 1.3 minimum are dropped, not an error, as
        // in Consul.
        None if min_version == TlsVersion::Tls13 => Vec::new(),
        None => defaults.suites.clone().unwrap_or_default(),
    };
    Ok((min_version, cipher_suites))
}

impl TlsConfig {
    /// Resolves the merged configuration's TLS settings. `server` is the agent's mode.
    pub fn from_merged(raw: &Map<String, Value>, server: bool) -> Result<TlsConfig, String> {
        let empty = Map::new();
        let tls = match raw.get("tls") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(map)) => map,
            Some(other) => return Err(format!("tls: expected an object, got {other}")),
        };
        let defaults = block(tls, "defaults", &empty)?;
        check_stanza_keys(tls, &empty)?;
        let defaults = TlsDefaults::from_block(defaults)?;
        let mut internal_rpc = resolve_protocol(tls, &defaults, "internal_rpc")?;
        // The hostname check alone must still force TLS (CVE-2018-19653).
        internal_rpc.verify_outgoing |= internal_rpc.verify_server_hostname;
        let https = resolve_protocol(tls, &defaults, "https")?;
        let grpc = resolve_protocol(tls, &defaults, "grpc")?;
        let auto_encrypt = auto_encrypt_from(raw)?;
        if server && auto_encrypt.tls {
            return Err("auto_encrypt.tls can only be used on a client.".to_string());
        }
        if !server && auto_encrypt.allow_tls {
            return Err("auto_encrypt.allow_tls can only be used on a server.".to_string());
        }
        let config = TlsConfig {
            internal_rpc,
            https,
            grpc,
            auto_encrypt,
            encrypt_verify_incoming: get_bool(raw, "encrypt_verify_incoming")?.unwrap_or(true),
            encrypt_verify_outgoing: get_bool(raw, "encrypt_verify_outgoing")?.unwrap_or(true),
        };
        for (name, protocol) in config.protocols() {
            config.validate_protocol(name, protocol)?;
        }
        Ok(config)
    }

    /// The three protocols with their block names.
    pub fn protocols(&self) -> [(&'static str, &ProtocolTls); 3] {
        [
            ("internal_rpc", &self.internal_rpc),
            ("https", &self.https),
            ("grpc", &self.grpc),
        ]
    }

    /// Whether this agent's certificates are provisioned by auto-encrypt (Consul's `AutoTLS`).
    pub fn auto_tls(&self) -> bool {
        self.auto_encrypt.tls
    }

    /// Consul's `tlsutil` checks, done here where they can name the config keys.
    fn validate_protocol(&self, name: &str, protocol: &ProtocolTls) -> Result<(), String> {
        let has_ca = !protocol.ca.is_empty();
        if protocol.verify_incoming && !has_ca {
            return Err(format!(
                "VerifyIncoming set but no CA certificates were provided (tls.{name}.verify_incoming: set tls.{name}.ca_file, ca_path or the same in tls.defaults)"
            ));
        }
        if protocol.verify_incoming && !protocol.has_certificate() && !self.auto_tls() {
            return Err(format!(
                "VerifyIncoming requires either a Cert and Key pair in the configuration file, or auto_encrypt/auto_config be enabled (tls.{name}.verify_incoming)"
            ));
        }
        if protocol.verify_outgoing && !has_ca {
            return Err(format!(
                "VerifyOutgoing set but no CA certificates were provided (tls.{name}.verify_outgoing: set tls.{name}.ca_file, ca_path or the same in tls.defaults)"
            ));
        }
        Ok(())
    }

    /// A warning for `auto_encrypt.allow_tls` without `verify_incoming`; every other TLS
    /// setting acts (`tls.grpc` on `ports.grpc_tls`).
    pub fn not_active_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let rpc = &self.internal_rpc;
        if self.auto_encrypt.allow_tls && !rpc.verify_incoming {
            warnings.push(
                "config: auto_encrypt.allow_tls is on but tls.internal_rpc.verify_incoming is off: leave it off only while migrating to TLS"
                    .to_string(),
            );
        }
        warnings
    }
}

fn auto_encrypt_from(raw: &Map<String, Value>) -> Result<AutoEncrypt, String> {
    let empty = Map::new();
    let section = match raw.get("auto_encrypt") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(map)) => map,
        Some(other) => return Err(format!("auto_encrypt: expected an object, got {other}")),
    };
    let wrap = |e: String| format!("auto_encrypt.{e}");
    let dns_san = get_strings(section, "dns_san").map_err(wrap)?;
    let ip_text = get_strings(section, "ip_san").map_err(wrap)?;
    if dns_san.len() + ip_text.len() > AUTO_ENCRYPT_SANS_MAX {
        return Err(format!(
            "auto_encrypt: at most {AUTO_ENCRYPT_SANS_MAX} dns_san and ip_san entries"
        ));
    }
    let ip_san = ip_text
        .iter()
        .map(|text| {
            text.trim()
                .parse::<IpAddr>()
                .map_err(|_| format!("auto_encrypt.ip_san: {text:?} is not an IP address"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(AutoEncrypt {
        tls: get_bool(section, "tls").map_err(wrap)?.unwrap_or(false),
        allow_tls: get_bool(section, "allow_tls")
            .map_err(wrap)?
            .unwrap_or(false),
        dns_san,
        ip_san,
    })
}

/// Where trusted CA certificates come from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaSource {
    /// A PEM bundle; wins over `path` when both are given, as in Consul.
    pub file: Option<PathBuf>,
    /// A directory of PEM files.
    pub path: Option<PathBuf>,
}

impl CaSource {
    pub fn is_empty(&self) -> bool {
        self.file.is_none() && self.path.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn resolve(value: Value) -> Result<TlsConfig, String> {
        TlsConfig::from_merged(&object(value), false)
    }

    #[test]
    fn protocols_inherit_defaults_key_by_key() {
        let c = resolve(json!({"tls": {
            "defaults": {"ca_file": "ca.pem", "cert_file": "a.pem", "key_file": "a-key.pem",
                         "verify_incoming": true, "verify_outgoing": true,
                         "tls_min_version": "TLSv1_3"},
            "https": {"verify_incoming": false, "tls_min_version": "TLSv1_2",
                      "tls_cipher_suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"},
            "internal_rpc": {"verify_server_hostname": true, "cert_file": "rpc.pem",
                             "key_file": "rpc-key.pem"},
        }}))
        .unwrap();
        assert_eq!(c.https.ca.file, Some(PathBuf::from("ca.pem")));
        assert!(!c.https.verify_incoming && c.https.verify_outgoing);
        assert_eq!(c.https.min_version, TlsVersion::Tls12);
        assert_eq!(
            c.https.cipher_suites,
            vec![CipherSuite::EcdheRsaWithAes128GcmSha256]
        );
        assert_eq!(c.internal_rpc.cert_file, Some(PathBuf::from("rpc.pem")));
        assert!(c.internal_rpc.verify_incoming && c.internal_rpc.verify_server_hostname);
        assert_eq!(c.internal_rpc.min_version, TlsVersion::Tls13);
        // gRPC never dials out, so it does not inherit verify_outgoing.
        assert!(c.grpc.verify_incoming && !c.grpc.verify_outgoing);
        assert!(!c.https.verify_server_hostname && !c.grpc.verify_server_hostname);
    }

    #[test]
    fn verify_server_hostname_alone_forces_tls() {
        let c = resolve(json!({"tls": {"defaults": {"ca_file": "ca.pem"},
            "internal_rpc": {"verify_server_hostname": true}}}))
        .unwrap();
        assert!(c.internal_rpc.verify_outgoing, "CVE-2018-19653");
        assert!(!c.https.verify_outgoing);
    }

    #[test]
    fn misplaced_keys_and_bad_values_are_consuls_errors() {
        let cases = [
            (
                json!({"tls": {"grpc": {"verify_outgoing": true}}}),
                "verify_outgoing is not valid in the tls.grpc stanza",
            ),
            (
                json!({"tls": {"defaults": {"verify_server_hostname": true}}}),
                "verify_server_hostname is only valid in the tls.internal_rpc stanza",
            ),
            (
                json!({"tls": {"https": {"use_auto_cert": true}}}),
                "use_auto_cert is only valid in the tls.grpc stanza",
            ),
            (
                json!({"tls": {"defaults": {"tls_min_version": "tls12"}}}),
                "tls.defaults.tls_min_version: invalid TLS version: no matching TLS version found for tls12, please specify one of [TLS_AUTO, TLSv1_0, TLSv1_1, TLSv1_2, TLSv1_3]",
            ),
            (
                json!({"tls": {"https": {"tls_min_version": "TLSv1_1"}}}),
                "tls.https.tls_min_version: TLSv1_1 is not supported: praetor speaks TLS 1.2 and 1.3 only; use TLSv1_2 or TLSv1_3",
            ),
            (
                json!({"tls": {"defaults": {"tls_min_version": "TLSv1_3",
                    "tls_cipher_suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}}}),
                "tls.defaults.tls_cipher_suites: TLS 1.3 cipher suites are not configurable",
            ),
            (
                json!({"tls": {"defaults": {"tls_cipher_suites": "TLS_RSA_WITH_RC4,TLS_FOO"}}}),
                "tls.defaults.tls_cipher_suites: invalid TLS cipher suites: no matching Consul Agent TLS cipher suite found for TLS_RSA_WITH_RC4,TLS_FOO",
            ),
            (
                json!({"tls": {"defaults": {"tls_cipher_suites": "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"}}}),
                "tls.defaults.tls_cipher_suites: TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA is not supported: praetor offers only AEAD suites (AES-GCM and ChaCha20-Poly1305), not CBC",
            ),
            (
                json!({"tls": {"defaults": {"verify_incoming": true, "cert_file": "a", "key_file": "b"}}}),
                "VerifyIncoming set but no CA certificates were provided (tls.internal_rpc.verify_incoming: set tls.internal_rpc.ca_file, ca_path or the same in tls.defaults)",
            ),
            (
                json!({"tls": {"https": {"verify_incoming": true, "ca_file": "ca"}}}),
                "VerifyIncoming requires either a Cert and Key pair in the configuration file, or auto_encrypt/auto_config be enabled (tls.https.verify_incoming)",
            ),
            (
                json!({"tls": {"defaults": {"verify_outgoing": true}}}),
                "VerifyOutgoing set but no CA certificates were provided (tls.internal_rpc.verify_outgoing: set tls.internal_rpc.ca_file, ca_path or the same in tls.defaults)",
            ),
            (
                json!({"tls": {"https": {"cert_file": "a.pem"}}}),
                "tls.https: cert_file is set but key_file is not; both are needed to serve TLS",
            ),
            (
                json!({"auto_encrypt": {"allow_tls": true}}),
                "auto_encrypt.allow_tls can only be used on a server.",
            ),
            (
                json!({"auto_encrypt": {"ip_san": ["10.0.0.1", "nope"]}}),
                "auto_encrypt.ip_san: \"nope\" is not an IP address",
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(resolve(value.clone()).unwrap_err(), expected, "{value}");
        }
        let on_server =
            TlsConfig::from_merged(&object(json!({"auto_encrypt": {"tls": true}})), true);
        assert_eq!(
            on_server.unwrap_err(),
            "auto_encrypt.tls can only be used on a client."
        );
    }

    #[test]
    fn inherited_suites_are_dropped_under_tls13_and_duplicates_collapse() {
        let c = resolve(json!({"tls": {
            "defaults": {"tls_cipher_suites":
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"},
            "grpc": {"tls_min_version": "TLSv1_3"},
        }}));
        // Consul splits on commas without trimming each name; a space makes a name unknown.
        assert!(c
            .unwrap_err()
            .contains("no matching Consul Agent TLS cipher suite"));
        let c = resolve(json!({"tls": {
            "defaults": {"tls_cipher_suites":
                "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"},
            "grpc": {"tls_min_version": "TLSv1_3"},
        }}))
        .unwrap();
        assert_eq!(
            c.https.cipher_suites,
            vec![CipherSuite::EcdheEcdsaWithAes256GcmSha384]
        );
        assert!(c.grpc.cipher_suites.is_empty());
        assert_eq!(
            CipherSuite::EcdheEcdsaWithAes256GcmSha384.name(),
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"
        );
    }

    #[test]
    fn deprecated_keys_move_into_the_stanza_of_their_own_document() {
        let mut document = object(json!({
            "ca_file": "old-ca.pem",
            "cert_file": "old.pem",
            "verify_incoming": true,
            "verify_incoming_https": false,
            "verify_server_hostname": true,
            "tls_min_version": "tls13",
            "tls_prefer_server_cipher_suites": true,
            "tls": {"defaults": {"ca_file": "new-ca.pem"}},
        }));
        let warnings = apply_deprecated_keys(&mut document);
        assert_eq!(
            document,
            object(json!({"tls": {
                "defaults": {"ca_file": "new-ca.pem", "cert_file": "old.pem",
                             "verify_incoming": true, "tls_min_version": "TLSv1_3"},
                "https": {"verify_incoming": false},
                "internal_rpc": {"verify_server_hostname": true},
                "grpc": {"verify_incoming": false},
            }}))
        );
        assert_eq!(
            warnings,
            vec![
                "config: The 'ca_file' field is deprecated. Use the 'tls.defaults.ca_file' field instead.",
                "config: The 'cert_file' field is deprecated. Use the 'tls.defaults.cert_file' field instead.",
                "config: 'tls_min_version' value 'tls13' is deprecated, please specify 'TLSv1_3' instead",
                "config: The 'tls_min_version' field is deprecated. Use the 'tls.defaults.tls_min_version' field instead.",
                "config: The 'verify_incoming' field is deprecated. Use the 'tls.defaults.verify_incoming' field instead.",
                "config: The 'verify_incoming_https' field is deprecated. Use the 'tls.https.verify_incoming' field instead.",
                "config: The 'verify_server_hostname' field is deprecated. Use the 'tls.internal_rpc.verify_server_hostname' field instead.",
                "config: The 'tls_prefer_server_cipher_suites' field is deprecated and will be ignored.",
            ]
        );
        let mut untouched = object(json!({"tls": {"grpc": {"verify_incoming": true}}}));
        assert!(apply_deprecated_keys(&mut untouched).is_empty());
        assert_eq!(
            untouched,
            object(json!({"tls": {"grpc": {"verify_incoming": true}}}))
        );
    }

    #[test]
    fn only_auto_encrypt_without_verify_incoming_warns() {
        let c = TlsConfig::from_merged(
            &object(json!({
                "tls": {"defaults": {"ca_file": "ca", "cert_file": "c", "key_file": "k"},
                        "internal_rpc": {"verify_server_hostname": true},
                        "grpc": {"cert_file": "g", "key_file": "gk", "verify_incoming": false}},
                "auto_encrypt": {"allow_tls": true},
                "encrypt_verify_incoming": false,
                "encrypt_verify_outgoing": false,
            })),
            true,
        )
        .unwrap();
        // The gossip switches act (cluster::pools hands them to the gossip core), and the
        // gRPC settings serve `ports.grpc_tls`.
        assert!(!c.encrypt_verify_incoming && !c.encrypt_verify_outgoing);
        assert_eq!(c.grpc.cert_file.as_deref(), Some(std::path::Path::new("g")));
        let keys: Vec<String> = c
            .not_active_warnings()
            .iter()
            .map(|w| {
                w.trim_start_matches("config: ")
                    .split(' ')
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(keys, vec!["auto_encrypt.allow_tls"]);
        assert!(TlsConfig::default().not_active_warnings().is_empty());
    }

    #[test]
    fn old_keys_apply_per_document_before_documents_merge() {
        let build = |snippets: &[&str]| {
            crate::config::build(&crate::config::ConfigSources {
                dev: true,
                hcl_snippets: snippets.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            })
            .unwrap()
        };
        let new_after_old = build(&[
            "ca_file = \"old.pem\"",
            "tls { defaults { ca_file = \"new.pem\" } }",
        ]);
        assert_eq!(
            new_after_old.tls.https.ca.file,
            Some(PathBuf::from("new.pem"))
        );
        let old_after_new = build(&[
            "tls { defaults { ca_file = \"new.pem\" } }",
            "ca_file = \"old.pem\"",
        ]);
        assert_eq!(
            old_after_new.tls.https.ca.file,
            Some(PathBuf::from("old.pem"))
        );
        assert_eq!(
            old_after_new.warnings,
            vec!["config: The 'ca_file' field is deprecated. Use the 'tls.defaults.ca_file' field instead."]
        );
        let ports = build(&["ports { https = 8501 grpc_tls = 8503 }"]);
        assert_eq!((ports.ports.https, ports.ports.grpc_tls), (8501, 8503));
        // gRPC over TLS is served: the port asks for no warning.
        assert!(ports.warnings.is_empty(), "{:?}", ports.warnings);
    }
}
