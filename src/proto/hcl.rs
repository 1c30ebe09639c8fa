//! HCL as Consul reads it: HCL1 (hashicorp/hcl v1), which is what Consul's config loader
//! decodes, not HCL2. Consul configs lean on HCL1 forms that an HCL2 parser rejects: blocks on
//! one line (`acl { tokens { initial_management = "x" } }`), several items on one line
//! without separators (`ports { dns = 1 http = 2 }`), quoted keys inside blocks
//! (`node_meta { "rack-id" = "r1" }`), commas between items and after blocks (`},`), and
//! `key = { … }` written for `key { … }`.
//!
//! The parser turns a document into the JSON object Consul's JSON configs spell, so one
//! typed loader serves both syntaxes. HCL1 keeps every block as a list of objects and lets
//! the target type unwrap single ones; without that type information, a repeated key is
//! folded here by name instead: keys that Consul reads as lists of objects (`services`,
//! `checks`, `watches`, `upstreams`, …) collect their blocks into a list (a single block
//! becomes a one-element list), `service` and `check` repeated become a list too (the config
//! merge turns them into `services`/`checks`), a repeated object is merged key by key, and a
//! repeated scalar keeps its last value. Consul itself refuses repeated blocks of a
//! single-object section; merging them is the one place this parser accepts more.
//!
//! Invariants: the input is bounded (`HCL_TEXT_BYTES_MAX`) and so is nesting
//! (`HCL_DEPTH_MAX`), so a hostile document costs linear time and bounded stack; every error
//! names its line and column (1-based, columns in characters). A document whose first
//! non-blank character is `{` is JSON, as HCL1 decides too.

use serde_json::{Map, Number, Value};
use std::fmt;

/// Largest document the parser accepts; config files are already capped at this size.
pub const HCL_TEXT_BYTES_MAX: usize = 16 << 20;
/// Deepest nesting of objects and lists: far beyond any real config, shallow enough that
/// the recursive descent cannot exhaust the stack.
pub const HCL_DEPTH_MAX: usize = 64;
/// Longest heredoc anchor (`<<EOF`).
const HEREDOC_ANCHOR_BYTES_MAX: usize = 128;

/// Keys Consul decodes as lists of objects: their blocks are collected into a list.
const LIST_OF_BLOCKS_KEYS: &[&str] = &[
    "services",
    "checks",
    "watches",
    "upstreams",
    "paths",
    "bootstrap",
    "add_headers",
    "managed_service_provider",
];

/// Single-object keys that Consul also accepts repeated, one entry per block.
const REPEATABLE_BLOCK_KEYS: &[&str] = &["service", "check"];

/// A syntax error, with the position it was found at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HclError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for HclError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

/// Parses an HCL1 (or JSON) document into a JSON object, folding repeated keys as the module
/// docs describe (what the config loader wants).
pub fn parse(text: &str) -> Result<Map<String, Value>, HclError> {
    parse_with(text, Repeats::Fold)
}

/// Parses an HCL1 (or JSON) document keeping every repeated key: the second and later values
/// of a key turn it into a list of all its values, in order, and nothing is merged. ACL rules
/// need this: `key "a" { policy = "deny" }` followed by `key "a" { policy = "read" }` must
/// reach the rule merger as two rules (deny wins), not folded into the last one.
pub fn parse_keeping_repeats(text: &str) -> Result<Map<String, Value>, HclError> {
    parse_with(text, Repeats::Keep)
}

/// What a repeated key in one object becomes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Repeats {
    Fold,
    Keep,
}

fn parse_with(text: &str, repeats: Repeats) -> Result<Map<String, Value>, HclError> {
    if text.len() > HCL_TEXT_BYTES_MAX {
        return Err(HclError {
            line: 1,
            column: 1,
            message: format!("document exceeds {HCL_TEXT_BYTES_MAX} bytes"),
        });
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim_start().starts_with('{') {
        return parse_json(text);
    }
    let mut parser = Parser {
        text,
        pos: 0,
        depth: 0,
        repeats,
    };
    let body = parser.body(false)?;
    debug_assert_eq!(parser.depth, 0, "every nesting level was left");
    debug_assert_eq!(parser.pos, text.len(), "the whole document was read");
    Ok(body)
}

fn parse_json(text: &str) -> Result<Map<String, Value>, HclError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(HclError {
            line: 1,
            column: 1,
            message: "the top level must be an object".to_string(),
        }),
        Err(e) => Err(HclError {
            line: e.line(),
            column: e.column(),
            message: format!("invalid JSON: {e}"),
        }),
    }
}

struct Parser<'a> {
    text: &'a str,
    /// Byte offset of the next unread character.
    pos: usize,
    /// Objects and lists currently open.
    depth: usize,
    repeats: Repeats,
}

fn is_identifier_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || (!c.is_ascii() && c.is_alphabetic())
}

fn is_identifier_continue(c: char) -> bool {
    is_identifier_start(c) || c.is_ascii_digit() || c == '-' || c == '.'
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        let mut chars = self.text[self.pos..].chars();
        chars.next();
        chars.next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn error_at(&self, pos: usize, message: impl Into<String>) -> HclError {
        let before = &self.text[..pos.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
        let column = before[line_start..].chars().count() + 1;
        HclError {
            line,
            column,
            message: message.into(),
        }
    }

    fn error(&self, message: impl Into<String>) -> HclError {
        self.error_at(self.pos, message)
    }

    fn enter(&mut self) -> Result<(), HclError> {
        if self.depth >= HCL_DEPTH_MAX {
            return Err(self.error(format!("nesting deeper than {HCL_DEPTH_MAX} levels")));
        }
        self.depth += 1;
        Ok(())
    }

    fn leave(&mut self) {
        assert!(self.depth > 0, "leaving a level that was never entered");
        self.depth -= 1;
    }

    /// Skips whitespace and the three comment forms.
    fn skip_trivia(&mut self) -> Result<(), HclError> {
        loop {
            match self.peek() {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some('#') => self.skip_line(),
                Some('/') if self.peek_second() == Some('/') => self.skip_line(),
                Some('/') if self.peek_second() == Some('*') => {
                    let start = self.pos;
                    match self.text[self.pos + 2..].find("*/") {
                        Some(end) => self.pos += 2 + end + 2,
                        None => return Err(self.error_at(start, "comment not terminated")),
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn skip_line(&mut self) {
        match self.text[self.pos..].find('\n') {
            Some(end) => self.pos += end + 1,
            None => self.pos = self.text.len(),
        }
    }

    /// A list of items up to the end of the document, or up to (not including) the `}` that
    /// closes an object when `in_object`.
    fn body(&mut self, in_object: bool) -> Result<Map<String, Value>, HclError> {
        let mut map = Map::new();
        loop {
            self.skip_trivia()?;
            match self.peek() {
                None if in_object => return Err(self.error("expected '}' before the end")),
                None => return Ok(map),
                Some('}') if in_object => return Ok(map),
                Some('}') => return Err(self.error("unexpected '}'")),
                Some(_) => {}
            }
            let (key, value) = self.item()?;
            match self.repeats {
                Repeats::Fold => insert_item(&mut map, key, value),
                Repeats::Keep => keep_item(&mut map, key, value),
            }
            self.skip_trivia()?;
            if self.peek() == Some(',') {
                self.bump();
            }
        }
    }

    /// One item: `key = value`, `key { … }`, or `key "nested" … { … }`.
    fn item(&mut self) -> Result<(String, Value), HclError> {
        let mut keys = vec![self.key()?];
        loop {
            self.skip_trivia()?;
            match self.peek() {
                Some('=') => {
                    if keys.len() > 1 {
                        return Err(self.error(format!(
                            "key {:?} has more than one name before '='; only blocks may",
                            keys[0]
                        )));
                    }
                    self.bump();
                    let value = self.value()?;
                    return Ok((keys.pop().expect("one key"), value));
                }
                Some('{') => {
                    let mut value = self.object()?;
                    while keys.len() > 1 {
                        let inner = keys.pop().expect("more than one key");
                        let mut wrapper = Map::new();
                        wrapper.insert(inner, value);
                        value = Value::Object(wrapper);
                    }
                    return Ok((keys.pop().expect("one key"), value));
                }
                Some(c) if c == '"' || is_identifier_start(c) => keys.push(self.key()?),
                Some(c) => {
                    return Err(self.error(format!(
                        "expected '=' or '{{' after key {:?}, found {c:?}",
                        keys[keys.len() - 1]
                    )))
                }
                None => {
                    return Err(self.error(format!(
                        "expected '=' or '{{' after key {:?}, found the end",
                        keys[keys.len() - 1]
                    )))
                }
            }
        }
    }

    fn key(&mut self) -> Result<String, HclError> {
        match self.peek() {
            Some('"') => self.string(),
            Some(c) if is_identifier_start(c) => Ok(self.identifier().to_string()),
            Some(c) => Err(self.error(format!("expected a key, found {c:?}"))),
            None => Err(self.error("expected a key, found the end")),
        }
    }

    fn identifier(&mut self) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(is_identifier_continue) {
            self.bump();
        }
        debug_assert!(self.pos > start, "called on an identifier start");
        &self.text[start..self.pos]
    }

    fn value(&mut self) -> Result<Value, HclError> {
        self.skip_trivia()?;
        match self.peek() {
            Some('"') => Ok(Value::String(self.string()?)),
            Some('<') if self.text[self.pos..].starts_with("<<") => {
                Ok(Value::String(self.heredoc()?))
            }
            Some('[') => self.list(),
            Some('{') => self.object(),
            Some(c) if c == '-' || c.is_ascii_digit() => self.number(),
            Some(c) if is_identifier_start(c) => {
                let start = self.pos;
                match self.identifier() {
                    "true" => Ok(Value::Bool(true)),
                    "false" => Ok(Value::Bool(false)),
                    other => Err(self.error_at(
                        start,
                        format!("unexpected word {other:?}: strings must be quoted"),
                    )),
                }
            }
            Some(c) => Err(self.error(format!("expected a value, found {c:?}"))),
            None => Err(self.error("expected a value, found the end")),
        }
    }

    fn object(&mut self) -> Result<Value, HclError> {
        debug_assert_eq!(self.peek(), Some('{'));
        self.enter()?;
        self.bump();
        let body = self.body(true)?;
        let closing = self.bump();
        assert_eq!(
            closing,
            Some('}'),
            "body(true) stops only at a closing brace"
        );
        self.leave();
        Ok(Value::Object(body))
    }

    fn list(&mut self) -> Result<Value, HclError> {
        debug_assert_eq!(self.peek(), Some('['));
        self.enter()?;
        self.bump();
        let mut items = Vec::new();
        loop {
            self.skip_trivia()?;
            if self.peek() == Some(']') {
                self.bump();
                break;
            }
            items.push(self.value()?);
            self.skip_trivia()?;
            match self.peek() {
                Some(',') => {
                    self.bump();
                }
                Some(']') => {}
                Some(c) => {
                    return Err(self.error(format!("expected ',' or ']' in a list, found {c:?}")))
                }
                None => return Err(self.error("expected ']' before the end")),
            }
        }
        self.leave();
        Ok(Value::Array(items))
    }

    /// A double-quoted string with Go's escapes; `${…}` interpolations are kept verbatim
    /// (quotes inside them do not end the string), as HCL1 hands them to its caller.
    fn string(&mut self) -> Result<String, HclError> {
        let start = self.pos;
        assert_eq!(self.bump(), Some('"'));
        let mut out = String::new();
        let mut braces = 0usize;
        loop {
            let Some(c) = self.bump() else {
                return Err(self.error_at(start, "string not terminated"));
            };
            match c {
                '\n' => {
                    return Err(self.error_at(start, "string not terminated before the line ends"))
                }
                '"' if braces == 0 => return Ok(out),
                '$' if self.peek() == Some('{') => {
                    self.bump();
                    braces += 1;
                    out.push_str("${");
                }
                '{' if braces > 0 => {
                    braces += 1;
                    out.push(c);
                }
                '}' if braces > 0 => {
                    braces -= 1;
                    out.push(c);
                }
                '\\' if braces == 0 => out.push(self.escape()?),
                _ => out.push(c),
            }
        }
    }

    fn escape(&mut self) -> Result<char, HclError> {
        let at = self.pos - 1;
        let Some(c) = self.bump() else {
            return Err(self.error_at(at, "string not terminated"));
        };
        let simple = match c {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            '"' => Some('"'),
            '\\' => Some('\\'),
            '\'' => Some('\''),
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'v' => Some('\u{b}'),
            _ => None,
        };
        if let Some(c) = simple {
            return Ok(c);
        }
        let (digits, radix) = match c {
            'x' => (2, 16),
            'u' => (4, 16),
            'U' => (8, 16),
            '0'..='7' => {
                self.pos -= 1;
                (3, 8)
            }
            other => return Err(self.error_at(at, format!("unknown escape sequence \\{other}"))),
        };
        let end = self.pos + digits;
        let text = self
            .text
            .get(self.pos..end)
            .ok_or_else(|| self.error_at(at, "escape sequence cut short"))?;
        let code = u32::from_str_radix(text, radix)
            .map_err(|_| self.error_at(at, format!("invalid escape sequence \\{c}{text}")))?;
        // A single-byte escape above 0x7f would be half a UTF-8 character.
        if (radix == 8 || c == 'x') && code > 0x7f {
            return Err(self.error_at(at, "byte escapes above \\x7f are not valid UTF-8"));
        }
        self.pos = end;
        char::from_u32(code).ok_or_else(|| self.error_at(at, "escape is not a Unicode character"))
    }

    /// `<<EOF … EOF` and `<<-EOF … EOF`; the latter removes the closing anchor's
    /// indentation from every line when all of them carry it, as HCL1 does.
    fn heredoc(&mut self) -> Result<String, HclError> {
        let start = self.pos;
        self.pos += 2;
        let indented = self.peek() == Some('-');
        if indented {
            self.bump();
        }
        let anchor_start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            self.bump();
        }
        let anchor = &self.text[anchor_start..self.pos];
        if anchor.is_empty() || anchor.len() > HEREDOC_ANCHOR_BYTES_MAX {
            return Err(self.error_at(start, "a heredoc needs an anchor of 1 to 128 letters"));
        }
        if self.text[self.pos..].starts_with("\r\n") {
            self.pos += 2;
        } else if self.peek() == Some('\n') {
            self.pos += 1;
        } else {
            return Err(self.error("a heredoc anchor must end its line"));
        }
        let mut lines: Vec<&str> = Vec::new();
        loop {
            if self.pos >= self.text.len() {
                return Err(self.error_at(start, format!("heredoc {anchor:?} not terminated")));
            }
            let rest = &self.text[self.pos..];
            let (line, advance) = match rest.find('\n') {
                Some(i) => (&rest[..i], i + 1),
                None => (rest, rest.len()),
            };
            let line = line.strip_suffix('\r').unwrap_or(line);
            self.pos += advance;
            if line.trim_start() == anchor {
                let indentation = &line[..line.len() - anchor.len()];
                return Ok(heredoc_text(&lines, indented.then_some(indentation)));
            }
            lines.push(line);
        }
    }

    fn number(&mut self) -> Result<Value, HclError> {
        let start = self.pos;
        if self.peek() == Some('-') {
            self.bump();
        }
        let digits_start = self.pos;
        let hex =
            self.text[self.pos..].starts_with("0x") || self.text[self.pos..].starts_with("0X");
        let mut float = false;
        if hex {
            self.pos += 2;
            while self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                self.bump();
            }
        } else {
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.bump();
            }
            if self.peek() == Some('.') && self.peek_second().is_some_and(|c| c.is_ascii_digit()) {
                float = true;
                self.bump();
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.bump();
                }
            }
            if matches!(self.peek(), Some('e' | 'E')) {
                float = true;
                self.bump();
                if matches!(self.peek(), Some('+' | '-')) {
                    self.bump();
                }
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.bump();
                }
            }
        }
        let text = &self.text[start..self.pos];
        if self.peek().is_some_and(is_identifier_continue) || self.pos == digits_start {
            return Err(self.error_at(start, format!("invalid number {text:?}")));
        }
        let invalid = || self.error_at(start, format!("invalid number {text:?}"));
        if float {
            let parsed: f64 = text.parse().map_err(|_| invalid())?;
            return Number::from_f64(parsed)
                .map(Value::Number)
                .ok_or_else(invalid);
        }
        let negative = text.starts_with('-');
        let magnitude = &self.text[digits_start..self.pos];
        let parsed = if hex {
            i64::from_str_radix(&magnitude[2..], 16)
        } else if magnitude.len() > 1 && magnitude.starts_with('0') {
            // HCL1 reads a leading zero as octal, as Go's strconv does with base 0.
            i64::from_str_radix(&magnitude[1..], 8)
        } else {
            magnitude.parse::<i64>()
        }
        .map_err(|_| invalid())?;
        Ok(Value::Number(Number::from(if negative {
            -parsed
        } else {
            parsed
        })))
    }
}

fn heredoc_text(lines: &[&str], indentation: Option<&str>) -> String {
    let strip = indentation.filter(|prefix| {
        !prefix.is_empty()
            && lines
                .iter()
                .all(|line| line.trim().is_empty() || line.starts_with(prefix))
    });
    let mut out = String::new();
    for line in lines {
        let line = match strip {
            Some(prefix) => line.strip_prefix(prefix).unwrap_or(line.trim_start()),
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn as_list(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        other => vec![other],
    }
}

/// Adds one item to an object; a repeated key becomes the list of all its values.
fn keep_item(map: &mut Map<String, Value>, key: String, value: Value) {
    match map.get_mut(&key) {
        None => {
            map.insert(key, value);
        }
        Some(Value::Array(repeated)) if repeated.first().is_some_and(Value::is_object) => {
            repeated.push(value)
        }
        Some(existing) => {
            let first = std::mem::take(existing);
            *existing = Value::Array(vec![first, value]);
        }
    }
}

/// Adds one item to an object, folding a repeated key as the module docs describe.
fn insert_item(map: &mut Map<String, Value>, key: String, value: Value) {
    let collects = LIST_OF_BLOCKS_KEYS.contains(&key.as_str());
    let repeatable = collects || REPEATABLE_BLOCK_KEYS.contains(&key.as_str());
    let structured = |v: &Value| v.is_object() || v.is_array();
    let Some(existing) = map.get_mut(&key) else {
        let value = if collects && value.is_object() {
            Value::Array(vec![value])
        } else {
            value
        };
        map.insert(key, value);
        return;
    };
    if repeatable && structured(existing) && structured(&value) {
        let mut list = as_list(std::mem::take(existing));
        list.extend(as_list(value));
        *existing = Value::Array(list);
        return;
    }
    match (existing, value) {
        (Value::Object(existing), Value::Object(incoming)) => {
            for (k, v) in incoming {
                insert_item(existing, k, v);
            }
        }
        (existing, value) => *existing = value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(text: &str) -> Value {
        Value::Object(parse(text).unwrap_or_else(|e| panic!("{e} in:\n{text}")))
    }

    fn error(text: &str) -> HclError {
        parse(text).expect_err("must be rejected")
    }

    #[test]
    fn one_line_blocks_and_items_without_separators() {
        assert_eq!(
            parsed(r#"acl { tokens { initial_management = "x" } }"#),
            json!({"acl": {"tokens": {"initial_management": "x"}}})
        );
        assert_eq!(
            parsed("ports { dns = -1 http = 2 https = 3 grpc = 4 }"),
            json!({"ports": {"dns": -1, "http": 2, "https": 3, "grpc": 4}})
        );
        assert_eq!(
            parsed(r#"bootstrap_expect = 3 server = true bind_addr = "0.0.0.0""#),
            json!({"bootstrap_expect": 3, "server": true, "bind_addr": "0.0.0.0"})
        );
        assert_eq!(parsed("ports {}"), json!({"ports": {}}));
    }

    #[test]
    fn quoted_keys_commas_and_equals_before_objects() {
        assert_eq!(
            parsed(r#"node_meta { "rack-id" = "r1", "5mgGQMBk" = "x" }"#),
            json!({"node_meta": {"rack-id": "r1", "5mgGQMBk": "x"}})
        );
        let text = r#"
            check = { name = "a" grpc = "localhost:12345/foo", grpc_use_tls = true interval = "1s" }
            cache = {
                entry_fetch_max_burst = 42
                entry_fetch_rate = 0.334
            },
            service = { name = "b" port = 90 meta={my="value"}, weights={passing=13}}
            telemetry { disable_compat_1.9 = true }
        "#;
        assert_eq!(
            parsed(text),
            json!({
                "check": {"name": "a", "grpc": "localhost:12345/foo", "grpc_use_tls": true, "interval": "1s"},
                "cache": {"entry_fetch_max_burst": 42, "entry_fetch_rate": 0.334},
                "service": {"name": "b", "port": 90, "meta": {"my": "value"}, "weights": {"passing": 13}},
                "telemetry": {"disable_compat_1.9": true},
            })
        );
        // `key = { … }` and `key { … }` are the same thing.
        assert_eq!(
            parsed("performance = { raft_multiplier=9 }"),
            parsed("performance { raft_multiplier = 9 }")
        );
    }

    #[test]
    fn repeated_blocks_fold_by_key() {
        let text = r#"
            limits { rpc_rate = 5 }
            limits { rpc_max_burst = 10, rpc_rate = 7 }
            service { name = "a" }
            service { name = "b" }
            services { name = "c" }
            config_entries {
                bootstrap { kind = "proxy-defaults" name = "global" }
                bootstrap { kind = "service-defaults" name = "web" }
            }
            checks = [{ name = "x" }]
            checks { name = "y" }
            datacenter = "a"
            datacenter = "b"
            bootstrap = true
        "#;
        assert_eq!(
            parsed(text),
            json!({
                "limits": {"rpc_rate": 7, "rpc_max_burst": 10},
                "service": [{"name": "a"}, {"name": "b"}],
                "services": [{"name": "c"}],
                "config_entries": {"bootstrap": [
                    {"kind": "proxy-defaults", "name": "global"},
                    {"kind": "service-defaults", "name": "web"},
                ]},
                "checks": [{"name": "x"}, {"name": "y"}],
                "datacenter": "b",
                "bootstrap": true,
            })
        );
        // A single `service` block stays an object; several names nest.
        assert_eq!(
            parsed(r#"service { name = "a" } a "b" "c" { d = 1 }"#),
            json!({"service": {"name": "a"}, "a": {"b": {"c": {"d": 1}}}})
        );
    }

    #[test]
    fn comments_heredocs_lists_and_literals() {
        let text = "# hash\n// slashes\n/* block\n comment */ a = 1 /* inline */ b = [\n  \"x\", # after\n  \"y\",\n]\nc = <<EOF\nline one\n  line two\nEOF\nd = <<-EOT\n    indented\n      more\n    EOT\ne = [{ f = 1 }, { f = 2 }]\ng = 0x1F\nh = 0644\ni = -2.5e1\nj = \"tab\\tquote\\\"\\u00e9 ${var.x[\"k\"]}\"\n";
        assert_eq!(
            parsed(text),
            json!({
                "a": 1,
                "b": ["x", "y"],
                "c": "line one\n  line two\n",
                "d": "indented\n  more\n",
                "e": [{"f": 1}, {"f": 2}],
                "g": 31,
                "h": 420,
                "i": -25.0,
                "j": "tab\tquote\"é ${var.x[\"k\"]}",
            })
        );
        assert_eq!(parsed("a = []"), json!({"a": []}));
        assert_eq!(parsed("{\"a\": {\"b\": 1}}"), json!({"a": {"b": 1}}));
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = error("a = 1\nb = \"open\n");
        assert_eq!((e.line, e.column), (2, 5), "{e}");
        assert!(e.message.contains("not terminated"), "{e}");
        let e = error("ports {\n  http = abc\n}");
        assert_eq!((e.line, e.column), (2, 10), "{e}");
        assert!(e.message.contains("must be quoted"), "{e}");
        let e = error("a { b = 1");
        assert!(e.message.contains("expected '}'"), "{e}");
        let e = error("list = [1 2]");
        assert_eq!((e.line, e.column), (1, 11), "{e}");
        let e = error("*** 0123 this is not HCL");
        assert_eq!((e.line, e.column), (1, 1), "{e}");
        assert!(error("a b = 1").message.contains("more than one name"));
        assert!(error("/* open").message.contains("comment not terminated"));
        assert!(error("a = <<EOF\nno end\n")
            .message
            .contains("not terminated"));
        assert!(error("a = 12abc").message.contains("invalid number"));
        assert!(error("a = 99999999999999999999")
            .message
            .contains("invalid number"));
        assert!(error("a = \"\\q\"").message.contains("unknown escape"));
        assert!(error("}").message.contains("unexpected '}'"));
        assert!(error("a = [").message.contains("end"));
        assert_eq!(error("é = \"x\" ? = 1").column, 9);
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = format!(
            "a = {}1{}",
            "[".repeat(HCL_DEPTH_MAX),
            "]".repeat(HCL_DEPTH_MAX)
        );
        assert!(parse(&deep).is_ok());
        let deeper = format!(
            "a = {}1{}",
            "[".repeat(HCL_DEPTH_MAX + 1),
            "]".repeat(HCL_DEPTH_MAX + 1)
        );
        assert!(parse(&deeper).unwrap_err().message.contains("nesting"));
        let blocks = format!("{}{}", "a { ".repeat(100_000), "}".repeat(100_000));
        assert!(parse(&blocks).unwrap_err().message.contains("nesting"));
    }
}
