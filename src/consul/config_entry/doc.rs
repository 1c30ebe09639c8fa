//! An ordered JSON document, and decoding a lenient JSON value into one by a schema, as
//! Consul's `DecodeConfigEntry` does with mapstructure: field names match case-insensitively
//! and in snake case, values are weakly typed (`"5"` is 5, `"true"` is true, a single value
//! is a one-element list, a one-element list of objects is the object), durations are Go
//! duration strings or nanoseconds, and keys the schema does not know are collected with
//! their paths (`Sources[0].Foo`) for Consul's `invalid config key` error.
//!
//! Output is canonical: fields in the schema's order (Go's struct order), zero values
//! omitted where Consul's JSON omits them, durations as Go duration strings. Opaque values
//! (proxy `Config`, Envoy extensions) are kept as given and written with sorted keys, as Go
//! writes maps.

use crate::consul::body::normalize_key;
use crate::proto::duration::{format_go_duration, parse_go_duration_nanos};
use serde_json::Value;

/// One field of a schema: its name as Consul writes it, its type, and whether Consul writes
/// it when it holds its zero value (no `omitempty`, or a struct value, which Go always
/// writes).
#[derive(Clone, Copy, Debug)]
pub struct F {
    pub name: &'static str,
    pub ty: Ty,
    pub always: bool,
}

/// A field's type.
#[derive(Clone, Copy, Debug)]
pub enum Ty {
    Str,
    Bool,
    Int,
    Float,
    /// A Go duration; written as its string.
    Duration,
    StrList,
    IntList,
    /// A map of strings (`Meta`).
    StrMap,
    /// A struct value: written even when empty.
    Obj(&'static [F]),
    /// A struct pointer: absent unless given.
    OptObj(&'static [F]),
    ObjList(&'static [F]),
    /// A map from names to structs (`Subsets`, `Failover`).
    ObjMap(&'static [F]),
    /// Anything, kept as given.
    Opaque,
    /// An opaque map (a Go `map[string]interface{}` or struct pointer praetor does not
    /// model): kept as given, a list of one object taken as the object, as HCL blocks come.
    OpaqueMap,
}

/// A written field that is `always` written.
pub const fn always(name: &'static str, ty: Ty) -> F {
    F {
        name,
        ty,
        always: true,
    }
}

/// A field omitted when empty (`omitempty`); struct values are always written regardless.
pub const fn omit(name: &'static str, ty: Ty) -> F {
    F {
        name,
        ty,
        always: matches!(ty, Ty::Obj(_)),
    }
}

/// A decoded value, with objects in field order.
#[derive(Clone, Debug, PartialEq)]
pub enum Doc {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Doc>),
    Obj(Vec<(String, Doc)>),
    /// An opaque value, written as serde_json writes it (map keys sorted, as Go does).
    Raw(Value),
    /// Compact JSON text rendered before, written as it is.
    Json(String),
}

impl Doc {
    /// The field `name` of an object.
    pub fn get(&self, name: &str) -> Option<&Doc> {
        match self {
            Doc::Obj(fields) => fields.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The text of string field `name`, empty when absent.
    pub fn str(&self, name: &str) -> &str {
        match self.get(name) {
            Some(Doc::Str(s)) => s,
            _ => "",
        }
    }

    pub fn int(&self, name: &str) -> i64 {
        match self.get(name) {
            Some(Doc::Int(i)) => *i,
            _ => 0,
        }
    }

    pub fn bool(&self, name: &str) -> bool {
        matches!(self.get(name), Some(Doc::Bool(true)))
    }

    /// The elements of list field `name`, empty when absent.
    pub fn list(&self, name: &str) -> &[Doc] {
        match self.get(name) {
            Some(Doc::List(items)) => items,
            _ => &[],
        }
    }

    /// The `(key, value)` pairs of an object-valued field (a map), empty when absent.
    pub fn pairs(&self, name: &str) -> &[(String, Doc)] {
        match self.get(name) {
            Some(Doc::Obj(fields)) => fields,
            _ => &[],
        }
    }

    /// The strings of a string-list field.
    pub fn strs(&self, name: &str) -> Vec<&str> {
        self.list(name)
            .iter()
            .filter_map(|d| match d {
                Doc::Str(s) => Some(s.as_str()),
                _ => None,
            })
            .collect()
    }

    /// A map field's string pairs.
    pub fn str_pairs(&self, name: &str) -> Vec<(String, String)> {
        self.pairs(name)
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Doc::Str(s) => s.clone(),
                    _ => String::new(),
                };
                (k.clone(), v)
            })
            .collect()
    }

    pub fn set(&mut self, name: &str, value: Doc) {
        if let Doc::Obj(fields) = self {
            match fields.iter_mut().find(|(k, _)| k == name) {
                Some(slot) => slot.1 = value,
                None => fields.push((name.to_string(), value)),
            }
        }
    }

    /// Compact JSON.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Doc::Null => out.extend_from_slice(b"null"),
            Doc::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            Doc::Int(i) => out.extend_from_slice(i.to_string().as_bytes()),
            Doc::Float(f) => write_float(out, *f),
            Doc::Str(s) => crate::consul::json::write_str(out, s),
            Doc::List(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    item.write(out);
                }
                out.push(b']');
            }
            Doc::Obj(fields) => {
                out.push(b'{');
                write_fields(out, fields);
                out.push(b'}');
            }
            Doc::Raw(value) => {
                serde_json::to_writer(&mut *out, value).expect("writing into a Vec cannot fail")
            }
            Doc::Json(text) => out.extend_from_slice(text.as_bytes()),
        }
    }

    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(128);
        self.write(&mut out);
        String::from_utf8(out).expect("JSON written from strings is UTF-8")
    }
}

/// The fields of an object, comma-separated, without braces.
pub fn write_fields(out: &mut Vec<u8>, fields: &[(String, Doc)]) {
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        crate::consul::json::write_str(out, k);
        out.push(b':');
        v.write(out);
    }
}

/// A float as Go writes a float: integral values without a fraction.
fn write_float(out: &mut Vec<u8>, f: f64) {
    if !f.is_finite() {
        out.extend_from_slice(b"0");
    } else if f.fract() == 0.0 && f.abs() < 1e15 {
        out.extend_from_slice((f as i64).to_string().as_bytes());
    } else {
        out.extend_from_slice(f.to_string().as_bytes());
    }
}

/// Re-lays a compact JSON text out as Go's `MarshalIndent(v, "", "    ")`, with a trailing
/// newline; empty objects and arrays stay `{}` and `[]`.
pub fn indent(compact: &[u8], out: &mut Vec<u8>) {
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let newline = |out: &mut Vec<u8>, depth: usize| {
        out.push(b'\n');
        for _ in 0..depth {
            out.extend_from_slice(b"    ");
        }
    };
    let mut i = 0;
    while i < compact.len() {
        let b = compact[i];
        if in_string {
            out.push(b);
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                out.push(b);
            }
            b'{' | b'[' => {
                let close = if b == b'{' { b'}' } else { b']' };
                if compact.get(i + 1) == Some(&close) {
                    out.push(b);
                    out.push(close);
                    i += 2;
                    continue;
                }
                out.push(b);
                depth += 1;
                newline(out, depth);
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                newline(out, depth);
                out.push(b);
            }
            b',' => {
                out.push(b);
                newline(out, depth);
            }
            b':' => out.extend_from_slice(b": "),
            _ => out.push(b),
        }
        i += 1;
    }
    out.push(b'\n');
}

/// Errors met while decoding: mapstructure's type errors and the keys no field took.
#[derive(Debug, Default)]
pub struct Decoding {
    pub type_errors: Vec<String>,
    pub unused: Vec<String>,
}

impl Decoding {
    /// Consul's error text: mapstructure's for type errors, else its unused-key check's.
    pub fn into_result(self) -> Result<(), String> {
        if !self.type_errors.is_empty() {
            let mut text = format!("{} error(s) decoding:\n", self.type_errors.len());
            for e in &self.type_errors {
                text.push_str("\n* ");
                text.push_str(e);
            }
            return Err(text);
        }
        let reasons: Vec<String> = self
            .unused
            .iter()
            .filter(|k| !matches!(k.as_str(), "CreateIndex" | "ModifyIndex" | "Kind" | "kind"))
            .map(|k| {
                let lower = k.to_ascii_lowercase();
                if lower.ends_with("namespace") {
                    format!("invalid config key {k:?}, namespaces are a consul enterprise feature")
                } else {
                    format!("invalid config key {k:?}")
                }
            })
            .collect();
        if reasons.is_empty() {
            return Ok(());
        }
        Err(multierror(&reasons))
    }
}

/// go-multierror's text for a list of errors.
pub fn multierror(reasons: &[String]) -> String {
    let mut text = if reasons.len() == 1 {
        "1 error occurred:".to_string()
    } else {
        format!("{} errors occurred:", reasons.len())
    };
    for r in reasons {
        text.push_str("\n\t* ");
        text.push_str(r);
    }
    text.push_str("\n\n");
    text
}

/// Go's name for the type of a decoded JSON value, as mapstructure prints it.
fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn go_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// Decodes object `input` by `fields` into a canonical object, recording errors in `out`.
pub fn decode_object(input: &Value, fields: &[F], path: &str, out: &mut Decoding) -> Doc {
    let map = match unwrap_single(input) {
        Value::Object(map) => map,
        Value::Null => return zero_object(fields),
        other => {
            out.type_errors
                .push(format!("'{path}' expected a map, got '{}'", go_kind(other)));
            return zero_object(fields);
        }
    };
    let mut taken = vec![false; map.len()];
    let mut result = Vec::with_capacity(fields.len());
    for field in fields {
        let wanted = normalize_key(field.name);
        // The last spelling given wins, as a Go map decode of duplicate keys would.
        let found = map
            .iter()
            .enumerate()
            .rfind(|(_, (k, _))| normalize_key(k) == wanted);
        for (i, (k, _)) in map.iter().enumerate() {
            if normalize_key(k) == wanted {
                taken[i] = true;
            }
        }
        let value = match found {
            Some((_, (_, value))) => decode_value(value, field.ty, &join(path, field.name), out),
            None => None,
        };
        match value {
            Some(v) if field.always || !is_zero(&v) => result.push((field.name.to_string(), v)),
            Some(_) => {}
            None if field.always => result.push((field.name.to_string(), zero(field.ty))),
            None => {}
        }
    }
    for (i, (k, _)) in map.iter().enumerate() {
        if !taken[i] {
            out.unused.push(join(path, k));
        }
    }
    Doc::Obj(result)
}

/// mapstructure's name for the kind of a value it could not put in a map.
fn go_kind(value: &Value) -> &'static str {
    match value {
        Value::Bool(_) => "bool",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "slice",
        Value::Object(_) => "map",
        Value::Null => "invalid",
    }
}

/// HCL turns a block into a list of one object: a list of one is its element.
fn unwrap_single(value: &Value) -> &Value {
    match value {
        Value::Array(items) if items.len() == 1 && items[0].is_object() => &items[0],
        other => other,
    }
}

fn is_zero(doc: &Doc) -> bool {
    match doc {
        Doc::Null => true,
        Doc::Bool(b) => !b,
        Doc::Int(i) => *i == 0,
        Doc::Float(f) => *f == 0.0,
        Doc::Str(s) => s.is_empty(),
        Doc::List(items) => items.is_empty(),
        Doc::Obj(_) | Doc::Json(_) => false,
        Doc::Raw(v) => match v {
            Value::Null => true,
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        },
    }
}

fn zero_object(fields: &[F]) -> Doc {
    Doc::Obj(
        fields
            .iter()
            .filter(|f| f.always)
            .map(|f| (f.name.to_string(), zero(f.ty)))
            .collect(),
    )
}

/// The value Go writes for a field holding its zero value.
fn zero(ty: Ty) -> Doc {
    match ty {
        Ty::Str | Ty::Duration => Doc::Str(String::new()),
        Ty::Bool => Doc::Bool(false),
        Ty::Int => Doc::Int(0),
        Ty::Float => Doc::Float(0.0),
        Ty::Obj(fields) => zero_object(fields),
        Ty::StrList
        | Ty::IntList
        | Ty::StrMap
        | Ty::OptObj(_)
        | Ty::ObjList(_)
        | Ty::ObjMap(_)
        | Ty::Opaque
        | Ty::OpaqueMap => Doc::Null,
    }
}

fn type_error(out: &mut Decoding, path: &str, want: &str, value: &Value) {
    out.type_errors.push(format!(
        "'{path}' expected type '{want}', got unconvertible type '{}', value: '{}'",
        go_type(value),
        go_value(value)
    ));
}

fn weak_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(if *b { "1" } else { "0" }.to_string()),
        _ => None,
    }
}

fn weak_int(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) if s.is_empty() => Some(0),
        Value::String(s) => s.trim().parse().ok(),
        Value::Bool(b) => Some(*b as i64),
        _ => None,
    }
}

fn weak_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::Number(n) => Some(n.as_f64().is_some_and(|f| f != 0.0)),
        Value::String(s) => match s.as_str() {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
            "" | "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// Decodes one value of type `ty`; `None` only for a value to leave out (a type error
/// recorded). A one-element list stands for its element where a scalar is expected, as Go's
/// weak decoding allows.
fn decode_value(value: &Value, ty: Ty, path: &str, out: &mut Decoding) -> Option<Doc> {
    match ty {
        Ty::Str => match weak_string(&single(value)) {
            Some(s) => Some(Doc::Str(s)),
            None if value.is_null() => Some(Doc::Str(String::new())),
            None => {
                type_error(out, path, "string", value);
                None
            }
        },
        Ty::Bool => match weak_bool(&single(value)) {
            Some(b) => Some(Doc::Bool(b)),
            None if value.is_null() => Some(Doc::Bool(false)),
            None => {
                type_error(out, path, "bool", value);
                None
            }
        },
        Ty::Int => match weak_int(&single(value)) {
            Some(i) => Some(Doc::Int(i)),
            None if value.is_null() => Some(Doc::Int(0)),
            None => {
                type_error(out, path, "int", value);
                None
            }
        },
        Ty::Float => decode_float(value, path, out),
        Ty::Duration => decode_duration(value, path, out),
        Ty::StrList => decode_scalar_list(value, Ty::Str, path, out),
        Ty::IntList => decode_scalar_list(value, Ty::Int, path, out),
        Ty::StrMap => decode_str_map(value, path, out),
        Ty::Obj(fields) | Ty::OptObj(fields) => {
            if value.is_null() {
                return Some(if matches!(ty, Ty::Obj(_)) {
                    zero_object(fields)
                } else {
                    Doc::Null
                });
            }
            Some(decode_object(value, fields, path, out))
        }
        Ty::ObjList(fields) => decode_object_list(value, fields, path, out),
        Ty::ObjMap(fields) => decode_object_map(value, fields, path, out),
        Ty::Opaque => Some(Doc::Raw(value.clone())),
        Ty::OpaqueMap => Some(Doc::Raw(unwrap_single(value).clone())),
    }
}

/// A one-element list's element; any other value as it is.
fn single(value: &Value) -> Value {
    match value {
        Value::Array(items) if items.len() == 1 => items[0].clone(),
        other => other.clone(),
    }
}

/// A finite float from a number or numeric text (null: zero).
fn decode_float(value: &Value, path: &str, out: &mut Decoding) -> Option<Doc> {
    let parsed = match &single(value) {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        Value::Null => Some(0.0),
        _ => None,
    };
    match parsed {
        Some(f) if f.is_finite() => Some(Doc::Float(f)),
        _ => {
            type_error(out, path, "float32", value);
            None
        }
    }
}

/// A duration from Go duration text or nanoseconds, kept as Go prints it (zero: empty).
fn decode_duration(value: &Value, path: &str, out: &mut Decoding) -> Option<Doc> {
    let nanos = match &single(value) {
        Value::String(s) if s.is_empty() => Ok(0),
        Value::String(s) => parse_go_duration_nanos(s).map_err(|e| e.to_string()),
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .ok_or_else(|| format!("'{path}' expected a duration")),
        Value::Null => Ok(0),
        _ => Err(String::new()),
    };
    match nanos {
        Ok(0) => Some(Doc::Str(String::new())),
        Ok(ns) => Some(Doc::Str(format_go_duration(ns))),
        Err(e) if e.is_empty() => {
            type_error(out, path, "time.Duration", value);
            None
        }
        Err(e) => {
            out.type_errors
                .push(format!("error decoding '{path}': {e}"));
            None
        }
    }
}

/// A list of `element` scalars; a lone value is a list of one, and elements that do not
/// decode are left out (their errors recorded).
fn decode_scalar_list(value: &Value, element: Ty, path: &str, out: &mut Decoding) -> Option<Doc> {
    let items: Vec<Value> = match value {
        Value::Array(items) => items.clone(),
        Value::Null => return Some(Doc::Null),
        other => vec![other.clone()],
    };
    let mut list = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        list.extend(decode_value(item, element, &format!("{path}[{i}]"), out));
    }
    Some(Doc::List(list))
}

/// A map of strings, keys sorted as Go writes them.
fn decode_str_map(value: &Value, path: &str, out: &mut Decoding) -> Option<Doc> {
    match unwrap_single(value) {
        Value::Object(map) => {
            let mut pairs: Vec<(String, Doc)> = Vec::with_capacity(map.len());
            for (k, v) in map {
                match weak_string(v) {
                    Some(s) => pairs.push((k.clone(), Doc::Str(s))),
                    None => type_error(out, &format!("{path}[{k}]"), "string", v),
                }
            }
            // Go writes map keys sorted.
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            Some(Doc::Obj(pairs))
        }
        Value::Null => Some(Doc::Null),
        other => {
            type_error(out, path, "map[string]string", other);
            None
        }
    }
}

/// A list of objects of `fields`; a lone object is a list of one.
fn decode_object_list(
    value: &Value,
    fields: &'static [F],
    path: &str,
    out: &mut Decoding,
) -> Option<Doc> {
    let items: Vec<&Value> = match value {
        Value::Array(items) => items.iter().collect(),
        Value::Null => return Some(Doc::Null),
        other => vec![other],
    };
    let list = items
        .iter()
        .enumerate()
        .map(|(i, item)| decode_object(item, fields, &format!("{path}[{i}]"), out))
        .collect();
    Some(Doc::List(list))
}

/// A map of objects of `fields`, keys sorted as Go writes them.
fn decode_object_map(
    value: &Value,
    fields: &'static [F],
    path: &str,
    out: &mut Decoding,
) -> Option<Doc> {
    match unwrap_single(value) {
        Value::Object(map) => {
            let mut pairs: Vec<(String, Doc)> = map
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        decode_object(v, fields, &format!("{path}[{k}]"), out),
                    )
                })
                .collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            Some(Doc::Obj(pairs))
        }
        Value::Null => Some(Doc::Null),
        other => {
            type_error(out, path, "map", other);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INNER: &[F] = &[omit("Mode", Ty::Str)];
    const FIELDS: &[F] = &[
        always("Protocol", Ty::Str),
        omit("Port", Ty::Int),
        omit("MeshGateway", Ty::Obj(INNER)),
        omit("Timeout", Ty::Duration),
        omit("Tags", Ty::StrList),
        omit("Meta", Ty::StrMap),
        omit("Config", Ty::Opaque),
    ];

    fn decode(text: &str) -> (Doc, Decoding) {
        let value: Value = serde_json::from_str(text).unwrap();
        let mut out = Decoding::default();
        let doc = decode_object(&value, FIELDS, "", &mut out);
        (doc, out)
    }

    #[test]
    fn decodes_leniently_into_consuls_order_and_zero_values() {
        let (doc, out) = decode(
            r#"{"meta":{"b":"2","a":1},"timeout":"90s","mesh_gateway":[{"mode":"local"}],
                "port":"8080","tags":"one","config":{"z":1,"a":{"b":true}}}"#,
        );
        assert!(
            out.type_errors.is_empty() && out.unused.is_empty(),
            "{out:?}"
        );
        assert_eq!(
            doc.to_json(),
            r#"{"Protocol":"","Port":8080,"MeshGateway":{"Mode":"local"},"Timeout":"1m30s","Tags":["one"],"Meta":{"a":"1","b":"2"},"Config":{"a":{"b":true},"z":1}}"#
        );
        let (doc, _) = decode("{}");
        assert_eq!(doc.to_json(), r#"{"Protocol":"","MeshGateway":{}}"#);
    }

    #[test]
    fn unknown_keys_and_type_errors_read_as_consuls() {
        let (_, out) = decode(r#"{"Nope":1,"MeshGateway":{"Other":2},"Namespace":"x"}"#);
        assert_eq!(
            out.into_result().unwrap_err(),
            "3 errors occurred:\n\t* invalid config key \"MeshGateway.Other\"\n\t* invalid config key \"Namespace\", namespaces are a consul enterprise feature\n\t* invalid config key \"Nope\"\n\n"
        );
        let (_, out) = decode(r#"{"Port":{"a":1}}"#);
        assert_eq!(
            out.into_result().unwrap_err(),
            "1 error(s) decoding:\n\n* 'Port' expected type 'int', got unconvertible type 'map[string]interface {}', value: '{\"a\":1}'"
        );
        let (_, out) = decode(r#"{"Timeout":"soon"}"#);
        assert!(out
            .into_result()
            .unwrap_err()
            .contains("time: invalid duration"));
    }

    #[test]
    fn indents_like_go() {
        let mut out = Vec::new();
        indent(br#"{"a":[1,{"b":"x,y:{"}],"c":{},"d":[]}"#, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\n    \"a\": [\n        1,\n        {\n            \"b\": \"x,y:{\"\n        }\n    ],\n    \"c\": {},\n    \"d\": []\n}\n"
        );
    }
}
