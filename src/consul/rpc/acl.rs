//! ACL resolution: `ACL.TokenRead` (`ACLTokenGetRequest`) and its `ACLTokenResponse`, with
//! the token as Consul's `ACLToken` (policy and role links named, times in Go's binary
//! form).

use super::{each_field, go_time_binary, write_string_list, Fields, QueryMeta, QueryOptions};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::acl::Token;

/// `ACLTokenGetRequest`: a token by its accessor ID, or by its secret (`TokenIDType`
/// `secret`), which is how an agent resolves the token a request carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenGetRequest<'a> {
    pub datacenter: &'a str,
    pub token_id: &'a str,
    pub token_id_type: &'a str,
    pub expanded: bool,
    pub options: QueryOptions<'a>,
}

impl<'a> TokenGetRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<TokenGetRequest<'a>, WireError> {
        let mut request = TokenGetRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "TokenID" => request.token_id = r.str()?,
                "TokenIDType" => request.token_id_type = r.str()?,
                "Expanded" => request.expanded = r.bool()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// Whether the token is asked for by its secret.
    pub fn by_secret(&self) -> bool {
        self.token_id_type == "secret"
    }
}

/// A link to a policy or role: `{ID, Name}`.
fn write_links<'l>(w: &mut Writer, links: &[(&'l str, &'l str)]) {
    if links.is_empty() {
        w.nil();
        return;
    }
    w.array_len(links.len());
    for (id, name) in links {
        let mut f = Fields::new(w, 2);
        f.field("ID").str(id);
        f.field("Name").str(name);
        f.finish();
    }
}

/// A token with its policies' and roles' names (`(id, name)`, in the token's order).
pub struct TokenView<'t> {
    pub token: &'t Token,
    pub policies: Vec<(&'t str, &'t str)>,
    pub roles: Vec<(&'t str, &'t str)>,
}

/// `ACLToken`.
pub fn write_token(w: &mut Writer, view: &TokenView) {
    let token = view.token;
    let mut f = Fields::new(w, 15);
    f.field("AccessorID").str(&token.accessor_id);
    f.field("AuthMethod").str(&token.auth_method);
    f.field("CreateIndex").uint(token.create_index);
    f.field("CreateTime")
        .bytes(&go_time_binary(token.create_time_ns));
    f.field("Description").str(&token.description);
    f.field("ExpirationTTL").int(0);
    match token.expiration_time_ns {
        Some(ns) => f.field("ExpirationTime").bytes(&go_time_binary(ns)),
        None => f.field("ExpirationTime").nil(),
    }
    f.field("Hash")
        .opt_bytes((!token.hash.is_empty()).then_some(&token.hash[..]));
    f.field("Local").bool(token.local);
    f.field("ModifyIndex").uint(token.modify_index);
    {
        let w = f.field("NodeIdentities");
        if token.node_identities.is_empty() {
            w.nil();
        } else {
            w.array_len(token.node_identities.len());
            for identity in &token.node_identities {
                let mut n = Fields::new(w, 2);
                n.field("Datacenter").str(&identity.datacenter);
                n.field("NodeName").str(&identity.node_name);
                n.finish();
            }
        }
    }
    write_links(f.field("Policies"), &view.policies);
    write_links(f.field("Roles"), &view.roles);
    f.field("SecretID").str(&token.secret_id);
    {
        let w = f.field("ServiceIdentities");
        if token.service_identities.is_empty() {
            w.nil();
        } else {
            w.array_len(token.service_identities.len());
            for identity in &token.service_identities {
                let mut s = Fields::new(w, 2);
                write_string_list(
                    s.field("Datacenters"),
                    identity.datacenters.iter().map(String::as_str),
                    true,
                );
                s.field("ServiceName").str(&identity.service_name);
                s.finish();
            }
        }
    }
    f.finish();
}

/// `ACLTokenResponse`: the token (nil when none) and where it came from.
pub fn write_token_response(
    w: &mut Writer,
    meta: &QueryMeta,
    token: Option<&TokenView>,
    source_datacenter: &str,
) {
    meta.write_reply(
        w,
        &["Redacted", "SourceDatacenter", "Token"],
        |name, w| match name {
            "Redacted" => w.bool(false),
            "SourceDatacenter" => w.str(source_datacenter),
            _ => match token {
                Some(view) => write_token(w, view),
                None => w.nil(),
            },
        },
    );
}
