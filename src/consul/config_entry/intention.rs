//! Intentions in Consul's two shapes: the `Sources` of a `service-intentions` config entry
//! and the legacy `Intention` object of `/v1/connect/intentions`, both decoded into and
//! rendered from the store's typed [`ServiceIntentions`].
//!
//! L7 `Permissions` are validated here field by field with Consul's messages (the store
//! keeps them as canonical JSON); everything else is validated by
//! `store::mesh::intentions::validate`, shared with the legacy writes the store applies.

use super::doc::{decode_object, Decoding, Doc};
use super::is_http_method;
use super::schema::PERMISSION;
use crate::consul::body::Obj;
use crate::proto::rfc3339;
use crate::store::mesh::intentions::{self, Action, ServiceIntentions, SourceIntention};
use arcstr::ArcStr;
use serde_json::Value;

/// The typed body of a decoded `service-intentions` entry, normalized and validated.
pub fn from_doc(destination: &str, doc: &Doc) -> Result<ServiceIntentions, String> {
    let mut sources = Vec::new();
    for (i, src) in doc.list("Sources").iter().enumerate() {
        sources.push(source_from_doc(i, src)?);
    }
    let jwt_json = match doc.get("JWT") {
        Some(Doc::Raw(Value::Null)) | None => ArcStr::new(),
        Some(other) => ArcStr::from(other.to_json()),
    };
    let mut body = ServiceIntentions {
        sources,
        jwt_json,
        meta: doc.str_pairs("Meta"),
    };
    intentions::normalize(destination, &mut body, false);
    intentions::validate(destination, &body, false)?;
    Ok(body)
}

/// The typed body of an entry a server stored and rendered, read back as it is: its
/// sources in the stored order with their precedence, legacy fields kept, nothing
/// normalized or validated again (see `config_entry::decode_stored`).
pub fn from_doc_stored(destination: &str, doc: &Doc) -> Result<ServiceIntentions, String> {
    let mut sources = Vec::new();
    for (i, src) in doc.list("Sources").iter().enumerate() {
        let mut source = source_from_doc(i, src)?;
        source.precedence = intentions::precedence(destination, &source.name);
        sources.push(source);
    }
    let jwt_json = match doc.get("JWT") {
        Some(Doc::Raw(Value::Null)) | None => ArcStr::new(),
        Some(other) => ArcStr::from(other.to_json()),
    };
    Ok(ServiceIntentions {
        sources,
        jwt_json,
        meta: doc.str_pairs("Meta"),
    })
}

/// One source, with Consul's checks of its action and L7 permissions.
fn source_from_doc(i: usize, src: &Doc) -> Result<SourceIntention, String> {
    let permissions = src.list("Permissions");
    let action_text = src.str("Action");
    let action = match Action::parse(action_text) {
        Some(action) => Some(action),
        None if action_text.is_empty() => None,
        None if permissions.is_empty() => {
            return Err(format!(
                "Sources[{i}].Action must be set to 'allow' or 'deny'"
            ))
        }
        None => {
            return Err(format!(
                "Sources[{i}].Action must be omitted if Permissions are specified"
            ))
        }
    };
    let permissions_json = permissions_json(i, permissions)?;
    let time = |field: &str| -> Result<Option<i64>, String> {
        match src.str(field) {
            "" => Ok(None),
            text => rfc3339::parse_ns(text)
                .map(Some)
                .ok_or_else(|| format!("Sources[{i}].{field}: {text:?} is not an RFC 3339 time")),
        }
    };
    Ok(SourceIntention {
        name: ArcStr::from(src.str("Name")),
        action,
        permissions_json,
        precedence: 0,
        legacy_id: ArcStr::from(src.str("LegacyID")),
        source_type: ArcStr::from(src.str("Type")),
        description: ArcStr::from(src.str("Description")),
        legacy_meta: src
            .get("LegacyMeta")
            .filter(|m| !matches!(m, Doc::Null))
            .map(|_| src.str_pairs("LegacyMeta")),
        legacy_create_time_ns: time("LegacyCreateTime")?,
        legacy_update_time_ns: time("LegacyUpdateTime")?,
        peer: ArcStr::from(src.str("Peer")),
        sameness_group: ArcStr::from(src.str("SamenessGroup")),
    })
}

/// Consul's checks of L7 permissions (methods uppercased first), and their canonical JSON.
fn permissions_json(i: usize, permissions: &[Doc]) -> Result<ArcStr, String> {
    if permissions.is_empty() {
        return Ok(ArcStr::new());
    }
    let mut normalized = Vec::with_capacity(permissions.len());
    for (j, perm) in permissions.iter().enumerate() {
        if Action::parse(perm.str("Action")).is_none() {
            return Err(format!(
                "Sources[{i}].Permissions[{j}].Action must be set to 'allow' or 'deny'"
            ));
        }
        let prefix = format!("Sources[{i}].Permissions[{j}].HTTP");
        let Some(http) = perm.get("HTTP").filter(|h| !matches!(h, Doc::Null)) else {
            return Err(format!("{prefix} is required"));
        };
        let mut parts = 0;
        for field in ["PathExact", "PathPrefix"] {
            let path = http.str(field);
            if !path.is_empty() {
                parts += 1;
                if !path.starts_with('/') {
                    return Err(format!("{prefix}.{field} doesn't start with '/': {path:?}"));
                }
            }
        }
        if !http.str("PathRegex").is_empty() {
            parts += 1;
        }
        if parts > 1 {
            return Err(format!(
                "{prefix} should only contain at most one of PathExact, PathPrefix, or PathRegex"
            ));
        }
        let mut perm_parts = parts;
        for (k, header) in http.list("Header").iter().enumerate() {
            if header.str("Name").is_empty() {
                return Err(format!("{prefix}.Header[{k}] missing required Name field"));
            }
            let header_parts = header.bool("Present") as usize
                + ["Exact", "Regex", "Prefix", "Suffix"]
                    .iter()
                    .filter(|f| !header.str(f).is_empty())
                    .count();
            if header_parts != 1 {
                return Err(format!(
                    "{prefix}.Header[{k}] should only contain one of Present, Exact, Prefix, Suffix, or Regex"
                ));
            }
            perm_parts += 1;
        }
        let methods: Vec<String> = http
            .strs("Methods")
            .iter()
            .map(|m| m.to_ascii_uppercase())
            .collect();
        if !methods.is_empty() {
            let mut seen: Vec<&str> = Vec::new();
            for method in &methods {
                if !is_http_method(method) {
                    return Err(format!(
                        "{prefix}.Methods contains an invalid method {method:?}"
                    ));
                }
                if seen.contains(&method.as_str()) {
                    return Err(format!(
                        "{prefix}.Methods contains {method:?} more than once"
                    ));
                }
                seen.push(method);
            }
            perm_parts += 1;
        }
        if perm_parts == 0 {
            return Err(format!("{prefix} should not be empty"));
        }
        let mut perm = perm.clone();
        if !methods.is_empty() {
            let mut http = http.clone();
            http.set(
                "Methods",
                Doc::List(methods.into_iter().map(Doc::Str).collect()),
            );
            perm.set("HTTP", http);
        }
        normalized.push(perm);
    }
    Ok(ArcStr::from(Doc::List(normalized).to_json()))
}

/// A source as Consul's `SourceIntention` JSON.
fn source_to_doc(src: &SourceIntention) -> Doc {
    let mut fields: Vec<(String, Doc)> = vec![("Name".into(), Doc::Str(src.name.to_string()))];
    let text = |name: &str, value: &str, fields: &mut Vec<(String, Doc)>| {
        if !value.is_empty() {
            fields.push((name.to_string(), Doc::Str(value.to_string())));
        }
    };
    text("Peer", &src.peer, &mut fields);
    text("SamenessGroup", &src.sameness_group, &mut fields);
    text("Action", src.action.map_or("", Action::as_str), &mut fields);
    if src.is_l7() {
        fields.push((
            "Permissions".into(),
            Doc::Json(src.permissions_json.to_string()),
        ));
    }
    fields.push(("Precedence".into(), Doc::Int(src.precedence as i64)));
    text("LegacyID", &src.legacy_id, &mut fields);
    fields.push(("Type".into(), Doc::Str(src.source_type.to_string())));
    text("Description", &src.description, &mut fields);
    if let Some(meta) = src.legacy_meta.as_ref().filter(|m| !m.is_empty()) {
        fields.push(("LegacyMeta".into(), str_map(meta)));
    }
    if let Some(ns) = src.legacy_create_time_ns {
        fields.push(("LegacyCreateTime".into(), Doc::Str(rfc3339::format_ns(ns))));
    }
    if let Some(ns) = src.legacy_update_time_ns {
        fields.push(("LegacyUpdateTime".into(), Doc::Str(rfc3339::format_ns(ns))));
    }
    Doc::Obj(fields)
}

fn str_map(pairs: &[(String, String)]) -> Doc {
    let mut sorted: Vec<(String, Doc)> = pairs
        .iter()
        .map(|(k, v)| (k.clone(), Doc::Str(v.clone())))
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    Doc::Obj(sorted)
}

/// The fields of a `service-intentions` entry after `Kind` and `Name`.
pub fn to_doc(body: &ServiceIntentions) -> Doc {
    let mut fields = vec![(
        "Sources".to_string(),
        Doc::List(body.sources.iter().map(source_to_doc).collect()),
    )];
    if !body.jwt_json.is_empty() {
        fields.push(("JWT".into(), Doc::Json(body.jwt_json.to_string())));
    }
    if !body.meta.is_empty() {
        fields.push(("Meta".into(), str_map(&body.meta)));
    }
    Doc::Obj(fields)
}

/// The metadata an intention shows: a legacy intention its own, a config-entry one its
/// entry's.
pub fn shown_meta<'m>(
    entry_meta: &'m [(String, String)],
    src: &'m SourceIntention,
) -> &'m [(String, String)] {
    match &src.legacy_meta {
        Some(meta) if !src.legacy_id.is_empty() => meta,
        _ => entry_meta,
    }
}

/// Go's zero `time.Time`, as a legacy intention without times renders it.
const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// One intention as Consul's legacy `Intention` object (what `GET /v1/connect/intentions`
/// lists), from the entry of its destination.
pub fn legacy_doc(
    destination: &str,
    entry_meta: &[(String, String)],
    src: &SourceIntention,
    create_index: u64,
    modify_index: u64,
) -> Doc {
    let mut f: Vec<(String, Doc)> = Vec::with_capacity(16);
    let mut put = |name: &str, value: Doc| f.push((name.to_string(), value));
    put("ID", Doc::Str(src.legacy_id.to_string()));
    if !src.description.is_empty() {
        put("Description", Doc::Str(src.description.to_string()));
    }
    if !src.peer.is_empty() {
        put("SourcePeer", Doc::Str(src.peer.to_string()));
    }
    if !src.sameness_group.is_empty() {
        put(
            "SourceSamenessGroup",
            Doc::Str(src.sameness_group.to_string()),
        );
    }
    put("SourceNS", Doc::Str("default".into()));
    put("SourceName", Doc::Str(src.name.to_string()));
    put("DestinationNS", Doc::Str("default".into()));
    put("DestinationName", Doc::Str(destination.to_string()));
    put("SourceType", Doc::Str(src.source_type.to_string()));
    if let Some(action) = src.action {
        put("Action", Doc::Str(action.as_str().into()));
    }
    if src.is_l7() {
        put("Permissions", Doc::Json(src.permissions_json.to_string()));
    }
    let meta = shown_meta(entry_meta, src);
    if !meta.is_empty() {
        put("Meta", str_map(meta));
    }
    put("Precedence", Doc::Int(src.precedence as i64));
    let time = |ns: Option<i64>| ns.map_or_else(|| GO_ZERO_TIME.to_string(), rfc3339::format_ns);
    put("CreatedAt", Doc::Str(time(src.legacy_create_time_ns)));
    put("UpdatedAt", Doc::Str(time(src.legacy_update_time_ns)));
    put("CreateIndex", Doc::Int(create_index as i64));
    put("ModifyIndex", Doc::Int(modify_index as i64));
    Doc::Obj(f)
}

/// A legacy `Intention` request body, decoded as Consul's JSON decoder reads it into
/// `structs.Intention` (field names case-insensitive, unknown fields ignored).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LegacyIntention {
    pub id: String,
    pub source_name: String,
    pub destination_name: String,
    pub source_type: String,
    pub action: String,
    pub description: String,
    pub meta: Vec<(String, String)>,
    /// `Permissions`, validated and canonical; empty when none.
    pub permissions_json: ArcStr,
    pub source_peer: String,
}

/// Decodes a legacy intention body; namespaces other than `default` are refused as Consul's
/// community edition refuses them.
pub fn decode_legacy(value: &Value) -> Result<LegacyIntention, String> {
    let obj = Obj::new(value)?;
    for field in ["sourcens", "destinationns"] {
        let ns = obj.opt_string(&[field])?.unwrap_or_default();
        if !ns.is_empty() && ns != "default" {
            return Err("Namespaces are a Consul Enterprise feature".to_string());
        }
    }
    let permissions_json = match obj.get(&["permissions"]) {
        None | Some(Value::Null) => ArcStr::new(),
        Some(raw) => {
            let mut decoding = Decoding::default();
            let wrapped = serde_json::json!({ "Permissions": raw });
            let doc = decode_object(
                &wrapped,
                &[super::doc::omit(
                    "Permissions",
                    super::doc::Ty::ObjList(PERMISSION),
                )],
                "",
                &mut decoding,
            );
            decoding.into_result()?;
            permissions_json(0, doc.list("Permissions"))
                .map_err(|e| e.trim_start_matches("Sources[0].").to_string())?
        }
    };
    Ok(LegacyIntention {
        id: obj.opt_string(&["id"])?.unwrap_or_default(),
        source_name: obj.opt_string(&["sourcename"])?.unwrap_or_default(),
        destination_name: obj.opt_string(&["destinationname"])?.unwrap_or_default(),
        source_type: obj.opt_string(&["sourcetype"])?.unwrap_or_default(),
        action: obj.opt_string(&["action"])?.unwrap_or_default(),
        description: obj.opt_string(&["description"])?.unwrap_or_default(),
        meta: match obj.get(&["meta"]) {
            None | Some(Value::Null) => Vec::new(),
            Some(_) => obj.str_map(&["meta"])?,
        },
        permissions_json,
        source_peer: obj.opt_string(&["sourcepeer"])?.unwrap_or_default(),
    })
}

impl LegacyIntention {
    /// Consul's `Intention.Validate` for the legacy API, its reasons as multierror lists
    /// them.
    pub fn validate(&self, legacy_write: bool) -> Result<(), String> {
        let mut reasons = Vec::new();
        if self.source_name.is_empty() {
            reasons.push("SourceName must be set".to_string());
        }
        if self.destination_name.is_empty() {
            reasons.push("DestinationName must be set".to_string());
        }
        for (field, name) in [
            ("SourceName", &self.source_name),
            ("DestinationName", &self.destination_name),
        ] {
            if name != "*" && name.contains('*') {
                reasons.push(format!(
                    "{field}: wildcard character '*' cannot be used with partial values"
                ));
            }
        }
        if self.description.len() > intentions::META_VALUE_BYTES_MAX {
            reasons.push(format!(
                "Description exceeds maximum length {}",
                intentions::META_VALUE_BYTES_MAX
            ));
        }
        if self.meta.len() > intentions::META_PAIRS_MAX {
            reasons.push(format!(
                "Meta exceeds maximum element count {}",
                intentions::META_PAIRS_MAX
            ));
        }
        for (k, v) in &self.meta {
            if k.len() > intentions::META_KEY_BYTES_MAX {
                reasons.push(format!(
                    "Meta key {k:?} exceeds maximum length {}",
                    intentions::META_KEY_BYTES_MAX
                ));
            }
            if v.len() > intentions::META_VALUE_BYTES_MAX {
                reasons.push(format!(
                    "Meta value for key {k:?} exceeds maximum length {}",
                    intentions::META_VALUE_BYTES_MAX
                ));
            }
        }
        let l7 = !self.permissions_json.is_empty();
        if (legacy_write || !l7) && Action::parse(&self.action).is_none() {
            reasons.push("Action must be set to 'allow' or 'deny'".to_string());
        }
        if l7 && !self.action.is_empty() {
            reasons.push("Action must be omitted if Permissions are specified".to_string());
        }
        if l7 && legacy_write {
            reasons.push("Permissions cannot be set by legacy intention writes; use the exact endpoint or a config entry".to_string());
        }
        if !self.source_type.is_empty() && self.source_type != "consul" {
            reasons.push("SourceType must be set to 'consul'".to_string());
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(super::doc::multierror(&reasons))
        }
    }

    /// The store's source for this intention.
    pub fn to_source(&self, legacy_id: &str, now_ns: Option<i64>) -> SourceIntention {
        SourceIntention {
            name: ArcStr::from(self.source_name.as_str()),
            action: Action::parse(&self.action),
            permissions_json: self.permissions_json.clone(),
            precedence: intentions::precedence(&self.destination_name, &self.source_name),
            legacy_id: ArcStr::from(legacy_id),
            source_type: ArcStr::from("consul"),
            description: ArcStr::from(self.description.as_str()),
            legacy_meta: now_ns.map(|_| self.meta.clone()),
            legacy_create_time_ns: now_ns,
            legacy_update_time_ns: now_ns,
            peer: ArcStr::new(),
            sameness_group: ArcStr::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_bodies_decode_and_validate_as_consul() {
        let body = serde_json::json!({
            "sourcename": "web", "DestinationName": "db", "Action": "allow",
            "Meta": {"team": "a"}, "Description": "d", "SourceNS": "default"
        });
        let ixn = decode_legacy(&body).unwrap();
        assert_eq!(
            (ixn.source_name.as_str(), ixn.destination_name.as_str()),
            ("web", "db")
        );
        ixn.validate(true).unwrap();
        let bad = decode_legacy(&serde_json::json!({"SourceName": "w*"})).unwrap();
        assert_eq!(
            bad.validate(true).unwrap_err(),
            "3 errors occurred:\n\t* DestinationName must be set\n\t* SourceName: wildcard character '*' cannot be used with partial values\n\t* Action must be set to 'allow' or 'deny'\n\n"
        );
        assert!(decode_legacy(&serde_json::json!({"SourceNS": "team"})).is_err());
    }
}
