use super::*;

fn decoded(text: &str) -> Result<ConfigEntry, EntryError> {
    decode_body(text.as_bytes())
}

fn rendered(text: &str) -> String {
    let mut entry = decoded(text).unwrap();
    entry.create_index = 7;
    entry.modify_index = 9;
    let mut out = Vec::new();
    render(&entry, false, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn service_defaults_render_as_consul_does() {
    assert_eq!(
        rendered(r#"{"Kind":"service-defaults","Name":"web","protocol":"HTTP"}"#),
        r#"{"Kind":"service-defaults","Name":"web","Protocol":"http","TransparentProxy":{},"MeshGateway":{},"Expose":{},"CreateIndex":7,"ModifyIndex":9}"#
    );
    let entry = decoded(r#"{"kind":"service-defaults","name":"web","Protocol":"grpc"}"#).unwrap();
    assert_eq!(entry.protocol, "grpc");
    assert_eq!(
        decoded(r#"{"Kind":"service-defaults","Name":"*"}"#).unwrap_err(),
        EntryError::Invalid(
            "service-defaults name must be the name of a service, and not a wildcard".into()
        )
    );
    assert_eq!(
        decoded(r#"{"Kind":"service-defaults","Name":"web","BalanceInboundConnections":"x"}"#)
            .unwrap_err(),
        EntryError::Invalid(
            "1 error occurred:\n\t* invalid value for balance_inbound_connections: x\n\n".into()
        )
    );
}

#[test]
fn kinds_and_unknown_keys_fail_to_decode_with_consuls_words() {
    let decode_error = |text: &str| match decoded(text) {
        Err(EntryError::Decode(m)) => m,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        decode_error(r#"{"Name":"x"}"#),
        "Payload does not contain a kind/Kind key at the top level"
    );
    assert_eq!(
        decode_error(r#"{"Kind":5}"#),
        "Kind value in payload is not a string"
    );
    assert_eq!(
        decode_error(r#"{"Kind":"nope"}"#),
        "invalid config entry kind: nope"
    );
    assert_eq!(
        decode_error(r#"{"Kind":"service-defaults","Name":"web","Bogus":1}"#),
        "1 error occurred:\n\t* invalid config key \"Bogus\"\n\n"
    );
    assert_eq!(
        decode_error(r#"{"Kind":"mesh","Name":"mesh"}"#),
        "1 error occurred:\n\t* invalid config key \"Name\"\n\n"
    );
    // The indexes a client read back are ignored, as Consul ignores them.
    assert!(decoded(
        r#"{"Kind":"proxy-defaults","Name":"global","CreateIndex":3,"ModifyIndex":4}"#
    )
    .is_ok());
}

#[test]
fn proxy_defaults_and_mesh_have_fixed_names() {
    let entry =
        decoded(r#"{"Kind":"proxy-defaults","Config":{"protocol":"HTTP","x":[1]}}"#).unwrap();
    assert_eq!(
        (entry.name.as_str(), entry.protocol.as_str()),
        ("global", "http")
    );
    assert_eq!(
        decoded(r#"{"Kind":"proxy-defaults","Name":"other"}"#).unwrap_err(),
        EntryError::Invalid("invalid name (\"other\"), only \"global\" is supported".into())
    );
    assert_eq!(
        rendered(r#"{"Kind":"mesh","TransparentProxy":{"MeshDestinationsOnly":true}}"#),
        r#"{"Kind":"mesh","TransparentProxy":{"MeshDestinationsOnly":true},"CreateIndex":7,"ModifyIndex":9}"#
    );
}

#[test]
fn discovery_chain_entries_validate_as_consul() {
    let invalid = |text: &str| match decoded(text) {
        Err(EntryError::Invalid(m)) => m,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        invalid(r#"{"Kind":"service-splitter","Name":"web","Splits":[{"Weight":50}]}"#),
        "the sum of all split weights must be 100, not 50.000000"
    );
    assert_eq!(
        invalid(r#"{"Kind":"service-splitter","Name":"web"}"#),
        "no splits configured"
    );
    assert!(decoded(
        r#"{"Kind":"service-splitter","Name":"web","Splits":[{"Weight":33.33},{"Weight":66.67,"ServiceSubset":"v2"}]}"#
    )
    .is_ok());
    assert_eq!(
        invalid(r#"{"Kind":"service-resolver","Name":"web","DefaultSubset":"v9"}"#),
        "DefaultSubset \"v9\" is not a valid subset"
    );
    assert_eq!(
        invalid(r#"{"Kind":"service-resolver","Name":"web","Failover":{"*":{}}}"#),
        "Bad Failover[\"*\"]: one of Service, ServiceSubset, Namespace, Targets, SamenessGroup, or Datacenters is required"
    );
    assert_eq!(
        rendered(
            r#"{"Kind":"service-resolver","Name":"web","ConnectTimeout":"15s","Subsets":{"v1":{"Filter":"Service.Meta.version == v1"}},"DefaultSubset":"v1"}"#
        ),
        r#"{"Kind":"service-resolver","Name":"web","DefaultSubset":"v1","Subsets":{"v1":{"Filter":"Service.Meta.version == v1"}},"ConnectTimeout":"15s","CreateIndex":7,"ModifyIndex":9}"#
    );
    assert_eq!(
        invalid(
            r#"{"Kind":"service-router","Name":"web","Routes":[{"Match":{"HTTP":{"PathPrefix":"x"}}}]}"#
        ),
        "Route[0] PathPrefix doesn't start with '/': \"x\""
    );
    assert_eq!(
        invalid(
            r#"{"Kind":"ingress-gateway","Name":"ig","Listeners":[{"Port":80,"Protocol":"udp","Services":[{"Name":"a"}]}]}"#
        ),
        "protocol must be 'tcp', 'http', 'grpc' or 'http2'. 'udp' is an unsupported protocol"
    );
    assert_eq!(
        rendered(
            r#"{"Kind":"ingress-gateway","Name":"ig","Listeners":[{"Port":80,"Services":[{"Name":"a"}]}]}"#
        ),
        r#"{"Kind":"ingress-gateway","Name":"ig","TLS":{"Enabled":false},"Listeners":[{"Port":80,"Protocol":"tcp","Services":[{"Name":"a","Hosts":null}]}],"CreateIndex":7,"ModifyIndex":9}"#
    );
    assert_eq!(
        invalid(
            r#"{"Kind":"terminating-gateway","Name":"tg","Services":[{"Name":"a","CertFile":"c"}]}"#
        ),
        "Service \"a\" must have a CertFile, CAFile, and KeyFile specified for TLS origination"
    );
}

#[test]
fn service_intentions_are_typed_sorted_and_rendered_back() {
    let text = r#"{"Kind":"service-intentions","Name":"db","Sources":[
        {"Name":"*","Action":"deny"},
        {"Name":"web","Action":"allow","Description":"web may"},
        {"Name":"admin","Permissions":[{"Action":"allow","HTTP":{"PathPrefix":"/","Methods":["get"]}}]}
    ]}"#;
    let entry = decoded(text).unwrap();
    let body = entry.intentions().unwrap();
    let names: Vec<&str> = body.sources.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["web", "admin", "*"]);
    assert_eq!(
        rendered(text),
        r#"{"Kind":"service-intentions","Name":"db","Sources":[{"Name":"web","Action":"allow","Precedence":9,"Type":"consul","Description":"web may"},{"Name":"admin","Permissions":[{"Action":"allow","HTTP":{"PathPrefix":"/","Methods":["GET"]}}],"Precedence":9,"Type":"consul"},{"Name":"*","Action":"deny","Precedence":8,"Type":"consul"}],"CreateIndex":7,"ModifyIndex":9}"#
    );
    let invalid = |text: &str| match decoded(text) {
        Err(EntryError::Invalid(m)) => m,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        invalid(
            r#"{"Kind":"service-intentions","Name":"db","Sources":[{"Name":"a","Action":"maybe"}]}"#
        ),
        "Sources[0].Action must be set to 'allow' or 'deny'"
    );
    assert_eq!(
        invalid(
            r#"{"Kind":"service-intentions","Name":"db","Sources":[{"Name":"a","Permissions":[{"Action":"allow","HTTP":{}}]}]}"#
        ),
        "Sources[0].Permissions[0].HTTP should not be empty"
    );
    assert_eq!(
        invalid(
            r#"{"Kind":"service-intentions","Name":"db","Sources":[{"Name":"a","Action":"allow","LegacyMeta":{"a":"b"}}]}"#
        ),
        "Sources[0].LegacyMeta must be omitted"
    );
    // Legacy IDs and times are dropped from config-entry writes, as Consul's Normalize does.
    let entry = decoded(r#"{"Kind":"service-intentions","Name":"db","Sources":[{"Name":"a","Action":"allow","LegacyID":"x"}]}"#).unwrap();
    assert!(entry.intentions().unwrap().sources[0].legacy_id.is_empty());
}

#[test]
fn pretty_output_is_gos_indented_layout() {
    let entry = decoded(r#"{"Kind":"service-defaults","Name":"web"}"#).unwrap();
    let mut out = Vec::new();
    render(&entry, true, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "{\n    \"Kind\": \"service-defaults\",\n    \"Name\": \"web\",\n    \"Protocol\": \"\",\n    \"TransparentProxy\": {},\n    \"MeshGateway\": {},\n    \"Expose\": {},\n    \"CreateIndex\": 0,\n    \"ModifyIndex\": 0\n}\n"
    );
}

#[test]
fn ingress_tls_and_header_changes_validate_as_consul() {
    let invalid = |text: &str| match decoded(text) {
        Err(EntryError::Invalid(m)) => m,
        other => panic!("{other:?}"),
    };
    let entry = |tls: &str, listener_tls: &str| {
        format!(
            r#"{{"Kind":"ingress-gateway","Name":"in","TLS":{tls},"Listeners":[{{"Port":8080,"Protocol":"http","Services":[{{"Name":"web"}}]{listener_tls}}}]}}"#
        )
    };
    assert!(decoded(&entry(
        r#"{"Enabled":true,"TLSMinVersion":"TLSv1_2","TLSMaxVersion":"TLSv1_3","CipherSuites":["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]}"#,
        r#","TLS":{"Enabled":true,"TLSMinVersion":"TLS_AUTO"}"#
    ))
    .is_ok());
    assert_eq!(
        invalid(&entry(r#"{"TLSMinVersion":"tls12"}"#, "")),
        "no matching TLS version found for tls12, please specify one of [TLS_AUTO, TLSv1_0, TLSv1_1, TLSv1_2, TLSv1_3]"
    );
    // A listener's own TLS is checked the same way.
    assert_eq!(
        invalid(&entry(
            "{}",
            r#","TLS":{"TLSMinVersion":"TLSv1_3","TLSMaxVersion":"TLSv1_1"}"#
        )),
        "configuring max version TLSv1_1 less than the configured min version TLSv1_3 is invalid"
    );
    // TLS_AUTO compares with nothing.
    assert!(decoded(&entry(
        r#"{"TLSMinVersion":"TLSv1_3","TLSMaxVersion":"TLS_AUTO"}"#,
        ""
    ))
    .is_ok());
    assert_eq!(
        invalid(&entry(
            r#"{"TLSMinVersion":"TLSv1_3","CipherSuites":["TLS_RSA_WITH_AES_128_CBC_SHA"]}"#,
            ""
        )),
        "configuring CipherSuites is only supported for TLS 1.2 and earlier"
    );
    assert_eq!(
        invalid(&entry(
            r#"{"CipherSuites":["TLS_A","TLS_RSA_WITH_AES_128_CBC_SHA","TLS_B"]}"#,
            ""
        )),
        "no matching Envoy TLS cipher suite found for TLS_A,TLS_B"
    );
    assert_eq!(
        invalid(
            r#"{"Kind":"ingress-gateway","Name":"in","Listeners":[{"Port":9,"Protocol":"tcp","Services":[{"Name":"db","ResponseHeaders":{"Remove":["x"]}}]}]}"#
        ),
        "response headers only valid for http, http2 and grpc protocols (service \"db\" on listener on port 9)"
    );
    assert!(decoded(
        r#"{"Kind":"ingress-gateway","Name":"in","Listeners":[{"Port":9,"Protocol":"tcp","Services":[{"Name":"db","RequestHeaders":{}}]}]}"#
    )
    .is_ok());
}
