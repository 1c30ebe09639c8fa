//! The `jwt` auth method with static public keys: config validation, signature checks,
//! Consul's claim rules (issuer, audiences, expiry with leeways) and claim mappings.
//!
//! Signatures are checked with `ring`, already in the dependency tree through hickory-proto:
//! RS256/384/512, PS256/384/512, ES256, ES384 and EdDSA. Public keys are PEM
//! `SubjectPublicKeyInfo` blocks (what `openssl pkey -pubout` writes), decoded by a small DER
//! reader here. Keys fetched from a JWKS URL or OIDC discovery need the network and are
//! refused when the method is written.
//!
//! Time is an argument (`now_unix_s`); nothing here reads a clock. Error texts follow
//! Consul's (go-sso and go-jose) where a client can see them.
//!
//! Limits: [`JWT_BYTES_MAX`], [`PUBLIC_KEYS_MAX`], [`CLAIM_MAPPINGS_MAX`].

use base64::Engine as _;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The auth method type this module implements.
pub const METHOD_TYPE: &str = "jwt";
/// Longest bearer token accepted at login, in bytes.
pub const JWT_BYTES_MAX: usize = 64 * 1024;
/// Most `JWTValidationPubKeys` one method may list.
pub const PUBLIC_KEYS_MAX: usize = 64;
/// Most entries in `ClaimMappings` plus `ListClaimMappings`.
pub const CLAIM_MAPPINGS_MAX: usize = 256;
/// Default expiration/not-before leeway when a token has only one of them (go-sso: 150 s).
const CLAIM_DEFAULT_LEEWAY_S: i64 = 150;
/// Default clock skew leeway (go-jose's `DefaultLeeway`: 1 minute).
const CLOCK_SKEW_DEFAULT_LEEWAY_S: i64 = 60;
/// Algorithms accepted in `JWTSupportedAlgs` (Consul's list).
const SUPPORTED_ALGS: [&str; 10] = [
    "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA",
];

/// A public key decoded from PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublicKey {
    /// The DER `RSAPublicKey` (what ring verifies with).
    Rsa(Vec<u8>),
    /// An uncompressed P-256 point.
    EcP256(Vec<u8>),
    /// An uncompressed P-384 point.
    EcP384(Vec<u8>),
    Ed25519(Vec<u8>),
}

/// A validated `jwt` method config (Consul's `ssoauth.Config`, the `jwt` subset).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JwtConfig {
    pub public_keys: Vec<PublicKey>,
    pub bound_issuer: String,
    pub bound_audiences: Vec<String>,
    /// Claim (name or JSON pointer) → identity attribute.
    pub claim_mappings: BTreeMap<String, String>,
    pub list_claim_mappings: BTreeMap<String, String>,
    pub supported_algs: Vec<String>,
    pub expiration_leeway_s: i64,
    pub not_before_leeway_s: i64,
    pub clock_skew_leeway_s: i64,
}

/// The fields a `jwt` method's config may hold; OIDC-only fields are refused by name.
const OIDC_ONLY_FIELDS: [&str; 6] = [
    "OIDCClientID",
    "OIDCClientSecret",
    "OIDCScopes",
    "OIDCACRValues",
    "AllowedRedirectURIs",
    "VerboseOIDCLogging",
];

fn field<'a>(config: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    config
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
}

fn string_field(config: &Map<String, Value>, name: &str) -> Result<String, String> {
    match field(config, name) {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("'{name}' must be a string, got {other}")),
    }
}

fn strings_field(config: &Map<String, Value>, name: &str) -> Result<Vec<String>, String> {
    match field(config, name) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(format!("'{name}' must list strings, got {other}")),
            })
            .collect(),
        Some(other) => Err(format!("'{name}' must be a list of strings, got {other}")),
    }
}

fn map_field(config: &Map<String, Value>, name: &str) -> Result<BTreeMap<String, String>, String> {
    match field(config, name) {
        None => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(format!("'{name}' values must be strings, got {other}")),
            })
            .collect(),
        Some(other) => Err(format!("'{name}' must be a map of strings, got {other}")),
    }
}

/// A leeway: Go duration text or nanoseconds, in whole seconds (negative means none).
fn leeway_field(config: &Map<String, Value>, name: &str) -> Result<i64, String> {
    let nanos = match field(config, name) {
        None => return Ok(0),
        Some(Value::String(s)) => crate::proto::duration::parse_go_duration_nanos(s)
            .map_err(|e| format!("'{name}': {e}"))?,
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| format!("'{name}' must be a duration"))?,
        Some(other) => return Err(format!("'{name}' must be a duration, got {other}")),
    };
    // Negative means "no leeway" and must stay negative; zero means "the default".
    Ok(if nanos < 0 { -1 } else { nanos / 1_000_000_000 })
}

/// Refuses a key that is not one of the `jwt` type's (the OIDC-only ones get their own words).
fn refuse_unknown_keys(config: &Map<String, Value>) -> Result<(), String> {
    const KNOWN: [&str; 14] = [
        "JWTValidationPubKeys",
        "JWKSURL",
        "JWKSCACert",
        "OIDCDiscoveryURL",
        "OIDCDiscoveryCACert",
        "BoundIssuer",
        "BoundAudiences",
        "ClaimMappings",
        "ListClaimMappings",
        "JWTSupportedAlgs",
        "ExpirationLeeway",
        "NotBeforeLeeway",
        "ClockSkewLeeway",
        "NamespaceRules",
    ];
    for key in config.keys() {
        if let Some(oidc) = OIDC_ONLY_FIELDS
            .iter()
            .find(|f| f.eq_ignore_ascii_case(key))
        {
            return Err(format!("'{oidc}' must not be set for type \"jwt\""));
        }
        if !KNOWN.iter().any(|k| k.eq_ignore_ascii_case(key)) {
            return Err(format!("'' has invalid keys: {key}"));
        }
    }
    Ok(())
}

/// The key source: exactly one may be set, and praetor takes only PEM keys given inline.
fn public_keys_field(config: &Map<String, Value>) -> Result<Vec<PublicKey>, String> {
    let pem_keys = strings_field(config, "JWTValidationPubKeys")?;
    let jwks_url = string_field(config, "JWKSURL")?;
    let discovery_url = string_field(config, "OIDCDiscoveryURL")?;
    let methods = usize::from(!pem_keys.is_empty())
        + usize::from(!jwks_url.is_empty())
        + usize::from(!discovery_url.is_empty());
    if methods != 1 {
        return Err("exactly one of 'JWTValidationPubKeys', 'JWKSURL', or 'OIDCDiscoveryURL' must be set for type \"jwt\"".to_string());
    }
    if pem_keys.is_empty() {
        return Err("only 'JWTValidationPubKeys' is supported: praetor does not fetch keys from 'JWKSURL' or 'OIDCDiscoveryURL'".to_string());
    }
    if pem_keys.len() > PUBLIC_KEYS_MAX {
        return Err(format!(
            "'JWTValidationPubKeys' lists more than {PUBLIC_KEYS_MAX} keys"
        ));
    }
    if !string_field(config, "JWKSCACert")?.is_empty() {
        return Err("'JWKSCACert' should not be set unless 'JWKSURL' is set".to_string());
    }
    if !string_field(config, "OIDCDiscoveryCACert")?.is_empty() {
        return Err(
            "'OIDCDiscoveryCACert' should not be set unless 'OIDCDiscoveryURL' is set".to_string(),
        );
    }
    let mut public_keys = Vec::with_capacity(pem_keys.len());
    for (i, pem) in pem_keys.iter().enumerate() {
        public_keys.push(
            parse_public_key_pem(pem)
                .map_err(|e| format!("error parsing public key JWTValidationPubKeys[{i}]: {e}"))?,
        );
    }
    Ok(public_keys)
}

/// Bounds the claim mappings and refuses two claims mapped to one target.
fn validate_claim_mappings(
    claim_mappings: &BTreeMap<String, String>,
    list_claim_mappings: &BTreeMap<String, String>,
) -> Result<(), String> {
    if claim_mappings.len() + list_claim_mappings.len() > CLAIM_MAPPINGS_MAX {
        return Err(format!(
            "claim mappings exceed {CLAIM_MAPPINGS_MAX} entries"
        ));
    }
    for (mappings, name) in [
        (claim_mappings, "ClaimMappings"),
        (list_claim_mappings, "ListClaimMappings"),
    ] {
        let mut targets = std::collections::BTreeSet::new();
        for target in mappings.values() {
            if !targets.insert(target) {
                return Err(format!(
                    "{name} contains multiple mappings for key {}",
                    super::rules::go_quote(target)
                ));
            }
        }
    }
    Ok(())
}

impl JwtConfig {
    /// Validates a method's `Config` JSON for type `jwt`, with Consul's error texts.
    pub fn from_json(text: &str) -> Result<JwtConfig, String> {
        let config: Map<String, Value> = if text.trim().is_empty() {
            Map::new()
        } else {
            serde_json::from_str(text).map_err(|e| format!("invalid Config: {e}"))?
        };
        refuse_unknown_keys(&config)?;
        let public_keys = public_keys_field(&config)?;
        let supported_algs = strings_field(&config, "JWTSupportedAlgs")?;
        for alg in &supported_algs {
            if !SUPPORTED_ALGS.contains(&alg.as_str()) || alg == "ES512" {
                return Err(format!("Invalid supported algorithm: {alg}"));
            }
        }
        let claim_mappings = map_field(&config, "ClaimMappings")?;
        let list_claim_mappings = map_field(&config, "ListClaimMappings")?;
        validate_claim_mappings(&claim_mappings, &list_claim_mappings)?;
        Ok(JwtConfig {
            public_keys,
            bound_issuer: string_field(&config, "BoundIssuer")?,
            bound_audiences: strings_field(&config, "BoundAudiences")?,
            claim_mappings,
            list_claim_mappings,
            supported_algs,
            expiration_leeway_s: leeway_field(&config, "ExpirationLeeway")?,
            not_before_leeway_s: leeway_field(&config, "NotBeforeLeeway")?,
            clock_skew_leeway_s: leeway_field(&config, "ClockSkewLeeway")?,
        })
    }

    /// The variables a binding rule's `BindName` may use: `value.<attribute>` for every
    /// `ClaimMappings` target.
    pub fn projected_variable_names(&self) -> Vec<String> {
        self.claim_mappings
            .values()
            .map(|attribute| format!("value.{attribute}"))
            .collect()
    }
}

// ---- PEM and DER ----

/// Reads one DER element at the start of `input`: `(tag, contents, rest)`.
fn der_element(input: &[u8]) -> Result<(u8, &[u8], &[u8]), String> {
    let bad = || "malformed DER".to_string();
    let (&tag, rest) = input.split_first().ok_or_else(bad)?;
    let (&first, mut rest) = rest.split_first().ok_or_else(bad)?;
    let length = if first < 0x80 {
        first as usize
    } else {
        let count = (first & 0x7f) as usize;
        if count == 0 || count > 4 || rest.len() < count {
            return Err(bad());
        }
        let mut length = 0usize;
        for b in &rest[..count] {
            length = (length << 8) | *b as usize;
        }
        rest = &rest[count..];
        length
    };
    if rest.len() < length {
        return Err(bad());
    }
    Ok((tag, &rest[..length], &rest[length..]))
}

const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_EC: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];

/// Decodes a PEM `PUBLIC KEY` block (SubjectPublicKeyInfo).
pub fn parse_public_key_pem(pem: &str) -> Result<PublicKey, String> {
    let invalid =
        || "data does not contain any valid RSA, ECDSA, or ED25519 public keys".to_string();
    let body = pem
        .split("-----BEGIN PUBLIC KEY-----")
        .nth(1)
        .and_then(|rest| rest.split("-----END PUBLIC KEY-----").next())
        .ok_or_else(invalid)?;
    let base64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(base64)
        .map_err(|_| invalid())?;
    let (tag, spki, _) = der_element(&der).map_err(|_| invalid())?;
    if tag != 0x30 {
        return Err(invalid());
    }
    let (tag, algorithm, rest) = der_element(spki).map_err(|_| invalid())?;
    let (bits_tag, bits, _) = der_element(rest).map_err(|_| invalid())?;
    if tag != 0x30 || bits_tag != 0x03 || bits.first() != Some(&0) {
        return Err(invalid());
    }
    let key = bits[1..].to_vec();
    let (oid_tag, oid, params) = der_element(algorithm).map_err(|_| invalid())?;
    if oid_tag != 0x06 {
        return Err(invalid());
    }
    match oid {
        OID_RSA => Ok(PublicKey::Rsa(key)),
        OID_ED25519 if key.len() == 32 => Ok(PublicKey::Ed25519(key)),
        OID_EC => {
            let (curve_tag, curve, _) = der_element(params).map_err(|_| invalid())?;
            match (curve_tag, curve) {
                (0x06, OID_P256) => Ok(PublicKey::EcP256(key)),
                (0x06, OID_P384) => Ok(PublicKey::EcP384(key)),
                _ => Err(invalid()),
            }
        }
        _ => Err(invalid()),
    }
}

// ---- verification ----

/// What a verified login token says about its bearer: the mapped claims.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identity {
    /// Attribute → value, for every `ClaimMappings` target (empty when the claim is absent).
    pub values: BTreeMap<String, String>,
    /// Attribute → values, for every `ListClaimMappings` target.
    pub lists: BTreeMap<String, Vec<String>>,
}

impl Identity {
    /// The identity with every mapped attribute empty (Consul's `NewIdentity`).
    pub fn empty(config: &JwtConfig) -> Identity {
        Identity {
            values: config
                .claim_mappings
                .values()
                .map(|k| (k.clone(), String::new()))
                .collect(),
            lists: config
                .list_claim_mappings
                .values()
                .map(|k| (k.clone(), Vec::new()))
                .collect(),
        }
    }

    /// What binding rule selectors see: `{"value": {...}, "list": {...}}`.
    pub fn selectable(&self) -> Value {
        serde_json::json!({ "value": self.values, "list": self.lists })
    }

    /// The variables `BindName` templates may use: `value.<attribute>`.
    pub fn projected_vars(&self) -> BTreeMap<String, String> {
        self.values
            .iter()
            .map(|(k, v)| (format!("value.{k}"), v.clone()))
            .collect()
    }
}

fn base64url(part: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|e| format!("error parsing token: illegal base64 data: {e}"))
}

fn verify_signature(alg: &str, key: &PublicKey, message: &[u8], signature: &[u8]) -> bool {
    use ring::signature as sig;
    let algorithm: &dyn sig::VerificationAlgorithm = match (alg, key) {
        ("RS256", PublicKey::Rsa(_)) => &sig::RSA_PKCS1_2048_8192_SHA256,
        ("RS384", PublicKey::Rsa(_)) => &sig::RSA_PKCS1_2048_8192_SHA384,
        ("RS512", PublicKey::Rsa(_)) => &sig::RSA_PKCS1_2048_8192_SHA512,
        ("PS256", PublicKey::Rsa(_)) => &sig::RSA_PSS_2048_8192_SHA256,
        ("PS384", PublicKey::Rsa(_)) => &sig::RSA_PSS_2048_8192_SHA384,
        ("PS512", PublicKey::Rsa(_)) => &sig::RSA_PSS_2048_8192_SHA512,
        ("ES256", PublicKey::EcP256(_)) => &sig::ECDSA_P256_SHA256_FIXED,
        ("ES384", PublicKey::EcP384(_)) => &sig::ECDSA_P384_SHA384_FIXED,
        ("EdDSA", PublicKey::Ed25519(_)) => &sig::ED25519,
        _ => return false,
    };
    let bytes = match key {
        PublicKey::Rsa(b) | PublicKey::EcP256(b) | PublicKey::EcP384(b) | PublicKey::Ed25519(b) => {
            b
        }
    };
    sig::UnparsedPublicKey::new(algorithm, bytes)
        .verify(message, signature)
        .is_ok()
}

/// A NumericDate claim: absent (or null) is 0, as go-jose's zero value.
fn numeric_date(claims: &Map<String, Value>, name: &str) -> Result<i64, String> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => Ok(n.as_f64().map_or(0, |f| f as i64)),
        Some(_) => Err(format!(
            "failed to unmarshal claims: json: cannot unmarshal claim {name:?} into a NumericDate"
        )),
    }
}

/// Verifies `token` against the method's keys and claim rules at `now_unix_s`, and maps its
/// claims. Errors are Consul's.
pub fn verify(config: &JwtConfig, token: &str, now_unix_s: i64) -> Result<Identity, String> {
    if token.is_empty() {
        return Err("missing jwt".to_string());
    }
    if token.len() > JWT_BYTES_MAX {
        return Err(format!(
            "error parsing token: exceeds {JWT_BYTES_MAX} bytes"
        ));
    }
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 {
        return Err(
            "error parsing token: square/go-jose: compact JWS format must have three parts"
                .to_string(),
        );
    }
    let header: Map<String, Value> = serde_json::from_slice(&base64url(parts[0])?)
        .map_err(|e| format!("error parsing token: {e}"))?;
    let alg = header.get("alg").and_then(Value::as_str).unwrap_or("");
    let signature = base64url(parts[2])?;
    let message = &token.as_bytes()[..parts[0].len() + 1 + parts[1].len()];
    let alg_allowed = SUPPORTED_ALGS.contains(&alg)
        && (config.supported_algs.is_empty() || config.supported_algs.iter().any(|a| a == alg));
    let valid = alg_allowed
        && config
            .public_keys
            .iter()
            .any(|key| verify_signature(alg, key, message, &signature));
    if !valid {
        return Err("no known key successfully validated the token signature".to_string());
    }
    let claims: Map<String, Value> = serde_json::from_slice(&base64url(parts[1])?)
        .map_err(|e| format!("failed to unmarshal claims: {e}"))?;
    check_claims(config, &claims, now_unix_s)?;
    extract(config, &claims)
}

fn leeway(configured: i64, default: i64) -> i64 {
    match configured {
        l if l < 0 => 0,
        0 => default,
        l => l,
    }
}

/// go-sso's `verifyVanillaJWT` time and audience rules.
fn check_claims(config: &JwtConfig, claims: &Map<String, Value>, now: i64) -> Result<(), String> {
    let issued_at = numeric_date(claims, "iat")?;
    let mut expiry = numeric_date(claims, "exp")?;
    let mut not_before = numeric_date(claims, "nbf")?;
    if issued_at == 0 && expiry == 0 && not_before == 0 {
        return Err("no issue time, notbefore, or expiration time encoded in token".to_string());
    }
    if expiry == 0 {
        let latest_start = issued_at.max(not_before);
        expiry = latest_start + leeway(config.expiration_leeway_s, CLAIM_DEFAULT_LEEWAY_S);
    }
    if not_before == 0 {
        not_before = if issued_at != 0 {
            issued_at
        } else {
            expiry - leeway(config.not_before_leeway_s, CLAIM_DEFAULT_LEEWAY_S)
        };
    }
    let skew = leeway(config.clock_skew_leeway_s, CLOCK_SKEW_DEFAULT_LEEWAY_S);
    let failed = |what: &str| {
        format!("error validating claims: square/go-jose/jwt: validation failed, {what}")
    };
    if !config.bound_issuer.is_empty()
        && claims.get("iss").and_then(Value::as_str) != Some(config.bound_issuer.as_str())
    {
        return Err(failed("invalid issuer claim (iss)"));
    }
    if now + skew < not_before {
        return Err(failed("token not valid yet (nbf)"));
    }
    if now - skew > expiry {
        return Err(failed("token is expired (exp)"));
    }
    if now + skew < issued_at {
        return Err(
            "error validating claims: square/go-jose/jwt: validation field, token issued in the future (iat)"
                .to_string(),
        );
    }
    let audiences: Vec<&str> = match claims.get("aud") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if config.bound_audiences.is_empty() {
        if !audiences.is_empty() {
            return Err(
                "error validating claims: audience claim found in JWT but no audiences are bound"
                    .to_string(),
            );
        }
    } else if !config
        .bound_audiences
        .iter()
        .any(|bound| audiences.contains(&bound.as_str()))
    {
        return Err(
            "error validating claims: aud claim does not match any bound audience".to_string(),
        );
    }
    Ok(())
}

/// A claim by name, or by RFC 6901 JSON pointer when it starts with `/`.
fn get_claim<'a>(claims: &'a Map<String, Value>, claim: &str) -> Option<&'a Value> {
    let Some(pointer) = claim.strip_prefix('/') else {
        return claims.get(claim);
    };
    let mut current = claims.get(&unescape_pointer(pointer.split('/').next()?))?;
    for token in pointer.split('/').skip(1) {
        let token = unescape_pointer(token);
        current = match current {
            Value::Object(map) => map.get(&token)?,
            Value::Array(items) => items.get(token.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(current)
}

fn unescape_pointer(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// go-sso's `stringifyMetadataValue`: strings, booleans and numbers (truncated to integers).
fn stringify(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => i.to_string(),
            None => (n.as_f64().unwrap_or(0.0) as i64).to_string(),
        }),
        _ => None,
    }
}

fn go_type_name(value: &Value) -> &'static str {
    match value {
        Value::Object(_) => "map[string]interface {}",
        Value::Array(_) => "[]interface {}",
        _ => "<nil>",
    }
}

fn extract(config: &JwtConfig, claims: &Map<String, Value>) -> Result<Identity, String> {
    let mut identity = Identity::empty(config);
    for (source, target) in &config.claim_mappings {
        let Some(raw) = get_claim(claims, source).filter(|v| !v.is_null()) else {
            continue;
        };
        let value = stringify(raw).ok_or_else(|| {
            format!(
                "error converting claim '{source}' to string from unknown type {}",
                go_type_name(raw)
            )
        })?;
        identity.values.insert(target.clone(), value);
    }
    for (source, target) in &config.list_claim_mappings {
        let Some(raw) = get_claim(claims, source).filter(|v| !v.is_null()) else {
            continue;
        };
        let items: Vec<&Value> = match raw {
            Value::Array(items) => items.iter().collect(),
            Value::Object(_) => {
                return Err(format!(
                    "{} list claim could not be converted to string list",
                    super::rules::go_quote(source)
                ))
            }
            single => vec![single],
        };
        let mut list = Vec::with_capacity(items.len());
        for item in items {
            let value = stringify(item).ok_or_else(|| {
                format!(
                    "value {item} in {} list claim could not be parsed as string",
                    super::rules::go_quote(source)
                )
            })?;
            if !value.is_empty() {
                list.push(value);
            }
        }
        identity.lists.insert(target.clone(), list);
    }
    Ok(identity)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

    /// A fresh P-256 key: the signing pair and its public key as a PEM SPKI block.
    pub(crate) fn p256_key() -> (EcdsaKeyPair, String) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        // SubjectPublicKeyInfo for id-ecPublicKey/prime256v1 around the 65-byte point.
        let mut der = vec![
            0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06,
            0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
        ];
        der.extend_from_slice(pair.public_key().as_ref());
        let pem = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(der)
        );
        (pair, pem)
    }

    /// A compact JWS signed with `pair` (ES256).
    pub(crate) fn sign_es256(pair: &EcdsaKeyPair, claims: &Value) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = b64.encode(br#"{"alg":"ES256","typ":"JWT"}"#);
        let payload = b64.encode(serde_json::to_vec(claims).unwrap());
        let message = format!("{header}.{payload}");
        let signature = pair.sign(&SystemRandom::new(), message.as_bytes()).unwrap();
        format!("{message}.{}", b64.encode(signature.as_ref()))
    }

    pub(crate) fn config_for(pem: &str, extra: Value) -> JwtConfig {
        let mut config = serde_json::json!({ "JWTValidationPubKeys": [pem] });
        if let (Value::Object(base), Value::Object(extra)) = (&mut config, extra) {
            base.extend(extra);
        }
        JwtConfig::from_json(&config.to_string()).unwrap()
    }

    const NOW: i64 = 1_700_000_000;

    #[test]
    fn a_valid_es256_token_maps_its_claims() {
        let (pair, pem) = p256_key();
        let config = config_for(
            &pem,
            serde_json::json!({
                "BoundIssuer": "https://issuer",
                "BoundAudiences": ["consul"],
                "ClaimMappings": {"sub": "name", "/nested/team": "team", "admin": "admin", "n": "n"},
                "ListClaimMappings": {"groups": "groups", "one": "one"}
            }),
        );
        let token = sign_es256(
            &pair,
            &serde_json::json!({
                "iss": "https://issuer", "aud": ["other", "consul"], "sub": "Web-1",
                "nested": {"team": "blue"}, "admin": true, "n": 12.7,
                "groups": ["a", "", "b"], "one": "solo",
                "iat": NOW - 10, "exp": NOW + 600
            }),
        );
        let identity = verify(&config, &token, NOW).unwrap();
        assert_eq!(identity.values["name"], "Web-1");
        assert_eq!(identity.values["team"], "blue");
        assert_eq!(identity.values["admin"], "true");
        assert_eq!(identity.values["n"], "12");
        assert_eq!(identity.lists["groups"], vec!["a", "b"]);
        assert_eq!(identity.lists["one"], vec!["solo"]);
        assert_eq!(identity.projected_vars()["value.name"], "Web-1");
        assert_eq!(identity.selectable()["list"]["groups"][1], "b");
    }

    #[test]
    fn claims_are_checked_as_consul_checks_them() {
        let (pair, pem) = p256_key();
        let config = config_for(&pem, serde_json::json!({"BoundIssuer": "iss-a"}));
        let check = |claims: Value, now: i64| verify(&config, &sign_es256(&pair, &claims), now);
        let expired = check(serde_json::json!({"iss": "iss-a", "exp": NOW - 61}), NOW);
        assert!(expired.unwrap_err().ends_with("token is expired (exp)"));
        // Within the default 60 s clock skew: still valid.
        assert!(check(serde_json::json!({"iss": "iss-a", "exp": NOW - 59}), NOW).is_ok());
        let early = check(
            serde_json::json!({"iss": "iss-a", "nbf": NOW + 120, "exp": NOW + 600}),
            NOW,
        );
        assert!(early.unwrap_err().ends_with("token not valid yet (nbf)"));
        // A future iat with no nbf becomes the nbf (go-sso), so nbf is what fails.
        let future = check(
            serde_json::json!({"iss": "iss-a", "iat": NOW + 120, "exp": NOW + 600}),
            NOW,
        );
        assert!(future.unwrap_err().ends_with("token not valid yet (nbf)"));
        let future = check(
            serde_json::json!({"iss": "iss-a", "nbf": NOW - 10, "iat": NOW + 120, "exp": NOW + 600}),
            NOW,
        );
        assert!(future
            .unwrap_err()
            .ends_with("token issued in the future (iat)"));
        let issuer = check(serde_json::json!({"iss": "iss-b", "exp": NOW + 60}), NOW);
        assert!(issuer.unwrap_err().ends_with("invalid issuer claim (iss)"));
        assert_eq!(
            check(serde_json::json!({"iss": "iss-a"}), NOW).unwrap_err(),
            "no issue time, notbefore, or expiration time encoded in token"
        );
        // Only iat: expires 150 s (the default leeway) later, plus the clock skew.
        let iat_only = serde_json::json!({"iss": "iss-a", "iat": NOW});
        assert!(check(iat_only.clone(), NOW + 200).is_ok());
        assert!(check(iat_only, NOW + 211).is_err());
        let audience = check(
            serde_json::json!({"iss": "iss-a", "exp": NOW + 60, "aud": "x"}),
            NOW,
        );
        assert_eq!(
            audience.unwrap_err(),
            "error validating claims: audience claim found in JWT but no audiences are bound"
        );
        let bound = config_for(&pem, serde_json::json!({"BoundAudiences": ["a"]}));
        let token = sign_es256(&pair, &serde_json::json!({"exp": NOW + 60, "aud": "b"}));
        assert_eq!(
            verify(&bound, &token, NOW).unwrap_err(),
            "error validating claims: aud claim does not match any bound audience"
        );
        let strict = config_for(&pem, serde_json::json!({"ClockSkewLeeway": -1}));
        let token = sign_es256(&pair, &serde_json::json!({"exp": NOW - 1}));
        assert!(verify(&strict, &token, NOW).is_err());
    }

    #[test]
    fn bad_signatures_and_shapes_are_refused() {
        let (pair, pem) = p256_key();
        let (_, other_pem) = p256_key();
        let other = config_for(&other_pem, serde_json::json!({}));
        let token = sign_es256(&pair, &serde_json::json!({"exp": NOW + 60}));
        assert_eq!(
            verify(&other, &token, NOW).unwrap_err(),
            "no known key successfully validated the token signature"
        );
        let config = config_for(&pem, serde_json::json!({}));
        let mut tampered = token.clone();
        tampered.insert(tampered.find('.').unwrap() + 2, 'x');
        assert!(verify(&config, &tampered, NOW).is_err());
        assert!(verify(&config, "a.b", NOW)
            .unwrap_err()
            .contains("three parts"));
        assert_eq!(verify(&config, "", NOW).unwrap_err(), "missing jwt");
        let none = format!(
            "{}.{}.",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"exp":1}"#)
        );
        assert!(
            verify(&config, &none, NOW).is_err(),
            "alg none is never accepted"
        );
        let restricted = config_for(&pem, serde_json::json!({"JWTSupportedAlgs": ["RS256"]}));
        assert!(verify(&restricted, &token, NOW).is_err());
        assert!(verify(&config, &"a.".repeat(JWT_BYTES_MAX), NOW).is_err());
    }

    #[test]
    fn configs_are_validated_with_consuls_texts() {
        let (_, pem) = p256_key();
        for (config, expected) in [
            (serde_json::json!({}), "exactly one of 'JWTValidationPubKeys', 'JWKSURL', or 'OIDCDiscoveryURL' must be set for type \"jwt\""),
            (serde_json::json!({"JWTValidationPubKeys": [&pem], "JWKSURL": "https://x"}), "exactly one of"),
            (serde_json::json!({"JWKSURL": "https://x"}), "only 'JWTValidationPubKeys' is supported"),
            (serde_json::json!({"JWTValidationPubKeys": ["junk"]}), "error parsing public key JWTValidationPubKeys[0]: data does not contain any valid RSA, ECDSA, or ED25519 public keys"),
            (serde_json::json!({"JWTValidationPubKeys": [&pem], "OIDCClientID": "x"}), "'OIDCClientID' must not be set for type \"jwt\""),
            (serde_json::json!({"JWTValidationPubKeys": [&pem], "Bogus": 1}), "'' has invalid keys: Bogus"),
            (serde_json::json!({"JWTValidationPubKeys": [&pem], "JWTSupportedAlgs": ["HS256"]}), "Invalid supported algorithm: HS256"),
            (serde_json::json!({"JWTValidationPubKeys": [&pem], "ClaimMappings": {"a": "x", "b": "x"}}), "ClaimMappings contains multiple mappings for key \"x\""),
        ] {
            let err = JwtConfig::from_json(&config.to_string()).unwrap_err();
            assert!(err.starts_with(expected), "{config}: {err}");
        }
        let ok = JwtConfig::from_json(
            &serde_json::json!({"jwtvalidationpubkeys": [&pem], "ClockSkewLeeway": "2m", "ExpirationLeeway": 5_000_000_000i64})
                .to_string(),
        )
        .unwrap();
        assert_eq!(ok.clock_skew_leeway_s, 120);
        assert_eq!(ok.expiration_leeway_s, 5);
    }

    #[test]
    fn claim_mapping_errors_follow_go_sso() {
        let (pair, pem) = p256_key();
        let config = config_for(
            &pem,
            serde_json::json!({"ClaimMappings": {"obj": "o"}, "ListClaimMappings": {"l": "l"}}),
        );
        let token = sign_es256(
            &pair,
            &serde_json::json!({"exp": NOW + 60, "obj": {"a": 1}}),
        );
        assert_eq!(
            verify(&config, &token, NOW).unwrap_err(),
            "error converting claim 'obj' to string from unknown type map[string]interface {}"
        );
        let token = sign_es256(&pair, &serde_json::json!({"exp": NOW + 60, "l": [[1]]}));
        assert_eq!(
            verify(&config, &token, NOW).unwrap_err(),
            "value [1] in \"l\" list claim could not be parsed as string"
        );
        // Absent claims leave their attributes empty.
        let token = sign_es256(&pair, &serde_json::json!({"exp": NOW + 60}));
        let identity = verify(&config, &token, NOW).unwrap();
        assert_eq!(identity.values["o"], "");
        assert!(identity.lists["l"].is_empty());
    }
}
