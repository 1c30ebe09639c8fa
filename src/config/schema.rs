//! The checker that runs the key table ([`super::keys`]) over a config document: every key of
//! every block must be one the table names, and every value must have the type the table
//! gives it, as Consul's decoder (mapstructure, without weak typing) decides. A document that
//! passes comes out normalized: each key of a block spelled as Consul also accepts it (any
//! letter case, the Go field name such as `ServiceID` or `EnableTagOverride`, an alias tag)
//! is renamed to its canonical snake_case name, so the readers after the merge see one
//! spelling. The same table then yields the startup warnings for keys accepted but not acted
//! on ([`warnings`]) and the key list of `docs/config.md` ([`render_key_list`]).
//!
//! Errors are Consul's texts: `invalid config key acl.enabeld` for a key no block knows
//! (with the dotted path, list positions as `services[0]`, map keys as `node_meta[rack]`),
//! `'ports.http' expected type 'int', got unconvertible type 'string', value: 'abc'` for a
//! wrong type. Consul reports several unknown keys of one file together; so does this
//! checker, on one line, sorted. Type errors come first, as Consul's decoder fails before it
//! lists unused keys.
//!
//! What Consul's decoder converts and what it refuses is kept exactly, with one exception
//! recorded in docs/decisions.md: a number with a fraction for an integer key is refused
//! here, where Go's decoder would silently truncate it. In particular a single string is not
//! a list of strings, a number is not a duration, and a quoted number is not a number.
//!
//! Pure: no I/O.

use crate::proto::duration::parse_go_duration_nanos;
use serde_json::{Map, Value};

/// The type a key's value must have.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Bool,
    /// A signed integer (Go `int`): a number without fraction.
    Int,
    /// An unsigned integer (Go `uint`, `uint32`, `uint64`): a number without fraction, not
    /// negative.
    Uint,
    /// Any number (Go `float64`).
    Float,
    Str,
    /// A Go duration string (`"10s"`); Consul's config holds durations as strings, so a bare
    /// number is a type error.
    Duration,
    /// A list of strings.
    StrList,
    /// An object whose values are strings (`node_meta`, `meta`).
    StrMap,
    /// An object whose values are lists of strings (a check's `header`).
    StrListMap,
    /// An object with free keys and values, decoded by whoever reads it (`ca_config`, a
    /// proxy's `config`, `snapshot_agent`).
    Map,
    /// A list of free objects, each decoded and checked by its reader (`watches`,
    /// `config_entries.bootstrap`).
    Maps,
    /// An object with the block's keys.
    Object(&'static Block),
    /// A list of objects with the block's keys.
    Objects(&'static Block),
    /// One object with the block's keys, or a list of them: `service` and `check`, which the
    /// HCL reader folds into a list when a file repeats the block.
    OneOrMany(&'static Block),
    /// An object whose values are objects with the block's keys (a service's
    /// `tagged_addresses`, `audit.sink`).
    ObjectMap(&'static Block),
}

/// The keys one object may hold, as one Go struct of Consul's config declares them.
#[derive(Debug)]
pub struct Block {
    /// What the block is, for the documentation (`service definition`).
    pub title: &'static str,
    pub fields: &'static [Field],
    /// Whether a field may also be spelled as its Go field name. Consul's key translation
    /// runs on every nested struct but not on the top level, whose fields come from embedded
    /// structs the translation does not look into.
    pub go_names: bool,
}

/// How the Go field behind a key is named, for [`Block::go_names`] blocks.
#[derive(Clone, Copy, Debug)]
pub enum GoName {
    /// The Go name, lowercased, is the key without its underscores (`EnableTagOverride` for
    /// `enable_tag_override`): the common case.
    Stripped,
    /// The Go name, lowercased, differs (`TokenReplication` for `enable_token_replication`).
    Named(&'static str),
    /// The field belongs to an embedded struct, whose Go names Consul does not translate.
    Embedded,
}

/// Whether a value asked of a key not acted on is what praetor does anyway.
#[derive(Clone, Copy, Debug)]
pub enum Holds {
    /// Whatever it is set to, the setting is warned about.
    Never,
    /// This boolean is how praetor behaves; the other one is warned about.
    Bool(bool),
    /// This integer is how praetor behaves; any other is warned about.
    Int(i64),
    /// An empty string or list is how praetor behaves.
    Empty,
    /// The key's reader knows which values ask for something and warns itself (the table
    /// does not).
    Checked,
}

/// What praetor does with a key it accepts.
#[derive(Clone, Copy, Debug)]
pub enum Use {
    /// praetor acts on it. The text is a piece of code that carries the value beyond
    /// `src/config` (a field path such as `connect.enabled`, or the quoted key a reader of the
    /// merged object looks up); `tests` check that code outside `src/config` contains it.
    Acts(&'static str),
    /// A block whose own keys say what they do.
    Section,
    /// A key inside a block whose use is stated once for the whole block (a service
    /// definition read by the registration code, a block not acted on as a whole).
    Covered,
    /// Accepted, checked, and not acted on: one warning at start when given, unless the
    /// value asked for is how praetor behaves anyway. `kept` names the field of
    /// `AgentConfig` that keeps the value for the code that will act on it ("" when none);
    /// tests check that nothing outside `src/config` reads it.
    NotActedOn {
        why: &'static str,
        holds: Holds,
        kept: &'static str,
    },
    /// A Consul Enterprise setting: accepted and warned about in Consul CE's words.
    Enterprise,
}

/// One known key.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
    pub go_name: GoName,
    pub use_: Use,
}

/// Which reader produced a document: Go types of numbers differ between them (every JSON
/// number is a `float64`, an HCL integer is an `int`), and Consul's messages name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    Json,
    Hcl,
}

/// Checks one source document against the table and normalizes its keys: the first type
/// error, else every unknown key, is the error (without the `failed to parse <file>: `
/// prefix, which the caller adds).
pub fn check_document(document: &mut Map<String, Value>, syntax: Syntax) -> Result<(), String> {
    let mut walk = Walk {
        syntax,
        unknown: Vec::new(),
    };
    walk.object(document, &super::keys::TOP_LEVEL, "")?;
    if walk.unknown.is_empty() {
        return Ok(());
    }
    walk.unknown.sort();
    walk.unknown.dedup();
    let lines: Vec<String> = walk
        .unknown
        .iter()
        .map(|path| format!("invalid config key {path}"))
        .collect();
    Err(lines.join("; "))
}

struct Walk {
    syntax: Syntax,
    unknown: Vec<String>,
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// The lowercased Go field name of `field`, when Consul accepts it and it differs from the
/// key itself.
fn go_spelling(block: &Block, field: &Field) -> Option<String> {
    if !block.go_names {
        return None;
    }
    let go = match field.go_name {
        GoName::Stripped => field.name.replace('_', ""),
        GoName::Named(name) => name.to_string(),
        GoName::Embedded => return None,
    };
    (go != field.name).then_some(go)
}

/// Renames the keys of `object` that Consul reads as one of `block`'s fields to the field's
/// canonical name, as its decoder does: a Go name or alias is moved to the canonical key
/// unless that key is also given (then the alias is dropped); a key differing from a field
/// name only in case is that field unless the exact name is also given. Keys left over are
/// returned: they are unknown.
fn canonicalize(object: &mut Map<String, Value>, block: &Block) -> Vec<String> {
    // Go names and aliases first, as Consul's key translation runs before the decoder
    // matches names.
    let keys: Vec<String> = object.keys().cloned().collect();
    for key in &keys {
        if block.fields.iter().any(|f| f.name == key) {
            continue;
        }
        let lower = key.to_lowercase();
        let Some(field) = block
            .fields
            .iter()
            .find(|f| go_spelling(block, f).is_some_and(|go| go == lower))
        else {
            continue;
        };
        let value = object.remove(key).expect("listed key");
        if !object.contains_key(field.name) {
            object.insert(field.name.to_string(), value);
        }
    }
    // Then names in another letter case.
    let mut unknown = Vec::new();
    let keys: Vec<String> = object.keys().cloned().collect();
    for key in keys {
        if block.fields.iter().any(|f| f.name == key) {
            continue;
        }
        let field = block
            .fields
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(&key) && !object.contains_key(f.name));
        match field {
            Some(field) => {
                let value = object.remove(&key).expect("listed key");
                object.insert(field.name.to_string(), value);
            }
            None => unknown.push(key),
        }
    }
    unknown
}

impl Walk {
    fn object(
        &mut self,
        object: &mut Map<String, Value>,
        block: &'static Block,
        prefix: &str,
    ) -> Result<(), String> {
        for key in canonicalize(object, block) {
            self.unknown.push(join(prefix, &key));
        }
        for field in block.fields {
            if let Some(value) = object.get_mut(field.name) {
                self.value(value, field.kind, &join(prefix, field.name))?;
            }
        }
        Ok(())
    }

    fn value(&mut self, value: &mut Value, kind: Kind, path: &str) -> Result<(), String> {
        if value.is_null() {
            return Ok(());
        }
        let syntax = self.syntax;
        let mismatch = |value: &Value| Err(mismatch(path, kind, value, syntax));
        match kind {
            Kind::Bool if value.is_boolean() => Ok(()),
            Kind::Int if integral(value) => Ok(()),
            Kind::Uint if integral(value) => match value.as_f64() {
                Some(n) if n < 0.0 => Err(format!(
                    "cannot parse '{path}', {} overflows uint",
                    negative_text(value, syntax)
                )),
                _ => Ok(()),
            },
            Kind::Float if value.is_number() => Ok(()),
            Kind::Str if value.is_string() => Ok(()),
            Kind::Duration => match value {
                Value::String(text) => parse_go_duration_nanos(text)
                    .map(|_| ())
                    .map_err(|e| format!("{path}: invalid duration: {text:?}: {e}")),
                other => mismatch(other),
            },
            Kind::StrList => {
                let Value::Array(items) = value else {
                    return mismatch(value);
                };
                for (i, item) in items.iter_mut().enumerate() {
                    self.value(item, Kind::Str, &format!("{path}[{i}]"))?;
                }
                Ok(())
            }
            Kind::StrMap | Kind::StrListMap => {
                let Value::Object(map) = value else {
                    return mismatch(value);
                };
                let inner = if matches!(kind, Kind::StrMap) {
                    Kind::Str
                } else {
                    Kind::StrList
                };
                for (key, item) in map.iter_mut() {
                    self.value(item, inner, &format!("{path}[{key}]"))?;
                }
                Ok(())
            }
            Kind::Map if value.is_object() => Ok(()),
            Kind::Maps => {
                let Value::Array(items) = value else {
                    return mismatch(value);
                };
                for (i, item) in items.iter_mut().enumerate() {
                    self.value(item, Kind::Map, &format!("{path}[{i}]"))?;
                }
                Ok(())
            }
            Kind::Object(block) => match value {
                Value::Object(map) => self.object(map, block, path),
                other => mismatch(other),
            },
            Kind::Objects(block) => {
                let Value::Array(items) = value else {
                    return mismatch(value);
                };
                for (i, item) in items.iter_mut().enumerate() {
                    self.value(item, Kind::Object(block), &format!("{path}[{i}]"))?;
                }
                Ok(())
            }
            Kind::OneOrMany(block) => match value {
                Value::Array(_) => self.value(value, Kind::Objects(block), path),
                _ => self.value(value, Kind::Object(block), path),
            },
            Kind::ObjectMap(block) => {
                let Value::Object(map) = value else {
                    return mismatch(value);
                };
                for (key, item) in map.iter_mut() {
                    self.value(item, Kind::Object(block), &format!("{path}[{key}]"))?;
                }
                Ok(())
            }
            _ => mismatch(value),
        }
    }
}

/// Whether a number is an integer (JSON numbers arrive as floats in Go, so `8500.0` is one).
fn integral(value: &Value) -> bool {
    value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
}

/// Go's name for the type a decoded value has, as mapstructure prints it.
fn go_type_name(value: &Value, syntax: Syntax) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if syntax == Syntax::Json || n.is_f64() => "float64",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) if syntax == Syntax::Hcl && value_is_block_list(value) => {
            "[]map[string]interface {}"
        }
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn value_is_block_list(value: &Value) -> bool {
    value
        .as_array()
        .is_some_and(|items| !items.is_empty() && items.iter().all(Value::is_object))
}

/// Go's `reflect.Kind` name of a decoded value (mapstructure's wording for maps and lists).
fn go_kind_name(value: &Value, syntax: Syntax) -> &'static str {
    match value {
        Value::Null => "invalid",
        Value::Bool(_) => "bool",
        Value::Number(n) if syntax == Syntax::Json || n.is_f64() => "float64",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "slice",
        Value::Object(_) => "map",
    }
}

fn expected_type_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Bool => "bool",
        Kind::Int => "int",
        Kind::Uint => "uint",
        Kind::Float => "float64",
        Kind::Str | Kind::Duration => "string",
        Kind::StrList => "[]string",
        Kind::StrMap => "map[string]string",
        Kind::StrListMap => "map[string][]string",
        Kind::Map => "map[string]interface {}",
        Kind::Maps => "[]map[string]interface {}",
        Kind::Object(_) | Kind::OneOrMany(_) => "struct",
        Kind::Objects(_) => "[]struct",
        Kind::ObjectMap(_) => "map[string]struct",
    }
}

/// A negative number as Go formats it in mapstructure's overflow message: `%d` for an HCL
/// integer, `%f` for a JSON number (a float64).
fn negative_text(value: &Value, syntax: Syntax) -> String {
    match (value.as_i64(), syntax) {
        (Some(n), Syntax::Hcl) => n.to_string(),
        _ => format!("{:.6}", value.as_f64().unwrap_or(0.0)),
    }
}

/// Longest value text an error repeats; longer values are cut so the message stays one
/// readable line.
const VALUE_TEXT_CHARS_MAX: usize = 64;

/// A value as Go's `%v` shows it, shortened.
fn go_value_text(value: &Value) -> String {
    let text = go_format(value);
    let mut short: String = text.chars().take(VALUE_TEXT_CHARS_MAX).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short.replace('\n', "\\n")
}

fn go_format(value: &Value) -> String {
    match value {
        Value::Null => "<nil>".to_string(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(go_format).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(map) => {
            let parts: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_format(v)))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

fn mismatch(path: &str, kind: Kind, value: &Value, syntax: Syntax) -> String {
    match kind {
        Kind::Object(_)
        | Kind::OneOrMany(_)
        | Kind::StrMap
        | Kind::StrListMap
        | Kind::Map
        | Kind::ObjectMap(_) => {
            format!(
                "'{path}' expected a map, got '{}'",
                go_kind_name(value, syntax)
            )
        }
        Kind::StrList | Kind::Maps | Kind::Objects(_) => format!(
            "'{path}': source data must be an array or slice, got {}",
            go_kind_name(value, syntax)
        ),
        _ => format!(
            "'{path}' expected type '{}', got unconvertible type '{}', value: '{}'",
            expected_type_name(kind),
            go_type_name(value, syntax),
            go_value_text(value)
        ),
    }
}

/// The startup warning for a setting praetor accepts but does not act on.
pub fn not_acted_on(setting: &str, why: &str) -> String {
    format!("config: {setting} is accepted but not acted on yet: {why}")
}

/// Whether `value` is what praetor does anyway for a key that [`Holds`] it.
fn holds(value: &Value, holds: Holds) -> bool {
    match holds {
        Holds::Never => false,
        Holds::Bool(b) => value.as_bool() == Some(b),
        Holds::Int(n) => value.as_f64() == Some(n as f64),
        Holds::Empty => is_empty(value),
        Holds::Checked => true,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

/// How a given value is shown in a warning: booleans and numbers are; strings are not, as
/// they may be secrets.
fn setting_text(path: &str, value: &Value) -> String {
    match value {
        Value::Bool(_) | Value::Number(_) => format!("{path} = {}", go_format(value)),
        _ => path.to_string(),
    }
}

/// One line per key of the merged configuration that praetor accepts without acting on it,
/// in the table's order: Consul CE's words for Enterprise settings, else
/// [`not_acted_on`]'s.
pub fn warnings(merged: &Map<String, Value>) -> Vec<String> {
    let mut lines = Vec::new();
    warn_object(merged, &super::keys::TOP_LEVEL, "", &mut lines);
    lines
}

fn warn_object(object: &Map<String, Value>, block: &Block, prefix: &str, lines: &mut Vec<String>) {
    for field in block.fields {
        let Some(value) = object.get(field.name).filter(|v| !v.is_null()) else {
            continue;
        };
        let path = join(prefix, field.name);
        match field.use_ {
            Use::NotActedOn { why, holds: h, .. } => {
                if !holds(value, h) {
                    lines.push(not_acted_on(&setting_text(&path, value), why));
                }
            }
            // Consul CE says nothing of an Enterprise key left empty.
            Use::Enterprise if is_empty(value) => {}
            Use::Enterprise => lines.push(format!(
                "{path:?} is a Consul Enterprise configuration and will have no effect"
            )),
            Use::Section => warn_nested(value, field.kind, &path, lines),
            Use::Acts(_) | Use::Covered => {}
        }
    }
}

fn warn_nested(value: &Value, kind: Kind, path: &str, lines: &mut Vec<String>) {
    match (kind, value) {
        (Kind::Object(block) | Kind::OneOrMany(block), Value::Object(map)) => {
            warn_object(map, block, path, lines)
        }
        (Kind::Objects(block) | Kind::OneOrMany(block), Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                if let Value::Object(map) = item {
                    warn_object(map, block, &format!("{path}[{i}]"), lines);
                }
            }
        }
        _ => {}
    }
}

/// Every block of the table, each once, in the order the top level first reaches it.
pub fn all_blocks() -> Vec<&'static Block> {
    let mut blocks: Vec<&'static Block> = vec![&super::keys::TOP_LEVEL];
    let mut next = 0;
    while next < blocks.len() {
        for field in blocks[next].fields {
            let inner = match field.kind {
                Kind::Object(b) | Kind::Objects(b) | Kind::OneOrMany(b) | Kind::ObjectMap(b) => b,
                _ => continue,
            };
            if !blocks.iter().any(|known| std::ptr::eq(*known, inner)) {
                blocks.push(inner);
            }
        }
        next += 1;
    }
    blocks
}

fn kind_text(kind: Kind) -> String {
    match kind {
        Kind::Bool => "bool".into(),
        Kind::Int => "int".into(),
        Kind::Uint => "unsigned int".into(),
        Kind::Float => "number".into(),
        Kind::Str => "string".into(),
        Kind::Duration => "duration string".into(),
        Kind::StrList => "list of strings".into(),
        Kind::StrMap => "map of strings".into(),
        Kind::StrListMap => "map of string lists".into(),
        Kind::Map => "map (read by its subsystem)".into(),
        Kind::Maps => "list of maps (each read by its subsystem)".into(),
        Kind::Object(b) => format!("block: {}", b.title),
        Kind::Objects(b) => format!("list of blocks: {}", b.title),
        Kind::OneOrMany(b) => format!("block or list of blocks: {}", b.title),
        Kind::ObjectMap(b) => format!("map of blocks: {}", b.title),
    }
}

fn use_text(use_: Use) -> String {
    match use_ {
        Use::Acts(_) => "acts".into(),
        Use::Section => "its keys say".into(),
        Use::Covered => "as its block says".into(),
        Use::NotActedOn { why, holds, .. } => {
            let unless = match holds {
                Holds::Never => String::new(),
                Holds::Bool(b) => format!(" (no warning when `{b}`)"),
                Holds::Int(n) => format!(" (no warning when `{n}`)"),
                Holds::Empty => " (no warning when empty)".into(),
                Holds::Checked => " (warned about only when it asks for something)".into(),
            };
            format!("accepted, not acted on: {why}{unless}")
        }
        Use::Enterprise => "accepted, not acted on: a Consul Enterprise setting".into(),
    }
}

/// The key list of `docs/config.md`, generated from the table (a test keeps the file equal
/// to it): one table per block, each block once.
pub fn render_key_list() -> String {
    let mut text = String::new();
    for block in all_blocks() {
        text.push_str(&format!("### {}\n\n", block.title));
        text.push_str("| Key | Type | What praetor does |\n|---|---|---|\n");
        for field in block.fields {
            text.push_str(&format!(
                "| `{}` | {} | {} |\n",
                field.name,
                kind_text(field.kind),
                use_text(field.use_)
            ));
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests;
