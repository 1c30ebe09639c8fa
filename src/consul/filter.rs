//! Consul's `?filter=` expressions (the go-bexpr grammar) over the documented fields of each
//! endpoint's result rows.
//!
//! Grammar:
//!
//! ```text
//! expr     := and ("or" and)*
//! and      := unary ("and" unary)*
//! unary    := "not" unary | "(" expr ")" | match
//! match    := selector ("==" | "!=") value
//!           | selector ["not"] "contains" value
//!           | selector ["not"] "matches" value
//!           | selector "is" ["not"] "empty"
//!           | value ["not"] "in" selector
//! selector := name ("." name | "[" string "]")*
//! value    := "double-quoted" | `backticked` | number | bare word
//! ```
//!
//! A filter is parsed once per request against the endpoint's [`Schema`], so an unknown
//! selector or an operator the field's type does not support is a 400 before any row is
//! read. Rows are evaluated as the JSON the endpoint returns (field names matched
//! case-insensitively). A selector that passes through a list of objects (`Checks.Status`)
//! matches when any element matches; a missing map key reads as the empty string.
//!
//! Limits: expressions longer than [`FILTER_BYTES_MAX`] or nested deeper than
//! [`FILTER_DEPTH_MAX`] are refused.

use regex::Regex;
use serde_json::Value;

/// Longest filter expression accepted.
pub const FILTER_BYTES_MAX: usize = 4096;
/// Deepest nesting of parentheses and `not`s accepted.
pub const FILTER_DEPTH_MAX: usize = 32;
/// Largest compiled regular expression accepted, in bytes of the compiled program.
const REGEX_SIZE_MAX: usize = 1 << 20;

/// The type of a selectable field.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Str,
    Int,
    Bool,
    StrList,
    StrMap,
    Struct(&'static [Field]),
    StructList(&'static [Field]),
    StructMap(&'static [Field]),
}

/// One selectable field of a row type.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
}

const fn f(name: &'static str, kind: Kind) -> Field {
    Field { name, kind }
}

/// The fields of an endpoint's rows.
pub type Schema = &'static [Field];

const SERVICE_ADDRESS: &[Field] = &[f("Address", Kind::Str), f("Port", Kind::Int)];
const WEIGHTS: &[Field] = &[f("Passing", Kind::Int), f("Warning", Kind::Int)];
const CONNECT: &[Field] = &[f("Native", Kind::Bool)];
const PROXY: &[Field] = &[
    f("DestinationServiceName", Kind::Str),
    f("DestinationServiceID", Kind::Str),
    f("LocalServiceAddress", Kind::Str),
    f("LocalServicePort", Kind::Int),
    f("Mode", Kind::Str),
];

/// `Node` (`/v1/catalog/nodes`).
pub const NODE: Schema = &[
    f("ID", Kind::Str),
    f("Node", Kind::Str),
    f("Address", Kind::Str),
    f("Datacenter", Kind::Str),
    f("TaggedAddresses", Kind::StrMap),
    f("Meta", Kind::StrMap),
];

/// `ServiceNode` (`/v1/catalog/service/<s>`).
pub const SERVICE_NODE: Schema = &[
    f("ID", Kind::Str),
    f("Node", Kind::Str),
    f("Address", Kind::Str),
    f("Datacenter", Kind::Str),
    f("TaggedAddresses", Kind::StrMap),
    f("NodeMeta", Kind::StrMap),
    f("ServiceKind", Kind::Str),
    f("ServiceID", Kind::Str),
    f("ServiceName", Kind::Str),
    f("ServiceTags", Kind::StrList),
    f("ServiceAddress", Kind::Str),
    f("ServiceTaggedAddresses", Kind::StructMap(SERVICE_ADDRESS)),
    f("ServiceWeights", Kind::Struct(WEIGHTS)),
    f("ServiceMeta", Kind::StrMap),
    f("ServicePort", Kind::Int),
    f("ServiceSocketPath", Kind::Str),
    f("ServiceEnableTagOverride", Kind::Bool),
    f("ServiceProxy", Kind::Struct(PROXY)),
    f("ServiceConnect", Kind::Struct(CONNECT)),
];

/// `NodeService` (`/v1/catalog/node/<n>`, `/v1/catalog/node-services/<n>`).
pub const NODE_SERVICE: Schema = &[
    f("Kind", Kind::Str),
    f("ID", Kind::Str),
    f("Service", Kind::Str),
    f("Tags", Kind::StrList),
    f("Address", Kind::Str),
    f("TaggedAddresses", Kind::StructMap(SERVICE_ADDRESS)),
    f("Meta", Kind::StrMap),
    f("Port", Kind::Int),
    f("SocketPath", Kind::Str),
    f("Weights", Kind::Struct(WEIGHTS)),
    f("EnableTagOverride", Kind::Bool),
    f("Proxy", Kind::Struct(PROXY)),
    f("Connect", Kind::Struct(CONNECT)),
];

/// `Intention` (`/v1/connect/intentions`).
pub const INTENTION: Schema = &[
    f("ID", Kind::Str),
    f("Description", Kind::Str),
    f("SourceNS", Kind::Str),
    f("SourceName", Kind::Str),
    f("DestinationNS", Kind::Str),
    f("DestinationName", Kind::Str),
    f("SourceType", Kind::Str),
    f("Action", Kind::Str),
    f("Meta", Kind::StrMap),
    f("Precedence", Kind::Int),
];

/// `HealthCheck` (`/v1/health/node`, `/checks`, `/state`, `/v1/agent/checks`).
pub const HEALTH_CHECK: Schema = &[
    f("Node", Kind::Str),
    f("CheckID", Kind::Str),
    f("Name", Kind::Str),
    f("Status", Kind::Str),
    f("Notes", Kind::Str),
    f("Output", Kind::Str),
    f("ServiceID", Kind::Str),
    f("ServiceName", Kind::Str),
    f("ServiceTags", Kind::StrList),
    f("Type", Kind::Str),
];

/// `CheckServiceNode` (`/v1/health/service/<s>`).
pub const CHECK_SERVICE_NODE: Schema = &[
    f("Node", Kind::Struct(NODE)),
    f("Service", Kind::Struct(NODE_SERVICE)),
    f("Checks", Kind::StructList(HEALTH_CHECK)),
];

/// `AgentService` (`/v1/agent/services`).
pub const AGENT_SERVICE: Schema = &[
    f("Kind", Kind::Str),
    f("ID", Kind::Str),
    f("Service", Kind::Str),
    f("Tags", Kind::StrList),
    f("Meta", Kind::StrMap),
    f("Port", Kind::Int),
    f("Address", Kind::Str),
    f("SocketPath", Kind::Str),
    f("TaggedAddresses", Kind::StructMap(SERVICE_ADDRESS)),
    f("Weights", Kind::Struct(WEIGHTS)),
    f("EnableTagOverride", Kind::Bool),
    f("Datacenter", Kind::Str),
];

/// `Member` (`/v1/agent/members`).
pub const MEMBER: Schema = &[
    f("Name", Kind::Str),
    f("Addr", Kind::Str),
    f("Port", Kind::Int),
    f("Tags", Kind::StrMap),
    f("Status", Kind::Int),
];

/// A binding rule's `Selector`, evaluated over a login's mapped claims
/// (`store::acl::jwt::Identity::selectable`): `value.<attribute>` is a string,
/// `list.<attribute>` a list of strings (`"admins" in list.groups`).
pub const BINDING_RULE_SELECTOR: Schema = &[f("value", Kind::StrMap), f("list", Kind::StrMap)];

#[derive(Debug)]
enum Op {
    Equal(bool),
    Contains(bool),
    Matches(bool, Box<Regex>),
    Empty(bool),
}

#[derive(Debug)]
enum Literal {
    Str(String),
    Int(i64),
    Bool(bool),
}

#[derive(Debug)]
struct Match {
    path: Vec<String>,
    op: Op,
    literal: Option<Literal>,
}

#[derive(Debug)]
enum Expr {
    Or(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Match(Match),
}

/// A parsed filter, ready to evaluate rows.
#[derive(Debug)]
pub struct Filter {
    expr: Expr,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Number(String),
    Eq,
    Ne,
    Dot,
    LParen,
    RParen,
    LBracket,
    RBracket,
}

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\n' | '\r' => i += 1,
            '(' => {
                tokens.push(Token::LParen);
                i += 1
            }
            ')' => {
                tokens.push(Token::RParen);
                i += 1
            }
            '[' => {
                tokens.push(Token::LBracket);
                i += 1
            }
            ']' => {
                tokens.push(Token::RBracket);
                i += 1
            }
            '.' => {
                tokens.push(Token::Dot);
                i += 1
            }
            '=' if chars.get(i + 1) == Some(&'=') => {
                tokens.push(Token::Eq);
                i += 2
            }
            '!' if chars.get(i + 1) == Some(&'=') => {
                tokens.push(Token::Ne);
                i += 2
            }
            '"' => {
                let mut value = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err("unterminated string literal".into()),
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            let escaped = chars.get(i + 1).ok_or("unterminated string literal")?;
                            value.push(match escaped {
                                'n' => '\n',
                                't' => '\t',
                                'r' => '\r',
                                other => *other,
                            });
                            i += 2;
                        }
                        Some(other) => {
                            value.push(*other);
                            i += 1;
                        }
                    }
                }
                tokens.push(Token::Quoted(value));
            }
            '`' => {
                let start = i + 1;
                let end = chars[start..]
                    .iter()
                    .position(|c| *c == '`')
                    .ok_or("unterminated raw string literal")?;
                tokens.push(Token::Quoted(chars[start..start + end].iter().collect()));
                i = start + end + 1;
            }
            c if c.is_ascii_digit()
                || (c == '-' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                let start = i;
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                    i += 1;
                }
                tokens.push(Token::Number(chars[start..i].iter().collect()));
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '-')
                {
                    i += 1;
                }
                tokens.push(Token::Word(chars[start..i].iter().collect()));
            }
            other => return Err(format!("unexpected character {other:?}")),
        }
    }
    Ok(tokens)
}

struct Parser<'s> {
    tokens: Vec<Token>,
    at: usize,
    schema: &'s [Field],
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }
    fn peek_word(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Word(w)) if w == word)
    }
    fn peek_word_at(&self, offset: usize, word: &str) -> bool {
        matches!(self.tokens.get(self.at + offset), Some(Token::Word(w)) if w == word)
    }
    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }
    fn expect_word(&mut self, word: &str) -> Result<(), String> {
        match self.next() {
            Some(Token::Word(w)) if w == word => Ok(()),
            other => Err(format!(
                "expected {word:?}, found {}",
                describe(other.as_ref())
            )),
        }
    }

    fn expr(&mut self) -> Result<Expr, String> {
        let mut left = self.and()?;
        while self.peek_word("or") {
            self.at += 1;
            let right = self.and()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut left = self.unary()?;
        while self.peek_word("and") {
            self.at += 1;
            let right = self.unary()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, String> {
        self.depth += 1;
        if self.depth > FILTER_DEPTH_MAX {
            return Err(format!("expression nests deeper than {FILTER_DEPTH_MAX}"));
        }
        let result = if self.peek_word("not") {
            self.at += 1;
            Ok(Expr::Not(Box::new(self.unary()?)))
        } else if self.peek() == Some(&Token::LParen) {
            self.at += 1;
            let inner = self.expr()?;
            match self.next() {
                Some(Token::RParen) => Ok(inner),
                other => Err(format!(
                    "expected \")\", found {}",
                    describe(other.as_ref())
                )),
            }
        } else {
            self.matcher().map(Expr::Match)
        };
        self.depth -= 1;
        result
    }

    /// A value-first `in` expression starts with a literal; everything else with a selector.
    fn matcher(&mut self) -> Result<Match, String> {
        let value_first = match self.peek() {
            Some(Token::Quoted(_)) | Some(Token::Number(_)) => true,
            Some(Token::Word(_)) => {
                self.peek_word_at(1, "in")
                    || (self.peek_word_at(1, "not") && self.peek_word_at(2, "in"))
            }
            _ => false,
        };
        if value_first {
            let literal = self.raw_value()?;
            let negated = self.peek_word("not");
            if negated {
                self.at += 1;
            }
            self.expect_word("in")?;
            let (path, kind) = self.selector()?;
            return build(path, kind, Op::Contains(negated), Some(literal));
        }
        let (path, kind) = self.selector()?;
        match self.next() {
            Some(Token::Eq) => build(path, kind, Op::Equal(false), Some(self.raw_value()?)),
            Some(Token::Ne) => build(path, kind, Op::Equal(true), Some(self.raw_value()?)),
            Some(Token::Word(w)) if w == "is" => {
                let negated = self.peek_word("not");
                if negated {
                    self.at += 1;
                }
                self.expect_word("empty")?;
                build(path, kind, Op::Empty(negated), None)
            }
            Some(Token::Word(w)) if w == "contains" => {
                build(path, kind, Op::Contains(false), Some(self.raw_value()?))
            }
            Some(Token::Word(w)) if w == "matches" => {
                let pattern = self.raw_value()?;
                build(
                    path,
                    kind,
                    Op::Matches(false, Box::new(compile(&pattern)?)),
                    None,
                )
            }
            Some(Token::Word(w)) if w == "not" => match self.next() {
                Some(Token::Word(w)) if w == "contains" => {
                    build(path, kind, Op::Contains(true), Some(self.raw_value()?))
                }
                Some(Token::Word(w)) if w == "matches" => {
                    let pattern = self.raw_value()?;
                    build(
                        path,
                        kind,
                        Op::Matches(true, Box::new(compile(&pattern)?)),
                        None,
                    )
                }
                other => Err(format!(
                    "expected \"contains\" or \"matches\" after \"not\", found {}",
                    describe(other.as_ref())
                )),
            },
            other => Err(format!(
                "expected an operator after selector {:?}, found {}",
                path.join("."),
                describe(other.as_ref())
            )),
        }
    }

    fn raw_value(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Token::Quoted(s)) | Some(Token::Number(s)) => Ok(s),
            Some(Token::Word(w)) => {
                // A bare value may be dotted like a selector; it is taken as text.
                let mut text = w;
                while self.peek() == Some(&Token::Dot) {
                    self.at += 1;
                    match self.next() {
                        Some(Token::Word(w)) => {
                            text.push('.');
                            text.push_str(&w);
                        }
                        other => {
                            return Err(format!("unexpected {} in value", describe(other.as_ref())))
                        }
                    }
                }
                Ok(text)
            }
            other => Err(format!(
                "expected a value, found {}",
                describe(other.as_ref())
            )),
        }
    }

    /// Parses a selector and resolves its type against the schema.
    fn selector(&mut self) -> Result<(Vec<String>, Kind), String> {
        let first = match self.next() {
            Some(Token::Word(w)) => w,
            other => {
                return Err(format!(
                    "expected a selector, found {}",
                    describe(other.as_ref())
                ))
            }
        };
        let mut path = vec![first];
        loop {
            match self.peek() {
                Some(Token::Dot) => {
                    self.at += 1;
                    match self.next() {
                        Some(Token::Word(w)) => path.push(w),
                        other => {
                            return Err(format!(
                                "expected a name after \".\", found {}",
                                describe(other.as_ref())
                            ))
                        }
                    }
                }
                Some(Token::LBracket) => {
                    self.at += 1;
                    let key = match self.next() {
                        Some(Token::Quoted(s)) => s,
                        other => {
                            return Err(format!(
                                "expected a quoted map key, found {}",
                                describe(other.as_ref())
                            ))
                        }
                    };
                    match self.next() {
                        Some(Token::RBracket) => path.push(key),
                        other => {
                            return Err(format!(
                                "expected \"]\", found {}",
                                describe(other.as_ref())
                            ))
                        }
                    }
                }
                _ => break,
            }
        }
        let kind = resolve(self.schema, &path)?;
        Ok((path, kind))
    }
}

fn describe(token: Option<&Token>) -> String {
    match token {
        None => "end of expression".to_string(),
        Some(Token::Word(w)) => format!("{w:?}"),
        Some(Token::Quoted(q)) => format!("string {q:?}"),
        Some(Token::Number(n)) => format!("number {n}"),
        Some(Token::Eq) => "\"==\"".into(),
        Some(Token::Ne) => "\"!=\"".into(),
        Some(Token::Dot) => "\".\"".into(),
        Some(Token::LParen) => "\"(\"".into(),
        Some(Token::RParen) => "\")\"".into(),
        Some(Token::LBracket) => "\"[\"".into(),
        Some(Token::RBracket) => "\"]\"".into(),
    }
}

fn compile(pattern: &str) -> Result<Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_MAX)
        .build()
        .map_err(|e| format!("Failed to compile regular expression {pattern:?}: {e}"))
}

/// The type at the end of `path`, or an error naming the invalid selector.
fn resolve(schema: &[Field], path: &[String]) -> Result<Kind, String> {
    let invalid = || format!("Selector {:?} is not valid", path.join("."));
    let mut fields = schema;
    let mut i = 0;
    loop {
        let field = fields
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(&path[i]))
            .ok_or_else(invalid)?;
        i += 1;
        let mut kind = field.kind;
        // A map of structs takes a key, then a field of the struct.
        if let Kind::StructMap(inner) = kind {
            if i < path.len() {
                i += 1;
                kind = Kind::Struct(inner);
            }
        }
        if let Kind::StrMap = kind {
            return match path.len() - i {
                0 => Ok(Kind::StrMap),
                1 => Ok(Kind::Str),
                _ => Err(invalid()),
            };
        }
        if i == path.len() {
            return Ok(kind);
        }
        match kind {
            Kind::Struct(inner) | Kind::StructList(inner) => fields = inner,
            _ => return Err(invalid()),
        }
    }
}

fn build(path: Vec<String>, kind: Kind, op: Op, value: Option<String>) -> Result<Match, String> {
    let selector = path.join(".");
    let unsupported = |what: &str| {
        Err(format!(
            "Invalid match operator \"{what}\" for selector {selector:?}"
        ))
    };
    let literal = match (&op, kind) {
        (Op::Equal(_), Kind::Str) => value.map(Literal::Str),
        (Op::Equal(_), Kind::Int) => {
            let text = value.unwrap_or_default();
            Some(Literal::Int(text.parse().map_err(|_| {
                format!("Failed to coerce value {text:?} to an integer for selector {selector:?}")
            })?))
        }
        (Op::Equal(_), Kind::Bool) => {
            let text = value.unwrap_or_default();
            Some(Literal::Bool(match text.as_str() {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(format!(
                        "Failed to coerce value {text:?} to a boolean for selector {selector:?}"
                    ))
                }
            }))
        }
        (Op::Equal(_), _) => return unsupported("=="),
        (Op::Contains(_), Kind::Str | Kind::StrList | Kind::StrMap | Kind::StructMap(_)) => {
            value.map(Literal::Str)
        }
        (Op::Contains(_), _) => return unsupported("in"),
        (Op::Matches(..), Kind::Str) => None,
        (Op::Matches(..), _) => return unsupported("matches"),
        (
            Op::Empty(_),
            Kind::Str | Kind::StrList | Kind::StrMap | Kind::StructList(_) | Kind::StructMap(_),
        ) => None,
        (Op::Empty(_), _) => return unsupported("is empty"),
    };
    Ok(Match { path, op, literal })
}

impl Filter {
    /// Parses `text` against `schema`. An empty expression matches everything.
    pub fn parse(text: &str, schema: Schema) -> Result<Option<Filter>, String> {
        if text.trim().is_empty() {
            return Ok(None);
        }
        if text.len() > FILTER_BYTES_MAX {
            return Err(format!(
                "filter expression exceeds {FILTER_BYTES_MAX} bytes"
            ));
        }
        let tokens = tokenize(text)?;
        let mut parser = Parser {
            tokens,
            at: 0,
            schema,
            depth: 0,
        };
        let expr = parser.expr()?;
        if let Some(extra) = parser.peek() {
            return Err(format!(
                "unexpected {} after expression",
                describe(Some(extra))
            ));
        }
        Ok(Some(Filter { expr }))
    }

    /// Whether the row (as its endpoint's JSON) matches.
    pub fn matches(&self, row: &Value) -> bool {
        eval(&self.expr, row)
    }
}

fn eval(expr: &Expr, row: &Value) -> bool {
    match expr {
        Expr::Or(a, b) => eval(a, row) || eval(b, row),
        Expr::And(a, b) => eval(a, row) && eval(b, row),
        Expr::Not(inner) => !eval(inner, row),
        Expr::Match(m) => {
            let mut values = Vec::new();
            select(row, &m.path, &mut values);
            if values.is_empty() {
                // A missing field or map key reads as the empty value of its type.
                return apply(m, &Value::Null);
            }
            values.iter().any(|v| apply(m, v))
        }
    }
}

/// Collects the values `path` reaches; lists of objects fan out.
fn select<'v>(value: &'v Value, path: &[String], out: &mut Vec<&'v Value>) {
    let Some((head, rest)) = path.split_first() else {
        out.push(value);
        return;
    };
    match value {
        Value::Object(map) => {
            // Struct fields match case-insensitively; map keys exactly, then loosely.
            let found = map.get(head.as_str()).or_else(|| {
                map.iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(head))
                    .map(|(_, v)| v)
            });
            if let Some(next) = found {
                select(next, rest, out);
            }
        }
        Value::Array(items) => {
            for item in items {
                select(item, path, out);
            }
        }
        _ => {}
    }
}

fn apply(m: &Match, value: &Value) -> bool {
    match &m.op {
        Op::Equal(negated) => {
            let equal = match (&m.literal, value) {
                (Some(Literal::Str(s)), Value::String(v)) => s == v,
                (Some(Literal::Str(s)), Value::Null) => s.is_empty(),
                (Some(Literal::Int(i)), Value::Number(n)) => n.as_i64() == Some(*i),
                (Some(Literal::Int(i)), Value::Null) => *i == 0,
                (Some(Literal::Bool(b)), Value::Bool(v)) => b == v,
                (Some(Literal::Bool(b)), Value::Null) => !*b,
                _ => false,
            };
            equal != *negated
        }
        Op::Contains(negated) => {
            let Some(Literal::Str(needle)) = &m.literal else {
                return false;
            };
            let found = match value {
                Value::String(s) => s.contains(needle.as_str()),
                Value::Array(items) => items.iter().any(|i| i.as_str() == Some(needle.as_str())),
                Value::Object(map) => map.contains_key(needle.as_str()),
                _ => false,
            };
            found != *negated
        }
        Op::Matches(negated, regex) => {
            let text = value.as_str().unwrap_or("");
            regex.is_match(text) != *negated
        }
        Op::Empty(negated) => {
            let empty = match value {
                Value::Null => true,
                Value::String(s) => s.is_empty(),
                Value::Array(items) => items.is_empty(),
                Value::Object(map) => map.is_empty(),
                _ => false,
            };
            empty != *negated
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row() -> Value {
        json!({
            "Node": {"Node": "n1", "Address": "10.0.0.1", "Meta": {"env": "prod", "rack key": "r1"}, "TaggedAddresses": null},
            "Service": {"ID": "web-1", "Service": "web", "Tags": ["v1", "blue"], "Port": 8080, "EnableTagOverride": false,
                        "Meta": {}, "Weights": {"Passing": 1, "Warning": 1},
                        "TaggedAddresses": {"lan": {"Address": "10.0.0.1", "Port": 8080}}},
            "Checks": [{"CheckID": "serfHealth", "Status": "passing"}, {"CheckID": "c", "Status": "critical", "ServiceTags": []}]
        })
    }

    fn test(expr: &str) -> bool {
        Filter::parse(expr, CHECK_SERVICE_NODE)
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .unwrap()
            .matches(&row())
    }

    #[test]
    fn operators_over_strings_lists_maps_and_numbers() {
        assert!(test("Service.Service == web"));
        assert!(test("Service.Service == \"web\""));
        assert!(test("Service.Service != `api`"));
        assert!(test("v1 in Service.Tags"));
        assert!(test("\"green\" not in Service.Tags"));
        assert!(test("Service.Tags contains blue"));
        assert!(test("Service.Tags not contains green"));
        assert!(test("Node.Meta.env == prod"));
        assert!(test("Node.Meta[\"rack key\"] == r1"));
        assert!(test("env in Node.Meta"));
        assert!(test("Node.Meta.missing is empty"));
        assert!(test("Node.Meta.missing != prod"));
        assert!(test("Service.Meta is empty"));
        assert!(test("Node.Meta is not empty"));
        assert!(test("Service.Port == 8080"));
        assert!(test("Service.EnableTagOverride == false"));
        assert!(test("Service.Weights.Passing == 1"));
        assert!(test("Service.TaggedAddresses.lan.Port == 8080"));
        assert!(test("lan in Service.TaggedAddresses"));
        assert!(test("Node.Address matches `^10\\.0\\.`"));
        assert!(test("Node.Node not matches \"^db\""));
        assert!(test("\"10.0\" in Node.Address"));
    }

    #[test]
    fn lists_of_objects_match_any_element() {
        assert!(test("Checks.Status == critical"));
        assert!(test("Checks.Status == passing"));
        assert!(!test("Checks.Status == warning"));
        assert!(test("Checks is not empty"));
    }

    #[test]
    fn boolean_logic_and_precedence() {
        assert!(test("Service.Service == api or Service.Port == 8080"));
        assert!(!test("Service.Service == api and Service.Port == 8080"));
        assert!(test("not Service.Service == api"));
        assert!(test(
            "Service.Service == api and Service.Port == 1 or v1 in Service.Tags"
        ));
        assert!(!test(
            "Service.Service == api and (Service.Port == 1 or v1 in Service.Tags)"
        ));
        assert!(test("not (Service.Service == api or Service.Port == 1)"));
    }

    #[test]
    fn binding_rule_selectors_match_login_identities() {
        use crate::store::acl::jwt::Identity;
        let identity = Identity {
            values: [("name", "web"), ("team", "")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            lists: [(
                "groups".to_string(),
                vec!["dev".to_string(), "ops".to_string()],
            )]
            .into_iter()
            .collect(),
        }
        .selectable();
        let matches = |expr: &str| {
            Filter::parse(expr, BINDING_RULE_SELECTOR)
                .unwrap_or_else(|e| panic!("{expr}: {e}"))
                .unwrap()
                .matches(&identity)
        };
        assert!(matches("value.name == web"));
        assert!(matches("value.name != api"));
        assert!(matches("dev in list.groups"));
        assert!(!matches("admins in list.groups"));
        assert!(matches("value.team is empty"));
        assert!(matches("value.missing is empty"));
        assert!(matches("value.name == web and ops in list.groups"));
        assert!(Filter::parse("claims.name == web", BINDING_RULE_SELECTOR).is_err());
    }

    #[test]
    fn invalid_filters_are_rejected_with_reasons() {
        for (expr, needle) in [
            ("Service.Nope == x", "not valid"),
            ("Service.Port == abc", "coerce"),
            ("Service.Tags == x", "Invalid match operator"),
            ("Service.Service matches \"(\"", "regular expression"),
            ("Service.Service ==", "expected a value"),
            ("(Service.Service == x", "\")\""),
            ("Service.Service == x extra", "unexpected"),
            ("\"x\" in", "selector"),
            ("Service.Service = x", "unexpected character"),
        ] {
            let err = Filter::parse(expr, CHECK_SERVICE_NODE).unwrap_err();
            assert!(err.contains(needle), "{expr}: {err}");
        }
        let deep = "not ".repeat(100) + "Service.Service == x";
        assert!(Filter::parse(&deep, CHECK_SERVICE_NODE)
            .unwrap_err()
            .contains("deeper"));
        assert!(Filter::parse("  ", CHECK_SERVICE_NODE).unwrap().is_none());
    }
}
