//! Lenient decoding of request bodies and config objects, as Consul decodes them: field
//! names match case-insensitively and with or without underscores (`EnableTagOverride`,
//! `enabletagoverride` and `enable_tag_override` are one field), numbers may arrive as
//! strings and booleans as `"true"`, and durations are Go duration strings or nanoseconds.
//! Map-valued fields (`Meta`, `NodeMeta`, `Header`) keep their keys verbatim.
//!
//! Every accessor returns a readable error naming the field; nothing here panics on bad input.

use crate::proto::duration::parse_go_duration_nanos;
use serde_json::{Map, Value};

/// Largest nesting of objects a body may use; deeper bodies are refused before decoding.
pub const BODY_DEPTH_MAX: usize = 32;

/// Parses a JSON body; an empty body is an empty object.
pub fn parse_json(body: &[u8]) -> Result<Value, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Map::new()));
    }
    if nesting_depth(body) > BODY_DEPTH_MAX {
        return Err(format!("body nests deeper than {BODY_DEPTH_MAX} levels"));
    }
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

/// Bracket depth of a JSON text, ignoring brackets inside strings.
fn nesting_depth(body: &[u8]) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// The canonical form field names are compared in: lowercase, without `_` and `-`.
pub fn normalize_key(key: &str) -> String {
    normalized_chars(key).collect()
}

fn normalized_chars(key: &str) -> impl Iterator<Item = char> + '_ {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
}

/// Whether `key` normalizes to `normalized` (`normalize_key(key) == normalized`), without
/// building the normalized text: a registration body is read with ~40 lookups, each
/// comparing every key of its object.
pub fn key_matches(key: &str, normalized: &str) -> bool {
    if key.is_ascii() {
        // The common case, byte by byte: ASCII lowercases to one ASCII byte.
        let mut wanted = normalized.bytes();
        for b in key.bytes().filter(|b| *b != b'_' && *b != b'-') {
            if wanted.next() != Some(b.to_ascii_lowercase()) {
                return false;
            }
        }
        return wanted.next().is_none();
    }
    normalized_chars(key).eq(normalized.chars())
}

/// A JSON object read with lenient field names.
#[derive(Clone, Copy)]
pub struct Obj<'a> {
    map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    pub fn new(value: &'a Value) -> Result<Obj<'a>, String> {
        match value {
            Value::Object(map) => Ok(Obj { map }),
            other => Err(format!("expected a JSON object, got {}", kind(other))),
        }
    }

    pub fn map(&self) -> &'a Map<String, Value> {
        self.map
    }

    /// The value of the field whose normalized name is one of `names` (given normalized).
    /// `null` counts as absent.
    pub fn get(&self, names: &[&str]) -> Option<&'a Value> {
        for (key, value) in self.map {
            if value.is_null() {
                continue;
            }
            if names.iter().any(|name| key_matches(key, name)) {
                return Some(value);
            }
        }
        None
    }

    pub fn has(&self, names: &[&str]) -> bool {
        self.get(names).is_some()
    }

    pub fn string(&self, names: &[&str]) -> Result<String, String> {
        Ok(self.opt_string(names)?.unwrap_or_default())
    }

    pub fn opt_string(&self, names: &[&str]) -> Result<Option<String>, String> {
        match self.get(names) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(Value::Bool(b)) => Ok(Some(b.to_string())),
            Some(other) => Err(format!(
                "{}: expected a string, got {}",
                names[0],
                kind(other)
            )),
        }
    }

    pub fn bool(&self, names: &[&str]) -> Result<bool, String> {
        match self.get(names) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s)) => match s.as_str() {
                "true" | "1" | "True" | "TRUE" | "t" | "T" => Ok(true),
                "false" | "0" | "False" | "FALSE" | "f" | "F" | "" => Ok(false),
                _ => Err(format!("{}: expected a boolean, got {s:?}", names[0])),
            },
            Some(Value::Number(n)) => Ok(n.as_f64().is_some_and(|v| v != 0.0)),
            Some(other) => Err(format!(
                "{}: expected a boolean, got {}",
                names[0],
                kind(other)
            )),
        }
    }

    pub fn opt_i64(&self, names: &[&str]) -> Result<Option<i64>, String> {
        match self.get(names) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
                        .map(|f| f as i64)
                })
                .map(Some)
                .ok_or_else(|| format!("{}: {n} is not an integer", names[0])),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => s
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| format!("{}: {s:?} is not an integer", names[0])),
            Some(other) => Err(format!(
                "{}: expected an integer, got {}",
                names[0],
                kind(other)
            )),
        }
    }

    pub fn i64(&self, names: &[&str]) -> Result<i64, String> {
        Ok(self.opt_i64(names)?.unwrap_or(0))
    }

    /// An integer within `min..=max`.
    pub fn bounded(&self, names: &[&str], min: i64, max: i64) -> Result<i64, String> {
        let value = self.i64(names)?;
        if value < min || value > max {
            return Err(format!(
                "{}: {value} is out of range {min}..={max}",
                names[0]
            ));
        }
        Ok(value)
    }

    /// A duration in nanoseconds: a Go duration string (`"10s"`, `"1m30s"`) or a number of
    /// nanoseconds. Absent is 0.
    pub fn duration_ns(&self, names: &[&str]) -> Result<i64, String> {
        match self.get(names) {
            None => Ok(0),
            Some(Value::String(s)) if s.is_empty() => Ok(0),
            Some(Value::String(s)) => {
                parse_go_duration_nanos(s.trim()).map_err(|e| format!("{}: {e}", names[0]))
            }
            Some(Value::Number(n)) => n
                .as_i64()
                .or_else(|| n.as_f64().map(|f| f as i64))
                .ok_or_else(|| format!("{}: {n} is not a duration", names[0])),
            Some(other) => Err(format!(
                "{}: expected a duration, got {}",
                names[0],
                kind(other)
            )),
        }
    }

    /// A list of strings; a single string is a one-element list.
    pub fn str_list(&self, names: &[&str]) -> Result<Vec<String>, String> {
        match self.get(names) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(n) => Ok(n.to_string()),
                    other => Err(format!(
                        "{}: expected strings, got {}",
                        names[0],
                        kind(other)
                    )),
                })
                .collect(),
            Some(other) => Err(format!(
                "{}: expected a list of strings, got {}",
                names[0],
                kind(other)
            )),
        }
    }

    /// A string-to-string map with its keys kept verbatim.
    pub fn str_map(&self, names: &[&str]) -> Result<Vec<(String, String)>, String> {
        match self.get(names) {
            None => Ok(Vec::new()),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok((k.clone(), s.clone())),
                    Value::Number(n) => Ok((k.clone(), n.to_string())),
                    Value::Bool(b) => Ok((k.clone(), b.to_string())),
                    Value::Null => Ok((k.clone(), String::new())),
                    other => Err(format!(
                        "{}.{k}: expected a string, got {}",
                        names[0],
                        kind(other)
                    )),
                })
                .collect(),
            Some(other) => Err(format!(
                "{}: expected an object, got {}",
                names[0],
                kind(other)
            )),
        }
    }

    pub fn obj(&self, names: &[&str]) -> Result<Option<Obj<'a>>, String> {
        match self.get(names) {
            None => Ok(None),
            Some(value) => Obj::new(value)
                .map(Some)
                .map_err(|e| format!("{}: {e}", names[0])),
        }
    }

    /// A list of objects; a single object is a one-element list.
    pub fn obj_list(&self, names: &[&str]) -> Result<Vec<Obj<'a>>, String> {
        match self.get(names) {
            None => Ok(Vec::new()),
            Some(value @ Value::Object(_)) => Ok(vec![Obj::new(value)?]),
            Some(Value::Array(items)) => items
                .iter()
                .filter(|v| !v.is_null())
                .map(|v| Obj::new(v).map_err(|e| format!("{}: {e}", names[0])))
                .collect(),
            Some(other) => Err(format!(
                "{}: expected a list of objects, got {}",
                names[0],
                kind(other)
            )),
        }
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_names_match_in_any_case_and_style() {
        let value = json!({"Enable_Tag_Override": "true", "meta": {"Key": "v"}, "PORT": "80", "Interval": "1m30s", "ttl": 1000});
        let o = Obj::new(&value).unwrap();
        assert!(o.bool(&["enabletagoverride"]).unwrap());
        assert_eq!(
            o.str_map(&["meta"]).unwrap(),
            vec![("Key".to_string(), "v".to_string())]
        );
        assert_eq!(o.i64(&["port"]).unwrap(), 80);
        assert_eq!(o.duration_ns(&["interval"]).unwrap(), 90_000_000_000);
        assert_eq!(o.duration_ns(&["ttl"]).unwrap(), 1000);
        assert_eq!(o.duration_ns(&["missing"]).unwrap(), 0);
    }

    #[test]
    fn key_matches_agrees_with_normalize_key() {
        let keys = [
            "ServiceID",
            "service_id",
            "Service-ID",
            "serviceid",
            "ServiceIDs",
            "Service",
            "",
            "_",
            "İD",
            "ÉTAT",
            "état",
            "Straße",
        ];
        let names = [
            "serviceid",
            "service",
            "",
            "id",
            "i\u{307}d",
            "état",
            "straße",
        ];
        for key in keys {
            for name in names {
                assert_eq!(
                    key_matches(key, name),
                    normalize_key(key) == name,
                    "{key:?} against {name:?}"
                );
            }
        }
    }

    #[test]
    fn bad_input_gets_readable_errors() {
        let value = json!({"Port": [1], "Tags": {"a": 1}, "Interval": "soon"});
        let o = Obj::new(&value).unwrap();
        assert!(o.i64(&["port"]).unwrap_err().contains("port"));
        assert!(o.str_list(&["tags"]).is_err());
        assert!(o.duration_ns(&["interval"]).is_err());
        assert!(parse_json(b"{").is_err());
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(parse_json(deep.as_bytes()).unwrap_err().contains("nests"));
        assert_eq!(parse_json(b"  ").unwrap(), json!({}));
    }
}
