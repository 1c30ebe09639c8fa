//! Lenient decoding of request bodies and config objects, as Consul decodes them: field
//! names match case-insensitively and with or without underscores (`EnableTagOverride`,
//! `enabletagoverride` and `enable_tag_override` are one field), numbers may arrive as
//! strings and booleans as `"true"`, and durations are Go duration strings or nanoseconds.
//! Map-valued fields (`Meta`, `NodeMeta`, `Header`) keep their keys verbatim.
//!
//! Every accessor returns a readable error naming the field; nothing here panics on bad input.
//!
//! Strictness is separate from that leniency and comes first: Consul decodes an HTTP body
//! with Go's `encoding/json` and `DisallowUnknownFields`, so a field its struct does not
//! have, or a value of the wrong JSON type, is a 400. [`parse_strict`] checks a body against
//! a [`Schema`] — the table of the fields Consul's struct has, each with the JSON it takes and
//! the other spellings Consul's decoder translates (`tls_skip_verify`) — and words its
//! refusals as Go does (`json: unknown field "Foo"`). The tables live in
//! [`bodies`](super::bodies); config files keep the lenient path alone, as Consul's
//! mapstructure decoding of them has its own rules.

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

/// What Go's JSON decoder accepts for one field of a Consul struct.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Str,
    /// A Go `int`: a JSON number without a fraction.
    Int,
    /// A Go `uint64` and kin: a JSON number without a fraction or sign.
    Uint,
    Float,
    Bool,
    /// A duration Consul's own decoder reads: a Go duration string or a number of
    /// nanoseconds.
    Duration,
    /// A Go `[]byte`: base64 text.
    Bytes,
    StrList,
    FloatList,
    /// A `map[string]string`.
    StrMap,
    /// A `map[string][]string` (an HTTP check's `Header`).
    StrListMap,
    /// A struct (or a pointer to one).
    Obj(&'static Schema),
    ObjList(&'static Schema),
    /// A map from names to structs (`TaggedAddresses` of a service).
    ObjMap(&'static Schema),
    /// A `map[string]interface{}`: any object.
    AnyObj,
    /// An `interface{}`: any value.
    Any,
}

impl Kind {
    /// The Go type Go's errors name for a field of this kind.
    fn go_type(self) -> &'static str {
        match self {
            Kind::Str => "string",
            Kind::Int => "int",
            Kind::Uint => "uint64",
            Kind::Float => "float64",
            Kind::Bool => "bool",
            Kind::Duration => "time.Duration",
            Kind::Bytes => "[]uint8",
            Kind::StrList => "[]string",
            Kind::FloatList => "[]float64",
            Kind::StrMap => "map[string]string",
            Kind::StrListMap => "map[string][]string",
            Kind::Obj(schema) | Kind::ObjList(schema) | Kind::ObjMap(schema) => schema.go_type,
            Kind::AnyObj => "map[string]interface {}",
            Kind::Any => "interface {}",
        }
    }
}

/// One field of a Consul struct as its JSON decoder sees it.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    /// The Go field name; JSON keys match it case-insensitively, as Go's decoder matches.
    pub name: &'static str,
    /// Other keys Consul's decoder maps onto the field (its `alias` tags and the snake-case
    /// twins its `UnmarshalJSON` methods declare), matched the same way.
    pub aliases: &'static [&'static str],
    pub kind: Kind,
}

/// A field known by its Go name alone.
pub const fn field(name: &'static str, kind: Kind) -> Field {
    Field {
        name,
        aliases: &[],
        kind,
    }
}

/// A field with the other spellings Consul translates onto it.
pub const fn aliased(name: &'static str, aliases: &'static [&'static str], kind: Kind) -> Field {
    Field {
        name,
        aliases,
        kind,
    }
}

/// The fields of a Consul struct a body decodes into.
#[derive(Debug)]
pub struct Schema {
    /// The Go type, as Go's errors name it (`structs.ServiceDefinition`).
    pub go_type: &'static str,
    /// Whether a key no field names is refused. Consul's decoder refuses it everywhere
    /// except below a type whose own `UnmarshalJSON` decodes without that rule (a session,
    /// a health check's `Definition`).
    pub strict: bool,
    pub fields: &'static [Field],
}

impl Schema {
    /// The field a JSON key names, by Go's rule: the name or an alias, case-insensitively.
    pub fn field(&self, key: &str) -> Option<&'static Field> {
        self.fields.iter().find(|field| {
            go_name_matches(key, field.name)
                || field
                    .aliases
                    .iter()
                    .any(|alias| go_name_matches(key, alias))
        })
    }

    /// The struct's own name, without its package, as Go's type errors start their path.
    fn struct_name(&self) -> &'static str {
        let name = self.go_type.trim_start_matches(['*', '[', ']']);
        name.rsplit_once('.').map_or(name, |(_, short)| short)
    }
}

/// Whether a JSON key selects the Go field `name`: equal ignoring case, as Go's
/// `encoding/json` folds (the field names are ASCII, so a key must be too).
fn go_name_matches(key: &str, name: &str) -> bool {
    key.eq_ignore_ascii_case(name)
}

/// Parses a body and checks it against `schema` as Consul's decoder would (an empty body is
/// an empty object, as [`parse_json`] reads it). The value comes back for the lenient
/// accessors to read.
pub fn parse_strict(body: &[u8], schema: &'static Schema) -> Result<Value, String> {
    let value = parse_json(body)?;
    check_strict(&value, Kind::Obj(schema))?;
    Ok(value)
}

/// Checks a parsed body against the Go type `kind` describes: the top-level shape, then
/// every field below it.
pub fn check_strict(value: &Value, kind: Kind) -> Result<(), String> {
    let mut path = Vec::new();
    match (kind, value) {
        (_, Value::Null) => Ok(()),
        (Kind::Obj(schema), Value::Object(map)) => check_object(map, schema, &mut path),
        (Kind::ObjList(schema), Value::Array(items)) => {
            for item in items {
                match item {
                    Value::Null => {}
                    Value::Object(map) => check_object(map, schema, &mut path)?,
                    other => return Err(go_value_error(other, schema.go_type)),
                }
            }
            Ok(())
        }
        (Kind::Obj(_) | Kind::ObjList(_), other) => Err(go_value_error(other, kind.go_type())),
        _ => check_value(value, kind, "", &mut path),
    }
}

/// `json: cannot unmarshal array into Go value of type structs.X`: a body of the wrong
/// shape altogether.
fn go_value_error(value: &Value, go_type: &str) -> String {
    format!(
        "json: cannot unmarshal {} into Go value of type {go_type}",
        json_kind(value)
    )
}

fn check_object(
    map: &Map<String, Value>,
    schema: &'static Schema,
    path: &mut Vec<&'static str>,
) -> Result<(), String> {
    debug_assert!(
        path.len() <= BODY_DEPTH_MAX,
        "checked deeper than the body may nest"
    );
    for (key, value) in map {
        let Some(field) = schema.field(key) else {
            if schema.strict {
                return Err(format!("json: unknown field {key:?}"));
            }
            continue;
        };
        if value.is_null() {
            continue;
        }
        path.push(field.name);
        check_value(value, field.kind, schema.struct_name(), path)?;
        path.pop();
    }
    Ok(())
}

/// Checks one field's value; `owner` is the struct holding it and `path` the field names
/// from the body's top, which Go's type errors print.
fn check_value(
    value: &Value,
    kind: Kind,
    owner: &str,
    path: &mut Vec<&'static str>,
) -> Result<(), String> {
    let wrong = |value: &Value, path: &[&str]| {
        // Go names the number itself only when a number did not fit an integer field.
        let shown = match (kind, value) {
            (Kind::Int | Kind::Uint, Value::Number(n)) => format!("number {n}"),
            (_, other) => json_kind(other).to_string(),
        };
        Err(format!(
            "json: cannot unmarshal {shown} into Go struct field {owner}.{} of type {}",
            path.join("."),
            kind.go_type()
        ))
    };
    match (kind, value) {
        (_, Value::Null) | (Kind::Any, _) | (Kind::AnyObj, Value::Object(_)) => Ok(()),
        (Kind::Str | Kind::Bytes, Value::String(_)) | (Kind::Bool, Value::Bool(_)) => Ok(()),
        (Kind::Float, Value::Number(_)) => Ok(()),
        (Kind::Int, Value::Number(n)) if n.is_i64() => Ok(()),
        (Kind::Uint, Value::Number(n)) if n.is_u64() => Ok(()),
        (Kind::Duration, Value::Number(_)) => Ok(()),
        (Kind::Duration, Value::String(text)) => parse_go_duration_nanos(text)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        (Kind::StrList, Value::Array(items)) => match items
            .iter()
            .find(|item| !matches!(item, Value::String(_) | Value::Null))
        {
            None => Ok(()),
            Some(item) => wrong_element(item, owner, path, "string"),
        },
        (Kind::FloatList, Value::Array(items)) => match items
            .iter()
            .find(|item| !matches!(item, Value::Number(_) | Value::Null))
        {
            None => Ok(()),
            Some(item) => wrong_element(item, owner, path, "float64"),
        },
        (Kind::StrMap, Value::Object(map)) => match map
            .values()
            .find(|item| !matches!(item, Value::String(_) | Value::Null))
        {
            None => Ok(()),
            Some(item) => wrong_element(item, owner, path, "string"),
        },
        (Kind::StrListMap, Value::Object(map)) => {
            for item in map.values() {
                check_value(item, Kind::StrList, owner, path)?;
            }
            Ok(())
        }
        (Kind::Obj(schema), Value::Object(map)) => check_object(map, schema, path),
        (Kind::ObjList(schema), Value::Array(items)) => {
            for item in items {
                check_value(item, Kind::Obj(schema), owner, path)?;
            }
            Ok(())
        }
        (Kind::ObjMap(schema), Value::Object(map)) => {
            for item in map.values() {
                check_value(item, Kind::Obj(schema), owner, path)?;
            }
            Ok(())
        }
        (_, other) => wrong(other, path),
    }
}

/// A list or map element of the wrong JSON type, as Go words it.
fn wrong_element(value: &Value, owner: &str, path: &[&str], go_type: &str) -> Result<(), String> {
    Err(format!(
        "json: cannot unmarshal {} into Go struct field {owner}.{} of type {go_type}",
        json_kind(value),
        path.join(".")
    ))
}

/// A JSON value's type as Go's decoder names it.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
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
