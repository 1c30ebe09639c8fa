//! `praetor acl …`, `praetor login` and `praetor logout`: Consul's ACL commands, their flags,
//! messages and output.
//!
//! Every command speaks to the agent's `/v1/acl/*` API through the one HTTP client
//! ([`super::client`]), so `-token`, `-token-file`, `CONSUL_HTTP_TOKEN` and
//! `CONSUL_HTTP_TOKEN_FILE` work as they do for every other command. Output is Consul's:
//! `-format=pretty` (the default) prints the formatters' text, `-format=json` the API object
//! indented by four spaces, and `-meta` adds the hash and Raft indexes.
//!
//! The commands differ in their flags and in how they build a body; reading, printing and
//! deleting an object are shared ([`Kind`]), so each kind of object is printed one way
//! whichever command shows it. IDs may be given as a unique prefix (tokens, policies and
//! roles), as Consul's CLI allows.

use super::client::{encode_path, Client};
use super::kv::read_data;
use super::HttpFlags;
use base64::Engine;
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};

/// A full UUID's length: shorter IDs are prefixes to resolve.
const UUID_TEXT_LEN: usize = 36;
/// Largest bearer token file `login` reads.
const BEARER_TOKEN_FILE_BYTES_MAX: u64 = 1 << 20;

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Creates the initial management token (once per cluster).
    Bootstrap(BootstrapArgs),
    /// Creates, lists, reads, updates, clones and deletes tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Creates, lists, reads, updates and deletes policies.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Creates, lists, reads, updates and deletes roles.
    #[command(subcommand)]
    Role(RoleCommand),
    /// Creates, lists, reads, updates and deletes auth methods.
    #[command(subcommand)]
    AuthMethod(AuthMethodCommand),
    /// Creates, lists, reads, updates and deletes binding rules.
    #[command(subcommand)]
    BindingRule(BindingRuleCommand),
    /// Lists, reads and previews Consul's builtin templated policies.
    #[command(subcommand)]
    TemplatedPolicy(TemplatedPolicyCommand),
    /// Sets one of the agent's tokens (default, agent, recovery, replication).
    SetAgentToken(SetAgentTokenArgs),
}

#[derive(Subcommand, Debug)]
pub enum TemplatedPolicyCommand {
    /// Lists the templated policies' names.
    List(ListArgs),
    /// Shows one templated policy: its variables, an example and its raw template.
    Read(ByNameArgs),
    /// Shows the policy a templated policy renders to with `-var name:VALUE`.
    Preview(TemplatedPolicyPreviewArgs),
}

#[derive(Args, Debug)]
pub struct TemplatedPolicyPreviewArgs {
    /// The templated policy (`-name builtin/service`).
    #[command(flatten)]
    pub template: ByNameArgs,
    /// A variable, `name:VALUE`.
    #[arg(long = "var")]
    pub var: Vec<String>,
}

/// `-format` and `-meta`, which every command that prints an object takes.
#[derive(Args, Debug, Clone)]
pub struct Output {
    /// Output format: pretty or json.
    #[arg(long, default_value = "pretty")]
    pub format: String,
    /// Show the content hash and Raft indexes.
    #[arg(long)]
    pub meta: bool,
}

#[derive(Args, Debug)]
pub struct BootstrapArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
}

/// What a token or role links: policies, roles and identities.
#[derive(Args, Debug, Clone, Default)]
pub struct Links {
    /// ID (or unique ID prefix) of a policy to link; repeatable.
    #[arg(long = "policy-id")]
    pub policy_id: Vec<String>,
    /// Name of a policy to link; repeatable.
    #[arg(long = "policy-name")]
    pub policy_name: Vec<String>,
    /// A service identity, `NAME` or `NAME:DC1,DC2`; repeatable.
    #[arg(long = "service-identity")]
    pub service_identity: Vec<String>,
    /// A node identity, `NAME:DATACENTER`; repeatable.
    #[arg(long = "node-identity")]
    pub node_identity: Vec<String>,
    /// Name of a templated policy to link; repeatable.
    #[arg(long = "templated-policy")]
    pub templated_policy: Vec<String>,
    /// A templated policy's variable, `name:VALUE`.
    #[arg(long = "var")]
    pub var: Vec<String>,
}

impl Links {
    fn is_empty(&self) -> bool {
        self.policy_id.is_empty()
            && self.policy_name.is_empty()
            && self.service_identity.is_empty()
            && self.node_identity.is_empty()
            && self.templated_policy.is_empty()
    }
}

#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Creates a token.
    Create(TokenCreateArgs),
    /// Lists tokens.
    List(ListArgs),
    /// Reads a token (by accessor ID, or the one the request carries with -self).
    Read(TokenReadArgs),
    /// Updates a token.
    Update(TokenUpdateArgs),
    /// Deletes a token.
    Delete(AccessorArgs),
    /// Copies a token's links into a new token.
    Clone(TokenCloneArgs),
}

#[derive(Args, Debug)]
pub struct TokenCreateArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
    #[command(flatten)]
    pub links: Links,
    /// Role ID (or unique prefix) to link; repeatable.
    #[arg(long = "role-id")]
    pub role_id: Vec<String>,
    /// Role name to link; repeatable.
    #[arg(long = "role-name")]
    pub role_name: Vec<String>,
    /// A description of the token.
    #[arg(long)]
    pub description: Option<String>,
    /// The new token's Accessor ID (a UUID; generated when absent).
    #[arg(long)]
    pub accessor: Option<String>,
    /// The new token's Secret ID (a UUID; generated when absent).
    #[arg(long)]
    pub secret: Option<String>,
    /// Keep the token in this datacenter.
    #[arg(long)]
    pub local: bool,
    /// How long the token lives (a Go duration).
    #[arg(long = "expires-ttl")]
    pub expires_ttl: Option<String>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
}

#[derive(Args, Debug)]
pub struct TokenReadArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
    /// Accessor ID (or unique prefix) of the token to read.
    #[arg(long = "accessor-id")]
    pub accessor_id: Option<String>,
    /// Deprecated spelling of -accessor-id, accepted with a warning as Consul does.
    #[arg(long = "id", hide = true)]
    pub id: Option<String>,
    /// Read the token the request carries.
    #[arg(long = "self")]
    pub own: bool,
}

#[derive(Args, Debug)]
pub struct TokenUpdateArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
    /// Accessor ID (or unique prefix) of the token to update.
    #[arg(long = "accessor-id")]
    pub accessor_id: Option<String>,
    /// Deprecated spelling of -accessor-id, accepted with a warning as Consul does.
    #[arg(long = "id", hide = true)]
    pub id: Option<String>,
    /// A new description (the token keeps its own when absent).
    #[arg(long)]
    pub description: Option<String>,
    /// Policies, roles and identities given replace the token's.
    #[command(flatten)]
    pub links: Links,
    /// ID (or unique prefix) of a role to link instead of the token's roles; repeatable.
    #[arg(long = "role-id")]
    pub role_id: Vec<String>,
    /// Name of a role to link instead of the token's roles; repeatable.
    #[arg(long = "role-name")]
    pub role_name: Vec<String>,
    /// ID (or unique prefix) of a policy to add to the token's; repeatable.
    #[arg(long = "append-policy-id")]
    pub append_policy_id: Vec<String>,
    /// Name of a policy to add to the token's; repeatable.
    #[arg(long = "append-policy-name")]
    pub append_policy_name: Vec<String>,
    /// ID (or unique prefix) of a role to add to the token's; repeatable.
    #[arg(long = "append-role-id")]
    pub append_role_id: Vec<String>,
    /// Name of a role to add to the token's; repeatable.
    #[arg(long = "append-role-name")]
    pub append_role_name: Vec<String>,
    /// A service identity to add to the token's, `NAME` or `NAME:DC1,DC2`; repeatable.
    #[arg(long = "append-service-identity")]
    pub append_service_identity: Vec<String>,
    /// A node identity to add to the token's, `NAME:DATACENTER`; repeatable.
    #[arg(long = "append-node-identity")]
    pub append_node_identity: Vec<String>,
}

#[derive(Args, Debug)]
pub struct AccessorArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// Accessor ID (or unique prefix) of the token to delete.
    #[arg(long = "accessor-id")]
    pub accessor_id: Option<String>,
    /// Deprecated spelling of -accessor-id, accepted with a warning as Consul does.
    #[arg(long = "id", hide = true)]
    pub id: Option<String>,
}

#[derive(Args, Debug)]
pub struct TokenCloneArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
    /// Accessor ID (or unique prefix) of the token to clone.
    #[arg(long = "accessor-id")]
    pub accessor_id: Option<String>,
    /// Deprecated spelling of -accessor-id, accepted with a warning as Consul does.
    #[arg(long = "id", hide = true)]
    pub id: Option<String>,
    /// A description of the new token (default: the original's).
    #[arg(long)]
    pub description: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum PolicyCommand {
    Create(PolicyWriteArgs),
    List(ListArgs),
    Read(ByIdOrNameArgs),
    Update(PolicyWriteArgs),
    Delete(ByIdOrNameArgs),
}

#[derive(Args, Debug)]
pub struct PolicyWriteArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
    /// The policy to update (ID or unique prefix).
    #[arg(long)]
    pub id: Option<String>,
    /// The policy's name (update: its new name, or the policy to update without -id).
    #[arg(long)]
    pub name: Option<String>,
    /// A description of the policy.
    #[arg(long)]
    pub description: Option<String>,
    /// The rules: text, `@file` or `-` for stdin.
    #[arg(long)]
    pub rules: Option<String>,
    /// A datacenter the policy is valid in; repeatable (default: all).
    #[arg(long = "valid-datacenter")]
    pub valid_datacenter: Vec<String>,
    /// Update: replace every field instead of keeping those not given.
    #[arg(long = "no-merge")]
    pub no_merge: bool,
}

#[derive(Args, Debug)]
pub struct ByIdOrNameArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
    /// ID (or unique prefix) of the object.
    #[arg(long)]
    pub id: Option<String>,
    /// Name of the object, instead of -id.
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum RoleCommand {
    Create(RoleWriteArgs),
    List(ListArgs),
    Read(ByIdOrNameArgs),
    Update(RoleWriteArgs),
    Delete(ByIdOrNameArgs),
}

#[derive(Args, Debug)]
pub struct RoleWriteArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
    /// The role to update (ID or unique prefix).
    #[arg(long)]
    pub id: Option<String>,
    /// The role's name (update: its new name, or the role to update without -id).
    #[arg(long)]
    pub name: Option<String>,
    /// A description of the role.
    #[arg(long)]
    pub description: Option<String>,
    #[command(flatten)]
    pub links: Links,
    /// Update: replace every field instead of keeping those not given.
    #[arg(long = "no-merge")]
    pub no_merge: bool,
}

#[derive(Subcommand, Debug)]
pub enum AuthMethodCommand {
    Create(AuthMethodWriteArgs),
    List(ListArgs),
    Read(ByNameArgs),
    Update(AuthMethodWriteArgs),
    Delete(ByNameArgs),
}

#[derive(Args, Debug)]
pub struct AuthMethodWriteArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
    /// The auth method's type (`jwt`).
    #[arg(long = "type")]
    pub method_type: Option<String>,
    /// The auth method's name.
    #[arg(long)]
    pub name: Option<String>,
    /// The name shown for the auth method in the UI.
    #[arg(long = "display-name")]
    pub display_name: Option<String>,
    /// A description of the auth method.
    #[arg(long)]
    pub description: Option<String>,
    /// Longest lifetime of a token this method issues (a Go duration).
    #[arg(long = "max-token-ttl")]
    pub max_token_ttl: Option<String>,
    /// `local` or `global`.
    #[arg(long = "token-locality")]
    pub token_locality: Option<String>,
    /// The method's configuration as JSON: text, `@file` or `-`.
    #[arg(long)]
    pub config: Option<String>,
    /// Update: replace every field instead of keeping those not given.
    #[arg(long = "no-merge")]
    pub no_merge: bool,
}

#[derive(Args, Debug)]
pub struct ByNameArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
    /// Name of the auth method.
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum BindingRuleCommand {
    Create(BindingRuleWriteArgs),
    List(BindingRuleListArgs),
    Read(ByIdArgs),
    Update(BindingRuleWriteArgs),
    Delete(ByIdArgs),
}

#[derive(Args, Debug)]
pub struct BindingRuleWriteArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
    /// The binding rule to update (ID or unique prefix).
    #[arg(long)]
    pub id: Option<String>,
    /// The auth method the rule belongs to.
    #[arg(long)]
    pub method: Option<String>,
    /// A description of the binding rule.
    #[arg(long)]
    pub description: Option<String>,
    /// Expression over the verified identity's attributes that the rule applies to.
    #[arg(long)]
    pub selector: Option<String>,
    /// `service`, `node`, `role`, `policy` or `templated-policy`.
    #[arg(long = "bind-type")]
    pub bind_type: Option<String>,
    /// Name to bind, may interpolate the identity's attributes (`svc-${value.project}`).
    #[arg(long = "bind-name")]
    pub bind_name: Option<String>,
    /// A templated policy's variable, `name=VALUE`.
    #[arg(long = "bind-vars")]
    pub bind_vars: Vec<String>,
    /// Update: replace every field instead of keeping those not given.
    #[arg(long = "no-merge")]
    pub no_merge: bool,
}

#[derive(Args, Debug)]
pub struct BindingRuleListArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
    /// Only the rules of this auth method.
    #[arg(long)]
    pub method: Option<String>,
}

#[derive(Args, Debug)]
pub struct ByIdArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    #[command(flatten)]
    pub output: Output,
    /// ID (or unique prefix) of the binding rule.
    #[arg(long)]
    pub id: Option<String>,
}

#[derive(Args, Debug)]
pub struct SetAgentTokenArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// TYPE and TOKEN (TOKEN may be `@file` or `-`).
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct LoginArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// The auth method to log in with.
    #[arg(long)]
    pub method: Option<String>,
    /// The auth method's type (optional).
    #[arg(long = "type")]
    pub method_type: Option<String>,
    /// File holding the bearer token (a JWT).
    #[arg(long = "bearer-token-file")]
    pub bearer_token_file: Option<String>,
    /// File the new token's SecretID is written to.
    #[arg(long = "token-sink-file")]
    pub token_sink_file: Option<String>,
    /// Metadata on the token, `key=value`; repeatable.
    #[arg(long)]
    pub meta: Vec<String>,
    pub rest: Vec<String>,
}

#[derive(Args, Debug)]
pub struct LogoutArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    pub rest: Vec<String>,
}

// ---- the kinds of objects ----

/// One kind of ACL object as the commands read, print and delete it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Token,
    Policy,
    Role,
    AuthMethod,
    BindingRule,
}

impl Kind {
    /// The API path of one object (`/v1/acl/policy/<id>`).
    fn path(self, id: &str) -> String {
        let segment = match self {
            Kind::Token => "token",
            Kind::Policy => "policy",
            Kind::Role => "role",
            Kind::AuthMethod => "auth-method",
            Kind::BindingRule => "binding-rule",
        };
        format!("/v1/acl/{segment}/{}", encode_path(id))
    }

    /// The API path of the list.
    fn list_path(self) -> &'static str {
        match self {
            Kind::Token => "/v1/acl/tokens",
            Kind::Policy => "/v1/acl/policies",
            Kind::Role => "/v1/acl/roles",
            Kind::AuthMethod => "/v1/acl/auth-methods",
            Kind::BindingRule => "/v1/acl/binding-rules",
        }
    }

    /// The field that identifies an object in a list.
    fn id_field(self) -> &'static str {
        match self {
            Kind::Token => "AccessorID",
            Kind::AuthMethod => "Name",
            _ => "ID",
        }
    }

    /// The word Consul's messages use.
    fn word(self) -> &'static str {
        match self {
            Kind::Token => "token",
            Kind::Policy => "policy",
            Kind::Role => "role",
            Kind::AuthMethod => "auth method",
            Kind::BindingRule => "binding rule",
        }
    }

    /// Consul's confirmation after a delete.
    fn deleted(self, id: &str) -> String {
        match self {
            Kind::Token => format!("Token {id:?} deleted successfully"),
            Kind::Policy => format!("Policy {id:?} deleted successfully"),
            Kind::Role => format!("Role {id:?} deleted successfully"),
            Kind::AuthMethod => format!("Auth-method {id:?} deleted successfully"),
            Kind::BindingRule => format!("Binding rule {id:?} deleted successfully"),
        }
    }

    fn format(self, object: &Value, meta: bool) -> String {
        match self {
            Kind::Token => format_token(object, meta, false, ""),
            Kind::Policy => format_policy(object, meta),
            Kind::Role => format_role(object, meta, ""),
            Kind::AuthMethod => format_auth_method(object, meta),
            Kind::BindingRule => format_binding_rule(object, meta, ""),
        }
    }

    fn format_list(self, list: &[Value], meta: bool) -> String {
        match self {
            // Tokens are separated by a blank line; the others follow one another.
            Kind::Token => list
                .iter()
                .map(|t| format_token(t, meta, true, ""))
                .collect::<Vec<_>>()
                .join("\n"),
            Kind::Policy => list.iter().map(|p| format_policy_entry(p, meta)).collect(),
            Kind::Role => list
                .iter()
                .map(|r| {
                    let name = text(r, "Name");
                    format!("{name}:\n{}", format_role(r, meta, "   "))
                })
                .collect(),
            Kind::AuthMethod => list
                .iter()
                .map(|m| format_auth_method_entry(m, meta))
                .collect(),
            Kind::BindingRule => list
                .iter()
                .map(|r| {
                    let id = text(r, "ID");
                    format!("{id}:\n{}", format_binding_rule(r, meta, "   "))
                })
                .collect(),
        }
    }
}

/// Prints `value` in the requested format.
fn print_value(
    output: &Output,
    value: &Value,
    pretty: impl FnOnce(&Value) -> String,
) -> Result<i32, String> {
    match output.format.as_str() {
        "pretty" => println!("{}", pretty(value)),
        "json" => println!("{}", json_indented_4(value)?),
        other => return Err(format!("Unknown format: {other}")),
    }
    Ok(0)
}

fn print_object(kind: Kind, output: &Output, object: &Value) -> Result<i32, String> {
    print_value(output, object, |o| kind.format(o, output.meta))
}

/// JSON as Go's `json.MarshalIndent(v, "", "    ")` lays it out.
fn json_indented_4(value: &Value) -> Result<String, String> {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(value, &mut serializer).map_err(|e| e.to_string())?;
    String::from_utf8(out).map_err(|e| e.to_string())
}

// ---- Consul's pretty formats ----

fn text<'v>(value: &'v Value, field: &str) -> &'v str {
    value[field].as_str().unwrap_or("")
}

fn list_of<'v>(value: &'v Value, field: &str) -> &'v [Value] {
    value[field].as_array().map_or(&[], Vec::as_slice)
}

/// Go's `%v` of a `time.Time` decoded from RFC 3339 in UTC:
/// `2020-05-22 18:52:31.5 +0000 UTC`.
pub fn go_time(rfc3339: &str) -> String {
    match rfc3339.strip_suffix('Z') {
        Some(utc) => format!("{} +0000 UTC", utc.replacen('T', " ", 1)),
        None => rfc3339.replacen('T', " ", 1),
    }
}

/// Go's `%x` of the base64 `Hash` field.
fn hash_hex(value: &Value) -> String {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text(value, "Hash"))
        .unwrap_or_default();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A `label:` line padded to `width` columns, Consul's alignment.
fn line(out: &mut String, indent: &str, label: &str, width: usize, value: &str) {
    out.push_str(&format!("{indent}{:<width$}{value}\n", format!("{label}:")));
}

fn datacenters_text(value: &Value, field: &str) -> String {
    let dcs: Vec<&str> = list_of(value, field)
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if dcs.is_empty() {
        "all".to_string()
    } else {
        dcs.join(", ")
    }
}

/// A titled list, one entry per line under it (Consul's `Policies:` … blocks); nothing when
/// the list is empty.
fn section(
    out: &mut String,
    indent: &str,
    title: &str,
    items: &[Value],
    entry: impl Fn(&Value) -> String,
) {
    if items.is_empty() {
        return;
    }
    out.push_str(&format!("{indent}{title}:\n"));
    for item in items {
        out.push_str(&format!("{indent}   {}\n", entry(item)));
    }
}

/// The links and identities of a token or role, as Consul lists them under the fields.
fn format_links(out: &mut String, object: &Value, indent: &str) {
    let link = |l: &Value| format!("{} - {}", text(l, "ID"), text(l, "Name"));
    section(out, indent, "Policies", list_of(object, "Policies"), link);
    section(out, indent, "Roles", list_of(object, "Roles"), link);
    section(
        out,
        indent,
        "Service Identities",
        list_of(object, "ServiceIdentities"),
        |s| {
            format!(
                "{} (Datacenters: {})",
                text(s, "ServiceName"),
                datacenters_text(s, "Datacenters")
            )
        },
    );
    section(
        out,
        indent,
        "Node Identities",
        list_of(object, "NodeIdentities"),
        |n| {
            format!(
                "{} (Datacenter: {})",
                text(n, "NodeName"),
                text(n, "Datacenter")
            )
        },
    );
    section(
        out,
        indent,
        "Templated Policies",
        list_of(object, "TemplatedPolicies"),
        |t| {
            let mut entry = text(t, "TemplateName").to_string();
            let name = t["TemplateVariables"]["Name"].as_str().unwrap_or("");
            if !name.is_empty() {
                entry.push_str(&format!("\n{indent}      Name: {name}"));
            }
            entry.push_str(&format!(
                "\n{indent}      Datacenters: {}",
                datacenters_text(t, "Datacenters")
            ));
            entry
        },
    );
}

fn format_meta(out: &mut String, object: &Value, indent: &str, width: usize, hash: bool) {
    if hash {
        line(out, indent, "Hash", width, &hash_hex(object));
    }
    for (label, field) in [
        ("Create Index", "CreateIndex"),
        ("Modify Index", "ModifyIndex"),
    ] {
        let index = object[field].as_u64().unwrap_or(0).to_string();
        line(out, indent, label, width, &index);
    }
}

/// Consul's token format; `entry` adds the list's `Legacy` line.
fn format_token(token: &Value, meta: bool, entry: bool, indent: &str) -> String {
    const WIDTH: usize = 18;
    let mut out = String::new();
    line(
        &mut out,
        indent,
        "AccessorID",
        WIDTH,
        text(token, "AccessorID"),
    );
    line(&mut out, indent, "SecretID", WIDTH, text(token, "SecretID"));
    line(
        &mut out,
        indent,
        "Description",
        WIDTH,
        text(token, "Description"),
    );
    let local = token["Local"].as_bool().unwrap_or(false).to_string();
    line(&mut out, indent, "Local", WIDTH, &local);
    let method = text(token, "AuthMethod");
    if !method.is_empty() {
        line(
            &mut out,
            indent,
            "Auth Method",
            WIDTH,
            &format!("{method} (Namespace: )"),
        );
    }
    let created = go_time(text(token, "CreateTime"));
    line(&mut out, indent, "Create Time", WIDTH, &created);
    let expires = text(token, "ExpirationTime");
    if !expires.is_empty() {
        line(
            &mut out,
            indent,
            "Expiration Time",
            WIDTH,
            &go_time(expires),
        );
    }
    if entry {
        let legacy = token["Legacy"].as_bool().unwrap_or(false).to_string();
        line(&mut out, indent, "Legacy", WIDTH, &legacy);
    }
    if meta {
        format_meta(&mut out, token, indent, WIDTH, true);
    }
    format_links(&mut out, token, indent);
    out
}

fn format_policy(policy: &Value, meta: bool) -> String {
    const WIDTH: usize = 14;
    let mut out = String::new();
    line(&mut out, "", "ID", WIDTH, text(policy, "ID"));
    line(&mut out, "", "Name", WIDTH, text(policy, "Name"));
    line(
        &mut out,
        "",
        "Description",
        WIDTH,
        text(policy, "Description"),
    );
    let dcs: Vec<&str> = list_of(policy, "Datacenters")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    line(&mut out, "", "Datacenters", WIDTH, &dcs.join(", "));
    if meta {
        format_meta(&mut out, policy, "", WIDTH, true);
    }
    out.push_str("Rules:\n");
    out.push_str(text(policy, "Rules"));
    out
}

fn format_policy_entry(policy: &Value, meta: bool) -> String {
    const WIDTH: usize = 14;
    let mut out = format!("{}:\n", text(policy, "Name"));
    line(&mut out, "   ", "ID", WIDTH, text(policy, "ID"));
    line(
        &mut out,
        "   ",
        "Description",
        WIDTH,
        text(policy, "Description"),
    );
    let dcs: Vec<&str> = list_of(policy, "Datacenters")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    line(&mut out, "   ", "Datacenters", WIDTH, &dcs.join(", "));
    if meta {
        format_meta(&mut out, policy, "   ", WIDTH, true);
    }
    out
}

/// A role; in a list (`indent` set) the name heads the entry instead of a `Name:` line.
fn format_role(role: &Value, meta: bool, indent: &str) -> String {
    const WIDTH: usize = 14;
    let mut out = String::new();
    line(&mut out, indent, "ID", WIDTH, text(role, "ID"));
    if indent.is_empty() {
        line(&mut out, indent, "Name", WIDTH, text(role, "Name"));
    }
    line(
        &mut out,
        indent,
        "Description",
        WIDTH,
        text(role, "Description"),
    );
    if meta {
        format_meta(&mut out, role, indent, WIDTH, true);
    }
    format_links(&mut out, role, indent);
    out
}

fn format_auth_method(method: &Value, meta: bool) -> String {
    const WIDTH: usize = 15;
    let mut out = String::new();
    line(&mut out, "", "Name", WIDTH, text(method, "Name"));
    line(&mut out, "", "Type", WIDTH, text(method, "Type"));
    for (label, field) in [("DisplayName", "DisplayName")] {
        if !text(method, field).is_empty() {
            line(&mut out, "", label, WIDTH, text(method, field));
        }
    }
    line(
        &mut out,
        "",
        "Description",
        WIDTH,
        text(method, "Description"),
    );
    for field in ["MaxTokenTTL", "TokenLocality"] {
        if !text(method, field).is_empty() {
            line(&mut out, "", field, WIDTH, text(method, field));
        }
    }
    if meta {
        format_meta(&mut out, method, "", WIDTH, false);
    }
    out.push_str("Config:\n");
    let mut config = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"  ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut config, formatter);
    let config_value = if method["Config"].is_null() {
        json!(null)
    } else {
        method["Config"].clone()
    };
    if serde::Serialize::serialize(&config_value, &mut serializer).is_ok() {
        out.push_str(&String::from_utf8_lossy(&config));
    }
    out
}

fn format_auth_method_entry(method: &Value, meta: bool) -> String {
    const WIDTH: usize = 14;
    let mut out = format!("{}:\n", text(method, "Name"));
    line(&mut out, "   ", "Type", WIDTH, text(method, "Type"));
    if !text(method, "DisplayName").is_empty() {
        line(
            &mut out,
            "   ",
            "DisplayName",
            WIDTH,
            text(method, "DisplayName"),
        );
    }
    line(
        &mut out,
        "   ",
        "Description",
        WIDTH,
        text(method, "Description"),
    );
    if meta {
        format_meta(&mut out, method, "   ", WIDTH, false);
    }
    out
}

fn format_binding_rule(rule: &Value, meta: bool, indent: &str) -> String {
    const WIDTH: usize = 14;
    let mut out = String::new();
    if indent.is_empty() {
        line(&mut out, indent, "ID", WIDTH, text(rule, "ID"));
    }
    for field in ["AuthMethod", "Description", "BindType", "BindName"] {
        line(&mut out, indent, field, WIDTH, text(rule, field));
    }
    let vars = rule["BindVars"]["Name"].as_str().unwrap_or("");
    if !vars.is_empty() {
        out.push_str(&format!(
            "{indent}BindVars:     \n{indent}     - Name: {vars}\n"
        ));
    }
    line(&mut out, indent, "Selector", WIDTH, text(rule, "Selector"));
    if meta {
        format_meta(&mut out, rule, indent, WIDTH, false);
    }
    out
}

// ---- requests ----

fn connect(http: &HttpFlags) -> Result<Client, String> {
    http.client()
        .map_err(|e| format!("Error connecting to Consul agent: {e}"))
}

fn decode(body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|e| format!("Error decoding the agent's answer: {e}"))
}

fn get(client: &Client, path: &str) -> Result<Value, String> {
    decode(&client.ok("GET", path, None)?.body)
}

fn put(client: &Client, path: &str, body: &Value) -> Result<Value, String> {
    decode(
        &client
            .ok("PUT", path, Some(body.to_string().as_bytes()))?
            .body,
    )
}

/// A full ID from a unique prefix, as Consul's CLI resolves `-id` flags: a full UUID (or
/// any ID of an auth method, named by users) is taken as it is.
fn full_id(client: &Client, kind: Kind, partial: &str) -> Result<String, String> {
    if partial.len() == UUID_TEXT_LEN || kind == Kind::AuthMethod {
        return Ok(partial.to_string());
    }
    let list = get(client, kind.list_path())?;
    let field = kind.id_field();
    let mut found: Option<String> = None;
    for object in list.as_array().into_iter().flatten() {
        let id = text(object, field);
        if id.starts_with(partial) {
            if found.is_some() {
                return Err(format!("Partial {} ID is not unique", kind.word()));
            }
            found = Some(id.to_string());
        }
    }
    found.ok_or_else(|| format!("No such {} ID with prefix: {partial}", kind.word()))
}

/// A policy's or role's ID from `-id` (a prefix) or `-name`.
fn id_or_name(
    client: &Client,
    kind: Kind,
    id: &Option<String>,
    name: &Option<String>,
) -> Result<String, String> {
    match (
        id.as_deref().filter(|i| !i.is_empty()),
        name.as_deref().filter(|n| !n.is_empty()),
    ) {
        (Some(id), _) => full_id(client, kind, id),
        (None, Some(name)) => {
            let path = format!("/v1/acl/{}/name/{}", kind.word(), encode_path(name));
            Ok(text(&get(client, &path)?, "ID").to_string())
        }
        (None, None) => Err("Must specify either the -id or -name parameters".to_string()),
    }
}

fn delete(client: &Client, kind: Kind, id: &str) -> Result<i32, String> {
    client
        .ok("DELETE", &kind.path(id), None)
        .map_err(|e| format!("Error deleting {} {id:?}: {e}", kind.word()))?;
    println!("{}", kind.deleted(id));
    Ok(0)
}

fn list(http: &HttpFlags, output: &Output, kind: Kind, query: &str) -> Result<i32, String> {
    let client = connect(http)?;
    let list = get(&client, &format!("{}{query}", kind.list_path()))
        .map_err(|e| format!("Failed to retrieve the {} list: {e}", kind.word()))?;
    let rows = list.as_array().cloned().unwrap_or_default();
    print_value(output, &list, |_| kind.format_list(&rows, output.meta))
}

fn required<'a>(value: &'a Option<String>, flag: &str) -> Result<&'a str, String> {
    value
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("Missing required '-{flag}' flag"))
}

/// Policy and role links from names and IDs (prefixes resolved).
fn link_list(
    client: &Client,
    kind: Kind,
    ids: &[String],
    names: &[String],
) -> Result<Vec<Value>, String> {
    let mut links: Vec<Value> = names.iter().map(|n| json!({ "Name": n })).collect();
    for id in ids {
        let id = full_id(client, kind, id)
            .map_err(|e| format!("Error resolving {} ID {id}: {e}", kind.word()))?;
        links.push(json!({ "ID": id }));
    }
    Ok(links)
}

/// `NAME` or `NAME:DC1,DC2`.
fn service_identities(specs: &[String]) -> Result<Vec<Value>, String> {
    specs
        .iter()
        .map(|spec| {
            let (name, dcs) = match spec.split_once(':') {
                Some((name, dcs)) => (name, dcs.split(',').filter(|d| !d.is_empty()).collect()),
                None => (spec.as_str(), Vec::new()),
            };
            if name.is_empty() {
                return Err("Service identity must not be empty".to_string());
            }
            let mut identity = json!({ "ServiceName": name });
            if !dcs.is_empty() {
                identity["Datacenters"] = json!(dcs);
            }
            Ok(identity)
        })
        .collect()
}

/// `NAME:DATACENTER`.
fn node_identities(specs: &[String]) -> Result<Vec<Value>, String> {
    specs
        .iter()
        .map(|spec| match spec.split_once(':') {
            Some((name, dc)) if !name.is_empty() && !dc.is_empty() => {
                Ok(json!({ "NodeName": name, "Datacenter": dc }))
            }
            _ => Err(format!(
                "Malformed -node-identity argument: {spec:?}: expected NODENAME:DATACENTER"
            )),
        })
        .collect()
}

/// `-templated-policy` names with the `-var name:VALUE` they share.
fn templated_policies(links: &Links) -> Result<Vec<Value>, String> {
    let mut name: Option<&str> = None;
    for var in &links.var {
        match var.split_once(':') {
            Some(("name", value)) => name = Some(value),
            _ => {
                return Err(format!(
                    "Malformed -var argument: {var:?}, expecting name:VALUE"
                ))
            }
        }
    }
    Ok(links
        .templated_policy
        .iter()
        .map(|template| match name {
            Some(name) => {
                json!({ "TemplateName": template, "TemplateVariables": { "Name": name } })
            }
            None => json!({ "TemplateName": template }),
        })
        .collect())
}

/// Sets the link fields of `object` from `links`; fields with nothing given are kept when
/// `merge`, cleared otherwise.
fn set_links(
    client: &Client,
    object: &mut Map<String, Value>,
    links: &Links,
    merge: bool,
) -> Result<(), String> {
    let policies = link_list(client, Kind::Policy, &links.policy_id, &links.policy_name)?;
    let fields = [
        ("Policies", policies),
        (
            "ServiceIdentities",
            service_identities(&links.service_identity)?,
        ),
        ("NodeIdentities", node_identities(&links.node_identity)?),
        ("TemplatedPolicies", templated_policies(links)?),
    ];
    for (field, values) in fields {
        if !values.is_empty() || !merge {
            object.insert(field.to_string(), Value::Array(values));
        }
    }
    Ok(())
}

/// Sets `field` when a flag gave it; clears it on `-no-merge` otherwise.
fn set_text(object: &mut Map<String, Value>, field: &str, value: &Option<String>, merge: bool) {
    match value {
        Some(value) => {
            object.insert(field.to_string(), json!(value));
        }
        None if !merge => {
            object.insert(field.to_string(), json!(""));
        }
        None => {}
    }
}

/// Go durations (`1h`, `30m`) as the API takes them.
fn duration_flag(value: &Option<String>, flag: &str) -> Result<Option<String>, String> {
    match value.as_deref() {
        None | Some("") => Ok(None),
        Some(text) => crate::proto::duration::parse_go_duration(text)
            .map(|_| Some(text.to_string()))
            .map_err(|e| format!("invalid value {text:?} for flag -{flag}: {e}")),
    }
}

// ---- the commands ----

pub fn run(command: AclCommand) -> Result<i32, String> {
    match command {
        AclCommand::Bootstrap(args) => {
            let client = connect(&args.http)?;
            let token = put(&client, "/v1/acl/bootstrap", &json!({}))
                .map_err(|e| format!("Failed ACL bootstrapping: {e}"))?;
            print_object(Kind::Token, &args.output, &token)
        }
        AclCommand::Token(command) => token(command),
        AclCommand::Policy(command) => policy(command),
        AclCommand::Role(command) => role(command),
        AclCommand::AuthMethod(command) => auth_method(command),
        AclCommand::BindingRule(command) => binding_rule(command),
        AclCommand::TemplatedPolicy(command) => templated_policy(command),
        AclCommand::SetAgentToken(args) => set_agent_token(args),
    }
}

/// What a token command says when it is not told which token, and when it is told with the
/// deprecated `-id`: each of Consul's commands words these its own way.
struct AccessorTexts {
    missing: &'static str,
    deprecated: &'static str,
    unresolved: &'static str,
}

const TOKEN_READ_TEXTS: AccessorTexts = AccessorTexts {
    missing: "Must specify the -accessor-id parameter",
    deprecated: "Use the -accessor-id parameter to specify token by Accessor ID",
    unresolved: "Error determining token ID",
};
const TOKEN_UPDATE_TEXTS: AccessorTexts = AccessorTexts {
    missing: "Cannot update a token without specifying the -accessor-id parameter",
    deprecated: "Use the -accessor-id parameter to specify token by Accessor ID",
    unresolved: "Error determining token ID",
};
const TOKEN_DELETE_TEXTS: AccessorTexts = AccessorTexts {
    missing: "Must specify the -accessor-id parameter",
    deprecated: "Use the -accessor-id parameter to specify token by Accessor ID.",
    unresolved: "Error determining token ID",
};
// Consul's clone says "update" here too.
const TOKEN_CLONE_TEXTS: AccessorTexts = AccessorTexts {
    missing: "Cannot update a token without specifying the -accessor-id parameter",
    deprecated: "The -id parameter is deprecated. Use the -accessor-id parameter instead.",
    unresolved: "Error determining token Accessor ID",
};

/// The full accessor ID of the token a command names with `-accessor-id`, or with the
/// deprecated `-id` (after a warning on standard error) when `-accessor-id` is absent.
fn accessor(
    client: &Client,
    accessor_id: &Option<String>,
    deprecated_id: &Option<String>,
    texts: &AccessorTexts,
) -> Result<String, String> {
    let non_empty = |v: &Option<String>| v.clone().filter(|a| !a.is_empty());
    let given = match (non_empty(accessor_id), non_empty(deprecated_id)) {
        (Some(given), _) => given,
        (None, Some(given)) => {
            eprintln!("{}", texts.deprecated);
            given
        }
        (None, None) => return Err(texts.missing.to_string()),
    };
    full_id(client, Kind::Token, &given).map_err(|e| format!("{}: {e}", texts.unresolved))
}

fn token(command: TokenCommand) -> Result<i32, String> {
    match command {
        TokenCommand::Create(args) => {
            if args.links.is_empty() && args.role_id.is_empty() && args.role_name.is_empty() {
                return Err("Cannot create a token without specifying -policy-name, -policy-id, -role-name, -role-id, -service-identity, -node-identity, or -templated-policy at least once".to_string());
            }
            let client = connect(&args.http)?;
            let mut token = Map::new();
            set_text(&mut token, "Description", &args.description, true);
            set_text(&mut token, "AccessorID", &args.accessor, true);
            set_text(&mut token, "SecretID", &args.secret, true);
            token.insert("Local".into(), json!(args.local));
            if let Some(ttl) = duration_flag(&args.expires_ttl, "expires-ttl")? {
                token.insert("ExpirationTTL".into(), json!(ttl));
            }
            set_links(&client, &mut token, &args.links, true)?;
            let roles = link_list(&client, Kind::Role, &args.role_id, &args.role_name)?;
            if !roles.is_empty() {
                token.insert("Roles".into(), Value::Array(roles));
            }
            let created = put(&client, "/v1/acl/token", &Value::Object(token))
                .map_err(|e| format!("Failed to create new token: {e}"))?;
            print_object(Kind::Token, &args.output, &created)
        }
        TokenCommand::List(args) => list(&args.http, &args.output, Kind::Token, ""),
        TokenCommand::Read(args) => {
            let client = connect(&args.http)?;
            let (path, label) = if args.own {
                ("/v1/acl/token/self".to_string(), "self".to_string())
            } else {
                let id = accessor(&client, &args.accessor_id, &args.id, &TOKEN_READ_TEXTS)?;
                (Kind::Token.path(&id), id)
            };
            let token =
                get(&client, &path).map_err(|e| format!("Error reading token {label:?}: {e}"))?;
            print_object(Kind::Token, &args.output, &token)
        }
        TokenCommand::Update(args) => token_update(args),
        TokenCommand::Delete(args) => {
            let client = connect(&args.http)?;
            let id = accessor(&client, &args.accessor_id, &args.id, &TOKEN_DELETE_TEXTS)?;
            delete(&client, Kind::Token, &id)
        }
        TokenCommand::Clone(args) => {
            let client = connect(&args.http)?;
            let id = accessor(&client, &args.accessor_id, &args.id, &TOKEN_CLONE_TEXTS)?;
            let mut body = Map::new();
            set_text(&mut body, "Description", &args.description, true);
            let cloned = put(
                &client,
                &format!("{}/clone", Kind::Token.path(&id)),
                &Value::Object(body),
            )
            .map_err(|e| format!("Failed to clone token: {e}"))?;
            print_object(Kind::Token, &args.output, &cloned)
        }
    }
}

/// Consul's refusal when replacing and appending flags of one kind meet.
fn conflicting(what: &str, flags: &str) -> String {
    format!(
        "Cannot combine the use of {flags} flags with append- variants. To set or overwrite existing {what}, use -{flags}. To append to existing {what}, use the -append- variant."
    )
}

/// Replaces `field` with `replace` when given, appends `append` otherwise.
fn replace_or_append(
    token: &mut Map<String, Value>,
    field: &str,
    replace: Vec<Value>,
    append: Vec<Value>,
) {
    if !replace.is_empty() {
        token.insert(field.to_string(), Value::Array(replace));
    } else if !append.is_empty() {
        let entry = token.entry(field.to_string()).or_insert_with(|| json!([]));
        if !entry.is_array() {
            *entry = json!([]);
        }
        if let Some(list) = entry.as_array_mut() {
            for value in append {
                if !list.contains(&value) {
                    list.push(value);
                }
            }
        }
    }
}

fn token_update(args: TokenUpdateArgs) -> Result<i32, String> {
    let client = connect(&args.http)?;
    let id = accessor(&client, &args.accessor_id, &args.id, &TOKEN_UPDATE_TEXTS)?;
    let current = get(&client, &Kind::Token.path(&id))
        .map_err(|e| format!("Error when retrieving current token: {e}"))?;
    let mut token = current.as_object().cloned().unwrap_or_default();
    if let Some(description) = args.description.as_deref().filter(|d| !d.is_empty()) {
        token.insert("Description".into(), json!(description));
    }
    let links = &args.links;
    let pairs = [
        (
            "policy-id/policy-name",
            "policies",
            !links.policy_id.is_empty() || !links.policy_name.is_empty(),
            !args.append_policy_id.is_empty() || !args.append_policy_name.is_empty(),
        ),
        (
            "role-id/role-name",
            "roles",
            !args.role_id.is_empty() || !args.role_name.is_empty(),
            !args.append_role_id.is_empty() || !args.append_role_name.is_empty(),
        ),
        (
            "service-identity",
            "service identities",
            !links.service_identity.is_empty(),
            !args.append_service_identity.is_empty(),
        ),
        (
            "node-identity",
            "node identities",
            !links.node_identity.is_empty(),
            !args.append_node_identity.is_empty(),
        ),
    ];
    for (flags, what, replaces, appends) in pairs {
        if replaces && appends {
            return Err(conflicting(what, flags));
        }
    }
    replace_or_append(
        &mut token,
        "Policies",
        link_list(&client, Kind::Policy, &links.policy_id, &links.policy_name)?,
        link_list(
            &client,
            Kind::Policy,
            &args.append_policy_id,
            &args.append_policy_name,
        )?,
    );
    replace_or_append(
        &mut token,
        "Roles",
        link_list(&client, Kind::Role, &args.role_id, &args.role_name)?,
        link_list(
            &client,
            Kind::Role,
            &args.append_role_id,
            &args.append_role_name,
        )?,
    );
    // As in Consul, identities given replace the token's, and none given clears them
    // unless appended to.
    let services = service_identities(&links.service_identity)?;
    if args.append_service_identity.is_empty() {
        token.insert("ServiceIdentities".into(), Value::Array(services));
    } else {
        replace_or_append(
            &mut token,
            "ServiceIdentities",
            Vec::new(),
            service_identities(&args.append_service_identity)?,
        );
    }
    let nodes = node_identities(&links.node_identity)?;
    if args.append_node_identity.is_empty() {
        token.insert("NodeIdentities".into(), Value::Array(nodes));
    } else {
        replace_or_append(
            &mut token,
            "NodeIdentities",
            Vec::new(),
            node_identities(&args.append_node_identity)?,
        );
    }
    let templated = templated_policies(links)?;
    if !templated.is_empty() {
        token.insert("TemplatedPolicies".into(), Value::Array(templated));
    }
    let updated = put(&client, &Kind::Token.path(&id), &Value::Object(token))
        .map_err(|e| format!("Failed to update token {id}: {e}"))?;
    print_object(Kind::Token, &args.output, &updated)
}

fn policy(command: PolicyCommand) -> Result<i32, String> {
    match command {
        PolicyCommand::Create(args) => {
            let name = required(&args.name, "name")?;
            let client = connect(&args.http)?;
            let rules = match &args.rules {
                Some(rules) => String::from_utf8_lossy(&read_data(Some(rules))?).into_owned(),
                None => String::new(),
            };
            let mut body = json!({
                "Name": name,
                "Description": args.description.clone().unwrap_or_default(),
                "Rules": rules,
            });
            if !args.valid_datacenter.is_empty() {
                body["Datacenters"] = json!(args.valid_datacenter);
            }
            let created = put(&client, "/v1/acl/policy", &body)
                .map_err(|e| format!("Failed to create new policy: {e}"))?;
            print_object(Kind::Policy, &args.output, &created)
        }
        PolicyCommand::List(args) => list(&args.http, &args.output, Kind::Policy, ""),
        PolicyCommand::Read(args) => read_by_id_or_name(Kind::Policy, args),
        PolicyCommand::Update(args) => {
            let client = connect(&args.http)?;
            let id = match args.id.as_deref().filter(|i| !i.is_empty()) {
                Some(id) => full_id(&client, Kind::Policy, id)
                    .map_err(|e| format!("Error determining policy ID: {e}"))?,
                None => {
                    return Err(
                        "Cannot update a policy without specifying the -id parameter".to_string(),
                    )
                }
            };
            let mut policy = if args.no_merge {
                Map::new()
            } else {
                get(&client, &Kind::Policy.path(&id))
                    .map_err(|e| format!("Error retrieving current policy: {e}"))?
                    .as_object()
                    .cloned()
                    .unwrap_or_default()
            };
            let merge = !args.no_merge;
            set_text(&mut policy, "Name", &args.name, merge);
            set_text(&mut policy, "Description", &args.description, merge);
            let rules = match &args.rules {
                Some(rules) => Some(String::from_utf8_lossy(&read_data(Some(rules))?).into_owned()),
                None => None,
            };
            set_text(&mut policy, "Rules", &rules, merge);
            if !args.valid_datacenter.is_empty() || !merge {
                policy.insert("Datacenters".into(), json!(args.valid_datacenter));
            }
            policy.insert("ID".into(), json!(id));
            let updated = put(&client, &Kind::Policy.path(&id), &Value::Object(policy))
                .map_err(|e| format!("Error updating policy {id:?}: {e}"))?;
            print_object(Kind::Policy, &args.output, &updated)
        }
        PolicyCommand::Delete(args) => delete_by_id_or_name(Kind::Policy, args),
    }
}

fn read_by_id_or_name(kind: Kind, args: ByIdOrNameArgs) -> Result<i32, String> {
    let client = connect(&args.http)?;
    let id = id_or_name(&client, kind, &args.id, &args.name)
        .map_err(|e| format!("Error determining {} ID: {e}", kind.word()))?;
    let object = get(&client, &kind.path(&id))
        .map_err(|e| format!("Error reading {} {id:?}: {e}", kind.word()))?;
    print_object(kind, &args.output, &object)
}

fn delete_by_id_or_name(kind: Kind, args: ByIdOrNameArgs) -> Result<i32, String> {
    let client = connect(&args.http)?;
    let id = id_or_name(&client, kind, &args.id, &args.name)
        .map_err(|e| format!("Error determining {} ID: {e}", kind.word()))?;
    delete(&client, kind, &id)
}

fn role(command: RoleCommand) -> Result<i32, String> {
    match command {
        RoleCommand::Create(args) => {
            let name = required(&args.name, "name")?;
            if args.links.is_empty() {
                return Err("Cannot create a role without specifying -policy-name, -policy-id, -service-identity, -node-identity, or -templated-policy at least once".to_string());
            }
            let client = connect(&args.http)?;
            let mut role = Map::new();
            role.insert("Name".into(), json!(name));
            set_text(&mut role, "Description", &args.description, true);
            set_links(&client, &mut role, &args.links, true)?;
            let created = put(&client, "/v1/acl/role", &Value::Object(role))
                .map_err(|e| format!("Failed to create new role: {e}"))?;
            print_object(Kind::Role, &args.output, &created)
        }
        RoleCommand::List(args) => list(&args.http, &args.output, Kind::Role, ""),
        RoleCommand::Read(args) => read_by_id_or_name(Kind::Role, args),
        RoleCommand::Update(args) => {
            let client = connect(&args.http)?;
            let id = match args.id.as_deref().filter(|i| !i.is_empty()) {
                Some(id) => full_id(&client, Kind::Role, id)
                    .map_err(|e| format!("Error determining role ID: {e}"))?,
                None => {
                    return Err(
                        "Cannot update a role without specifying the -id parameter".to_string()
                    )
                }
            };
            let merge = !args.no_merge;
            let mut role = if merge {
                get(&client, &Kind::Role.path(&id))
                    .map_err(|e| format!("Error retrieving current role: {e}"))?
                    .as_object()
                    .cloned()
                    .unwrap_or_default()
            } else {
                Map::new()
            };
            set_text(&mut role, "Name", &args.name, merge);
            set_text(&mut role, "Description", &args.description, merge);
            set_links(&client, &mut role, &args.links, merge)?;
            role.insert("ID".into(), json!(id));
            let updated = put(&client, &Kind::Role.path(&id), &Value::Object(role))
                .map_err(|e| format!("Error updating role {id:?}: {e}"))?;
            print_object(Kind::Role, &args.output, &updated)
        }
        RoleCommand::Delete(args) => delete_by_id_or_name(Kind::Role, args),
    }
}

/// The fields of an auth method the flags set.
fn auth_method_fields(
    args: &AuthMethodWriteArgs,
    method: &mut Map<String, Value>,
    merge: bool,
) -> Result<(), String> {
    set_text(method, "DisplayName", &args.display_name, merge);
    set_text(method, "Description", &args.description, merge);
    set_text(method, "TokenLocality", &args.token_locality, merge);
    if let Some(ttl) = duration_flag(&args.max_token_ttl, "max-token-ttl")? {
        method.insert("MaxTokenTTL".into(), json!(ttl));
    } else if !merge {
        method.insert("MaxTokenTTL".into(), json!(""));
    }
    if let Some(config) = &args.config {
        let data = read_data(Some(config))?;
        let value: Value = serde_json::from_slice(&data)
            .map_err(|e| format!("Error parsing JSON for auth method config: {e}"))?;
        method.insert("Config".into(), value);
    }
    Ok(())
}

fn auth_method(command: AuthMethodCommand) -> Result<i32, String> {
    match command {
        AuthMethodCommand::Create(args) => {
            let method_type = required(&args.method_type, "type")?;
            let name = required(&args.name, "name")?;
            let client = connect(&args.http)?;
            let mut method = Map::new();
            method.insert("Name".into(), json!(name));
            method.insert("Type".into(), json!(method_type));
            auth_method_fields(&args, &mut method, true)?;
            let created = put(&client, "/v1/acl/auth-method", &Value::Object(method))
                .map_err(|e| format!("Failed to create new auth method: {e}"))?;
            print_object(Kind::AuthMethod, &args.output, &created)
        }
        AuthMethodCommand::List(args) => list(&args.http, &args.output, Kind::AuthMethod, ""),
        AuthMethodCommand::Read(args) => {
            let name = required(&args.name, "name")?;
            let client = connect(&args.http)?;
            let method = get(&client, &Kind::AuthMethod.path(name))
                .map_err(|e| format!("Error reading auth method {name:?}: {e}"))?;
            print_object(Kind::AuthMethod, &args.output, &method)
        }
        AuthMethodCommand::Update(args) => {
            let name = required(&args.name, "name")?.to_string();
            let client = connect(&args.http)?;
            let current = get(&client, &Kind::AuthMethod.path(&name))
                .map_err(|e| format!("Error when retrieving current auth method: {e}"))?;
            let mut method = if args.no_merge {
                let mut fresh = Map::new();
                fresh.insert("Type".into(), current["Type"].clone());
                fresh
            } else {
                current.as_object().cloned().unwrap_or_default()
            };
            method.insert("Name".into(), json!(name));
            auth_method_fields(&args, &mut method, !args.no_merge)?;
            let updated = put(
                &client,
                &Kind::AuthMethod.path(&name),
                &Value::Object(method),
            )
            .map_err(|e| format!("Error updating auth method {name:?}: {e}"))?;
            print_object(Kind::AuthMethod, &args.output, &updated)
        }
        AuthMethodCommand::Delete(args) => {
            let name = required(&args.name, "name")?.to_string();
            let client = connect(&args.http)?;
            delete(&client, Kind::AuthMethod, &name)
        }
    }
}

/// The fields of a binding rule the flags set.
fn binding_rule_fields(
    args: &BindingRuleWriteArgs,
    rule: &mut Map<String, Value>,
    merge: bool,
) -> Result<(), String> {
    set_text(rule, "Description", &args.description, merge);
    set_text(rule, "Selector", &args.selector, merge);
    set_text(rule, "BindType", &args.bind_type, merge);
    set_text(rule, "BindName", &args.bind_name, merge);
    for var in &args.bind_vars {
        match var.split_once('=') {
            Some(("name", value)) => {
                rule.insert("BindVars".into(), json!({ "Name": value }));
            }
            _ => {
                return Err(format!(
                    "Malformed -bind-vars argument: {var:?}, expecting name=VALUE"
                ))
            }
        }
    }
    Ok(())
}

fn binding_rule(command: BindingRuleCommand) -> Result<i32, String> {
    match command {
        BindingRuleCommand::Create(args) => {
            let method = required(&args.method, "method")?;
            required(&args.bind_name, "bind-name")?;
            let client = connect(&args.http)?;
            let mut rule = Map::new();
            rule.insert("AuthMethod".into(), json!(method));
            rule.insert("BindType".into(), json!("service"));
            binding_rule_fields(&args, &mut rule, true)?;
            let created = put(&client, "/v1/acl/binding-rule", &Value::Object(rule))
                .map_err(|e| format!("Failed to create new binding rule: {e}"))?;
            print_object(Kind::BindingRule, &args.output, &created)
        }
        BindingRuleCommand::List(args) => {
            let query = match args.method.as_deref().filter(|m| !m.is_empty()) {
                Some(method) => {
                    format!("?authmethod={}", super::client::encode_query_value(method))
                }
                None => String::new(),
            };
            list(&args.http, &args.output, Kind::BindingRule, &query)
        }
        BindingRuleCommand::Read(args) => {
            let client = connect(&args.http)?;
            let id = full_id(&client, Kind::BindingRule, required(&args.id, "id")?)
                .map_err(|e| format!("Error determining binding rule ID: {e}"))?;
            let rule = get(&client, &Kind::BindingRule.path(&id))
                .map_err(|e| format!("Error reading binding rule {id:?}: {e}"))?;
            print_object(Kind::BindingRule, &args.output, &rule)
        }
        BindingRuleCommand::Update(args) => {
            let client = connect(&args.http)?;
            let id = full_id(&client, Kind::BindingRule, required(&args.id, "id")?)
                .map_err(|e| format!("Error determining binding rule ID: {e}"))?;
            let current = get(&client, &Kind::BindingRule.path(&id))
                .map_err(|e| format!("Error when retrieving current binding rule: {e}"))?;
            let mut rule = if args.no_merge {
                let mut fresh = Map::new();
                fresh.insert("AuthMethod".into(), current["AuthMethod"].clone());
                fresh
            } else {
                current.as_object().cloned().unwrap_or_default()
            };
            rule.insert("ID".into(), json!(id));
            binding_rule_fields(&args, &mut rule, !args.no_merge)?;
            let updated = put(&client, &Kind::BindingRule.path(&id), &Value::Object(rule))
                .map_err(|e| format!("Error updating binding rule {id:?}: {e}"))?;
            print_object(Kind::BindingRule, &args.output, &updated)
        }
        BindingRuleCommand::Delete(args) => {
            let client = connect(&args.http)?;
            let id = full_id(&client, Kind::BindingRule, required(&args.id, "id")?)
                .map_err(|e| format!("Error determining binding rule ID: {e}"))?;
            delete(&client, Kind::BindingRule, &id)
        }
    }
}

/// Consul's pretty form of one templated policy: its variables, how to use it, its template.
fn format_templated_policy(template: &Value, meta: bool) -> String {
    let name = text(template, "TemplateName");
    let mut out = format!(
        "Name:            {name}\nDescription:     {}\nInput variables:",
        text(template, "Description")
    );
    let example = match name {
        "builtin/service" => Some(("The name of the service", "api")),
        "builtin/node" => Some(("The node name", "node-1")),
        "builtin/api-gateway" => Some(("The api gateway service name", "api-gateway")),
        _ => None,
    };
    match example {
        Some((what, value)) => out.push_str(&format!(
            "\n\tName: String - Required - {what}.\nExample usage:\n\tpraetor acl token create -templated-policy {name} -var name:{value}\n"
        )),
        None => out.push_str(&format!(
            " None\nExample usage:\n\tpraetor acl token create -templated-policy {name}\n"
        )),
    }
    if meta {
        out.push_str(&format!("Schema:\n{}\n\n", text(template, "Schema")));
    }
    out.push_str(&format!("Raw Template:\n{}", text(template, "Template")));
    out
}

fn templated_policy(command: TemplatedPolicyCommand) -> Result<i32, String> {
    match command {
        TemplatedPolicyCommand::List(args) => {
            let client = connect(&args.http)?;
            let all = get(&client, "/v1/acl/templated-policies")
                .map_err(|e| format!("Failed to retrieve the templated policies list: {e}"))?;
            print_value(&args.output, &all, |all| {
                let mut names: Vec<&String> = all
                    .as_object()
                    .map(|m| m.keys().collect())
                    .unwrap_or_default();
                names.sort();
                names
                    .iter()
                    .map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        }
        TemplatedPolicyCommand::Read(args) => {
            let Some(name) = args.name.as_deref().filter(|n| !n.is_empty()) else {
                return Err("Must specify the -name parameter".to_string());
            };
            let client = connect(&args.http)?;
            let template = get(&client, &format!("/v1/acl/templated-policy/name/{name}"))
                .map_err(|e| format!("Error reading templated policy {name:?}: {e}"))?;
            print_value(&args.output, &template, |t| {
                format_templated_policy(t, args.output.meta)
            })
        }
        TemplatedPolicyCommand::Preview(args) => {
            let Some(name) = args.template.name.as_deref().filter(|n| !n.is_empty()) else {
                return Err("Must specify the -name parameter".to_string());
            };
            let mut variables = Map::new();
            for var in &args.var {
                match var.split_once(':') {
                    Some(("name", value)) => {
                        variables.insert("Name".into(), json!(value));
                    }
                    _ => return Err(format!("Invalid -var {var:?}: expected name:VALUE")),
                }
            }
            let client = connect(&args.template.http)?;
            let body = Value::Object(variables).to_string();
            let response = client
                .ok(
                    "POST",
                    &format!("/v1/acl/templated-policy/preview/{name}"),
                    Some(body.as_bytes()),
                )
                .map_err(|e| format!("Failed to generate the templated policy preview: {e}"))?;
            let policy = decode(&response.body)?;
            print_object(Kind::Policy, &args.template.output, &policy)
        }
    }
}

fn set_agent_token(args: SetAgentTokenArgs) -> Result<i32, String> {
    let (kind, token) = match args.args.as_slice() {
        [] => return Err("Error! Missing TYPE and TOKEN arguments".to_string()),
        [kind]
            if matches!(
                kind.as_str(),
                "default" | "agent" | "recovery" | "replication"
            ) =>
        {
            return Err("Error! Missing TOKEN argument".to_string())
        }
        [_] => return Err("Error! MISSING TYPE argument".to_string()),
        [kind, token] => (kind.clone(), read_data(Some(token))?),
        more => {
            return Err(format!(
                "Error! Too many arguments: expected 2 got {}",
                more.len()
            ))
        }
    };
    // `recovery` is the API's `agent_recovery`.
    let path = match kind.as_str() {
        "default" | "agent" | "replication" => format!("/v1/agent/token/{kind}"),
        "recovery" => "/v1/agent/token/agent_recovery".to_string(),
        _ => return Err("Unknown token type".to_string()),
    };
    let client = connect(&args.http)?;
    let token = String::from_utf8_lossy(&token).trim().to_string();
    client
        .ok(
            "PUT",
            &path,
            Some(json!({ "Token": token }).to_string().as_bytes()),
        )
        .map_err(|e| format!("Failed to set ACL token {kind:?}: {e}"))?;
    println!("ACL token {kind:?} set successfully");
    Ok(0)
}

/// `praetor login`: trades a bearer token for an ACL token and writes its SecretID.
pub fn login(args: LoginArgs) -> Result<i32, String> {
    if !args.rest.is_empty() {
        return Err("Should have no non-flag arguments.".to_string());
    }
    let method = required(&args.method, "method")?;
    let sink = required(&args.token_sink_file, "token-sink-file")?;
    let bearer_file = required(&args.bearer_token_file, "bearer-token-file")?;
    let bearer = crate::tls::files::read_bounded(
        std::path::Path::new(bearer_file),
        BEARER_TOKEN_FILE_BYTES_MAX,
        "bearer token file",
    )?;
    let bearer = String::from_utf8_lossy(&bearer).trim().to_string();
    if bearer.is_empty() {
        return Err(format!("No bearer token found in {bearer_file}"));
    }
    let mut meta = Map::new();
    for pair in &args.meta {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("invalid value {pair:?} for flag -meta: expected key=value"))?;
        meta.insert(k.to_string(), json!(v));
    }
    // A login carries no token of its own, as in Consul.
    let mut http = args.http.clone();
    http.token = None;
    http.token_file = None;
    let mut client = connect(&http)?;
    client.options.token = None;
    let body = json!({ "AuthMethod": method, "BearerToken": bearer, "Meta": meta });
    let token = decode(
        &client
            .ok("POST", "/v1/acl/login", Some(body.to_string().as_bytes()))
            .map_err(|e| format!("Error logging in: {e}"))?
            .body,
    )?;
    write_sink(sink, text(&token, "SecretID"))
        .map_err(|e| format!("Error writing token to file sink: {e}"))?;
    Ok(0)
}

/// Writes the secret to `path` atomically, readable by its owner only.
fn write_sink(path: &str, secret: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let target = std::path::Path::new(path);
    let temporary = target.with_extension(format!("tmp{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(|e| e.to_string())?;
    file.write_all(secret.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| e.to_string())?;
    std::fs::rename(&temporary, target).map_err(|e| e.to_string())
}

/// `praetor logout`: deletes the login token the command carries.
pub fn logout(args: LogoutArgs) -> Result<i32, String> {
    if !args.rest.is_empty() {
        return Err("Should have no non-flag arguments.".to_string());
    }
    let client = connect(&args.http)?;
    client
        .ok("POST", "/v1/acl/logout", Some(b""))
        .map_err(|e| format!("Error destroying token: {e}"))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_print_as_consuls_formatter_does() {
        let token = json!({
            "AccessorID": "fbd2447f-7479-4329-ad13-b021d74f86ba",
            "SecretID": "869c6e91-4de9-4dab-b56e-87548435f9c6",
            "Description": "test token",
            "Local": false,
            "AuthMethod": "bar",
            "CreateTime": "2020-05-22T18:52:31Z",
            "ExpirationTime": "2020-05-22T19:52:31Z",
            "Hash": "YWJjZGVmZ2g=",
            "CreateIndex": 5,
            "ModifyIndex": 10,
            "Policies": [{"ID": "beb04680-815b-4d7c-9e33-3d707c24672c", "Name": "hobbiton"}],
            "ServiceIdentities": [{"ServiceName": "gardener", "Datacenters": ["middleearth-northwest"]}],
            "NodeIdentities": [{"NodeName": "bagend", "Datacenter": "middleearth-northwest"}],
            "TemplatedPolicies": [{"TemplateName": "builtin/node", "TemplateVariables": {"Name": "api"}}],
        });
        assert_eq!(
            format_token(&token, true, false, ""),
            "AccessorID:       fbd2447f-7479-4329-ad13-b021d74f86ba\n\
             SecretID:         869c6e91-4de9-4dab-b56e-87548435f9c6\n\
             Description:      test token\n\
             Local:            false\n\
             Auth Method:      bar (Namespace: )\n\
             Create Time:      2020-05-22 18:52:31 +0000 UTC\n\
             Expiration Time:  2020-05-22 19:52:31 +0000 UTC\n\
             Hash:             6162636465666768\n\
             Create Index:     5\n\
             Modify Index:     10\n\
             Policies:\n   beb04680-815b-4d7c-9e33-3d707c24672c - hobbiton\n\
             Service Identities:\n   gardener (Datacenters: middleearth-northwest)\n\
             Node Identities:\n   bagend (Datacenter: middleearth-northwest)\n\
             Templated Policies:\n   builtin/node\n      Name: api\n      Datacenters: all\n"
        );
    }

    #[test]
    fn roles_and_policies_list_under_their_names() {
        let role = json!({
            "ID": "c29c4ee4-bca6-474e-be37-7d9606f9582a", "Name": "complex",
            "Description": "test role complex",
            "Policies": [{"ID": "beb04680-815b-4d7c-9e33-3d707c24672c", "Name": "hobbiton"}],
        });
        assert_eq!(
            Kind::Role.format_list(&[role], false),
            "complex:\n   ID:           c29c4ee4-bca6-474e-be37-7d9606f9582a\n   Description:  test role complex\n   Policies:\n      beb04680-815b-4d7c-9e33-3d707c24672c - hobbiton\n"
        );
        let policy = json!({"ID": "p1", "Name": "web", "Description": "d", "Datacenters": ["a", "b"], "Rules": "key \"x\" {}"});
        assert_eq!(
            format_policy(&policy, false),
            "ID:           p1\nName:         web\nDescription:  d\nDatacenters:  a, b\nRules:\nkey \"x\" {}"
        );
    }

    #[test]
    fn identities_parse_as_consuls_flags() {
        assert_eq!(
            service_identities(&["web".into(), "db:east,west".into()]).unwrap(),
            vec![
                json!({"ServiceName": "web"}),
                json!({"ServiceName": "db", "Datacenters": ["east", "west"]})
            ]
        );
        assert!(node_identities(&["n1".into()]).is_err());
        assert_eq!(
            node_identities(&["n1:dc1".into()]).unwrap(),
            vec![json!({"NodeName": "n1", "Datacenter": "dc1"})]
        );
        assert_eq!(
            go_time("2020-05-22T18:52:31.5Z"),
            "2020-05-22 18:52:31.5 +0000 UTC"
        );
    }
}
