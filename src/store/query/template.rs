//! Prepared query templates: Consul's `name_prefix_match` queries, whose string fields are
//! HIL interpolations rendered for the name a lookup used.
//!
//! A template matches every lookup whose name starts with its `Name` (the longest such
//! prefix wins, [`super::resolve`]). Rendering fills each string of its `Service` part —
//! the service, failover datacenters and targets, ignored check IDs, `Near`, tags, the
//! values of the metadata filters — by evaluating its `${…}` interpolations:
//!
//! - `${name.full}`: the name looked up; `${name.prefix}`: the template's name;
//!   `${name.suffix}`: the name without the prefix;
//! - `${match(N)}`: the N-th submatch of `Template.Regexp` against the full name (empty
//!   when there is no such submatch, or no regexp);
//! - `${agent.segment}`: the network segment of the agent asking (always empty: praetor has
//!   no segments);
//! - `"…"` string literals; `$${` writes a literal `${`.
//!
//! The HIL subset is parsed once per render; a template is also rendered with its own
//! name when written, so a bad one is refused at the write (Consul's `Compile`). Pure: the
//! regexp is compiled with a size bound, and nothing here reads the clock.

use super::{PreparedQuery, ServiceQuery};
use regex::Regex;

/// The one template type Consul defines.
pub const NAME_PREFIX_MATCH: &str = "name_prefix_match";
/// Largest compiled template regexp, in bytes of the regex engine's program.
pub const TEMPLATE_REGEX_BYTES_MAX: usize = 1 << 20;
/// Longest string a template field may render to.
pub const RENDERED_FIELD_BYTES_MAX: usize = 64 * 1024;

/// What a rendering knows about the lookup.
#[derive(Clone, Debug, Default)]
pub struct RenderInput<'a> {
    /// The name looked up (the DNS label or the `/v1/query/<name>/…` path part).
    pub name: &'a str,
    /// The asking agent's network segment.
    pub segment: &'a str,
}

/// A compiled template: the query it came from and its regexp.
pub struct Compiled<'q> {
    query: &'q PreparedQuery,
    regex: Option<Regex>,
}

/// Checks a template's type and regexp and renders it once with its own name, as Consul
/// compiles a template before storing it. Errors are Consul's words.
pub fn compile(query: &PreparedQuery) -> Result<Compiled<'_>, String> {
    if query.template.kind != NAME_PREFIX_MATCH {
        return Err(format!("Bad Template.Type '{}'", query.template.kind));
    }
    let regex = if query.template.regexp.is_empty() {
        None
    } else {
        Some(
            regex::RegexBuilder::new(&query.template.regexp)
                .size_limit(TEMPLATE_REGEX_BYTES_MAX)
                .build()
                .map_err(|e| format!("Bad Regexp: {e}"))?,
        )
    };
    let compiled = Compiled { query, regex };
    // Every field must parse, and render with the most minimal name it will meet.
    compiled.render(&RenderInput {
        name: &query.name,
        segment: "",
    })?;
    Ok(compiled)
}

impl Compiled<'_> {
    /// The query with every string of its `Service` part rendered for `input`.
    pub fn render(&self, input: &RenderInput) -> Result<PreparedQuery, String> {
        let matches: Vec<String> = match &self.regex {
            Some(regex) => regex
                .captures(input.name)
                .map(|c| {
                    c.iter()
                        .map(|m| m.map_or(String::new(), |m| m.as_str().to_string()))
                        .collect()
                })
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let scope = Scope {
            full: input.name,
            prefix: &self.query.name,
            suffix: input
                .name
                .strip_prefix(self.query.name.as_str())
                .unwrap_or(input.name),
            segment: input.segment,
            matches: &matches,
        };
        let mut rendered = self.query.clone();
        render_service(&mut rendered.service, &scope)?;
        if self.query.template.remove_empty_tags {
            if let Some(tags) = &mut rendered.service.tags {
                tags.retain(|t| !t.is_empty());
            }
        }
        Ok(rendered)
    }
}

/// The variables a rendering sees.
struct Scope<'a> {
    full: &'a str,
    prefix: &'a str,
    suffix: &'a str,
    segment: &'a str,
    matches: &'a [String],
}

/// Renders every string of the service part, naming each by its path for errors as
/// Consul's walker does (`Service.Tags[1]`).
fn render_service(service: &mut ServiceQuery, scope: &Scope) -> Result<(), String> {
    let field = |path: &str, value: &mut String| -> Result<(), String> {
        *value = render_field(value, scope).map_err(|e| e.in_field(value, path))?;
        Ok(())
    };
    field(".Service", &mut service.service)?;
    field(".SamenessGroup", &mut service.sameness_group)?;
    if let Some(datacenters) = &mut service.failover.datacenters {
        for (i, dc) in datacenters.iter_mut().enumerate() {
            field(&format!(".Failover.Datacenters[{i}]"), dc)?;
        }
    }
    if let Some(targets) = &mut service.failover.targets {
        for (i, target) in targets.iter_mut().enumerate() {
            field(&format!(".Failover.Targets[{i}].Peer"), &mut target.peer)?;
            field(
                &format!(".Failover.Targets[{i}].Datacenter"),
                &mut target.datacenter,
            )?;
        }
    }
    if let Some(ids) = &mut service.ignore_check_ids {
        for (i, id) in ids.iter_mut().enumerate() {
            field(&format!(".IgnoreCheckIDs[{i}]"), id)?;
        }
    }
    field(".Near", &mut service.near)?;
    if let Some(tags) = &mut service.tags {
        for (i, tag) in tags.iter_mut().enumerate() {
            field(&format!(".Tags[{i}]"), tag)?;
        }
    }
    for (name, map) in [
        ("NodeMeta", &mut service.node_meta),
        ("ServiceMeta", &mut service.service_meta),
    ] {
        if let Some(pairs) = map {
            for (key, value) in pairs.iter_mut() {
                field(&format!(".{name}[{key}]"), value)?;
            }
        }
    }
    field(".Peer", &mut service.peer)?;
    Ok(())
}

/// Why a field did not render: its text did not parse, or an interpolation failed.
enum FieldError {
    Parse(String),
    Eval(String),
}

impl FieldError {
    fn in_field(self, text: &str, path: &str) -> String {
        match self {
            FieldError::Parse(e) => format!("Bad format '{text}' in Service{path}: {e}"),
            FieldError::Eval(e) => format!("Bad evaluation for '{text}' in Service{path}: {e}"),
        }
    }
}

/// Renders one field's text: literal text, `$${` escapes and `${…}` interpolations.
fn render_field(text: &str, scope: &Scope) -> Result<String, FieldError> {
    if !text.contains("${") {
        return Ok(text.to_string());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let (expression, remainder) = split_interpolation(after)?;
            out.push_str(&evaluate(expression.trim(), scope)?);
            rest = remainder;
        } else {
            out.push('$');
            rest = &tail[1..];
        }
        if out.len() > RENDERED_FIELD_BYTES_MAX {
            return Err(FieldError::Eval(format!(
                "rendered text exceeds {RENDERED_FIELD_BYTES_MAX} bytes"
            )));
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Splits `expression}rest` at the `}` that closes the interpolation (braces inside
/// string literals do not count).
fn split_interpolation(text: &str) -> Result<(&str, &str), FieldError> {
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match (in_string, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (true, false, '"') => in_string = false,
            (false, _, '"') => in_string = true,
            (false, _, '}') => return Ok((&text[..i], &text[i + 1..])),
            _ => {}
        }
    }
    Err(FieldError::Parse(
        "expected \"}\" but found end of string".to_string(),
    ))
}

/// Evaluates one interpolation: a variable, `match(N)`, or a string literal.
fn evaluate(expression: &str, scope: &Scope) -> Result<String, FieldError> {
    if expression.is_empty() {
        return Err(FieldError::Parse("empty interpolation".to_string()));
    }
    if let Some(literal) = expression
        .strip_prefix('"')
        .and_then(|e| e.strip_suffix('"'))
    {
        return Ok(literal.replace("\\\"", "\"").replace("\\\\", "\\"));
    }
    if let Some(argument) = expression
        .strip_prefix("match(")
        .and_then(|e| e.strip_suffix(')'))
    {
        let n: i64 = argument.trim().parse().map_err(|_| {
            FieldError::Eval(format!(
                "match: argument 1 should be type int, got {:?}",
                argument.trim()
            ))
        })?;
        return Ok(usize::try_from(n)
            .ok()
            .and_then(|n| scope.matches.get(n))
            .cloned()
            .unwrap_or_default());
    }
    if !expression
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        return Err(FieldError::Parse(format!(
            "unexpected expression {expression:?}"
        )));
    }
    match expression {
        "name.full" => Ok(scope.full.to_string()),
        "name.prefix" => Ok(scope.prefix.to_string()),
        "name.suffix" => Ok(scope.suffix.to_string()),
        "agent.segment" => Ok(scope.segment.to_string()),
        other => Err(FieldError::Eval(format!(
            "unknown variable accessed: {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PreparedQuery, QueryTemplate, ServiceQuery};
    use super::*;

    fn template(name: &str, regexp: &str, service: ServiceQuery) -> PreparedQuery {
        PreparedQuery {
            id: "00000000-0000-0000-0000-000000000001".into(),
            name: name.into(),
            template: QueryTemplate {
                kind: NAME_PREFIX_MATCH.into(),
                regexp: regexp.into(),
                remove_empty_tags: false,
            },
            service,
            ..Default::default()
        }
    }

    fn render(query: &PreparedQuery, name: &str) -> Result<PreparedQuery, String> {
        compile(query)?.render(&RenderInput { name, segment: "" })
    }

    #[test]
    fn names_and_matches_fill_every_string_of_the_service_part() {
        let query = template(
            "geo-db-",
            r"^geo-db-(.*?)-([^\-]+?)$",
            ServiceQuery {
                service: "mysql-${match(1)}".into(),
                near: "${name.suffix}".into(),
                tags: Some(vec![
                    "${match(2)}".into(),
                    "$${literal}".into(),
                    "${match(9)}".into(),
                ]),
                node_meta: Some(vec![("rack".into(), "${name.prefix}".into())]),
                ..Default::default()
            },
        );
        let rendered = render(&query, "geo-db-customer-primary").unwrap();
        assert_eq!(rendered.service.service, "mysql-customer");
        assert_eq!(rendered.service.near, "customer-primary");
        assert_eq!(
            rendered.service.tags.as_deref().unwrap(),
            ["primary", "${literal}", ""]
        );
        assert_eq!(
            rendered.service.node_meta.as_deref().unwrap(),
            [("rack".to_string(), "geo-db-".to_string())]
        );
        // Without a regexp, match(N) is empty; name.full is the whole name.
        let plain = template(
            "",
            "",
            ServiceQuery {
                service: "${name.full}${match(1)}${agent.segment}".into(),
                ..Default::default()
            },
        );
        assert_eq!(render(&plain, "web").unwrap().service.service, "web");
    }

    #[test]
    fn empty_tags_go_when_asked() {
        let mut query = template(
            "t-",
            "^t-(a)?",
            ServiceQuery {
                service: "s".into(),
                tags: Some(vec!["${match(1)}".into(), "x".into()]),
                ..Default::default()
            },
        );
        query.template.remove_empty_tags = true;
        assert_eq!(
            render(&query, "t-")
                .unwrap()
                .service
                .tags
                .as_deref()
                .unwrap(),
            ["x"]
        );
    }

    #[test]
    fn bad_templates_are_refused_with_consuls_messages() {
        let mut query = template("", "", ServiceQuery::default());
        query.template.kind = "nope".into();
        assert_eq!(compile(&query).err().unwrap(), "Bad Template.Type 'nope'");
        let query = template("x", "(", ServiceQuery::default());
        assert!(compile(&query).err().unwrap().starts_with("Bad Regexp: "));
        let query = template(
            "x",
            "",
            ServiceQuery {
                service: "${nope}".into(),
                ..Default::default()
            },
        );
        assert_eq!(
            compile(&query).err().unwrap(),
            "Bad evaluation for '${nope}' in Service.Service: unknown variable accessed: nope"
        );
        let query = template(
            "x",
            "",
            ServiceQuery {
                tags: Some(vec!["ok".into(), "${name.full".into()]),
                ..Default::default()
            },
        );
        let error = compile(&query).err().unwrap();
        assert!(
            error.starts_with("Bad format '${name.full' in Service.Tags[1]:"),
            "{error}"
        );
    }
}
