//! The `exported-services` kind: which of this cluster's services each peer may import
//! (`Services[{Name, Namespace, Consumers[{Peer, Partition, SamenessGroup}]}]`), validated
//! as Consul CE validates it (`config_entry_exports.go` and its CE half): one entry, named
//! `default`; every service named, with at least one consumer; a consumer names at most one
//! of `Peer`, `Partition` and `SamenessGroup`, no wildcard peer or partition, and no
//! partition but `default` nor sameness group (enterprise features).
//!
//! The entry is stored and served like any other; the peer stream sends what it exports to
//! each peer (`xds::peerstream::machine::exports_for`, docs/peering.md).

use super::doc::Doc;

/// Consul's `WildcardSpecifier`.
const WILDCARD: &str = "*";

/// The first reason the entry is refused, in Consul's words (Consul stops at the first).
pub fn validate(name: &str, doc: &Doc, meta_reasons: Vec<String>) -> Result<(), String> {
    if name != "default" {
        return Err("exported-services Name must be \"default\"".to_string());
    }
    super::as_multierror(meta_reasons)?;
    let services = doc.list("Services");
    for (i, service) in services.iter().enumerate() {
        for (j, consumer) in service.list("Consumers").iter().enumerate() {
            let partition = consumer.str("Partition");
            if !partition.is_empty() && partition != "default" {
                return Err(format!(
                    "Services[{i}].Consumers[{j}]: partitions are an enterprise-only feature"
                ));
            }
            if !consumer.str("SamenessGroup").is_empty() {
                return Err(format!(
                    "Services[{i}].Consumers[{j}]: sameness-groups are an enterprise-only feature"
                ));
            }
        }
    }
    for (i, service) in services.iter().enumerate() {
        check_service(i, service)?;
    }
    Ok(())
}

fn check_service(i: usize, service: &Doc) -> Result<(), String> {
    let name = service.str("Name");
    if name.is_empty() {
        return Err(format!("Services[{i}]: service name cannot be empty"));
    }
    if service.str("Namespace") == WILDCARD && name != WILDCARD {
        return Err(format!(
            "Services[{i}]: service name must be wildcard if namespace is wildcard"
        ));
    }
    let consumers = service.list("Consumers");
    if consumers.is_empty() {
        return Err(format!("Services[{i}]: must have at least one consumer"));
    }
    for (j, consumer) in consumers.iter().enumerate() {
        let named = ["Peer", "Partition", "SamenessGroup"]
            .iter()
            .filter(|field| !consumer.str(field).is_empty())
            .count();
        if named > 1 {
            return Err(format!(
                "Services[{i}].Consumers[{j}]: must define at most one of Peer, Partition, or SamenessGroup"
            ));
        }
        if consumer.str("Partition") == WILDCARD {
            return Err(format!(
                "Services[{i}].Consumers[{j}]: exporting to all partitions (wildcard) is not supported"
            ));
        }
        if consumer.str("Peer") == WILDCARD {
            return Err(format!(
                "Services[{i}].Consumers[{j}]: exporting to all peers (wildcard) is not supported"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::consul::config_entry::{decode_body, render_compact, EntryError};

    fn refusal(body: &str) -> String {
        match decode_body(body.as_bytes()) {
            Err(EntryError::Invalid(reason)) => reason,
            other => panic!("expected a validation error for {body}: {other:?}"),
        }
    }

    #[test]
    fn an_entry_exporting_to_peers_decodes_and_renders_in_consuls_order() {
        let body = r#"{"Kind":"exported-services","Name":"default","Services":[{"Name":"web","Consumers":[{"Peer":"dc2"}]}]}"#;
        let entry = decode_body(body.as_bytes()).unwrap();
        let mut out = Vec::new();
        render_compact(&entry, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(r#""Services":[{"Name":"web","Consumers":[{"Peer":"dc2"}]}]"#),
            "{text}"
        );
    }

    #[test]
    fn consuls_validation_errors() {
        let cases = [
            (
                r#"{"Kind":"exported-services","Name":"other"}"#,
                "exported-services Name must be \"default\"",
            ),
            (
                r#"{"Kind":"exported-services","Name":"default","Services":[{"Name":""}]}"#,
                "Services[0]: service name cannot be empty",
            ),
            (
                r#"{"Kind":"exported-services","Name":"default","Services":[{"Name":"web"}]}"#,
                "Services[0]: must have at least one consumer",
            ),
            (
                r#"{"Kind":"exported-services","Name":"default","Services":[{"Name":"web","Consumers":[{"Peer":"*"}]}]}"#,
                "Services[0].Consumers[0]: exporting to all peers (wildcard) is not supported",
            ),
            (
                r#"{"Kind":"exported-services","Name":"default","Services":[{"Name":"web","Consumers":[{"Peer":"a","Partition":"default"}]}]}"#,
                "Services[0].Consumers[0]: must define at most one of Peer, Partition, or SamenessGroup",
            ),
            (
                r#"{"Kind":"exported-services","Name":"default","Services":[{"Name":"web","Consumers":[{"Partition":"p1"}]}]}"#,
                "Services[0].Consumers[0]: partitions are an enterprise-only feature",
            ),
            (
                r#"{"Kind":"exported-services","Name":"default","Services":[{"Name":"web","Consumers":[{"SamenessGroup":"g"}]}]}"#,
                "Services[0].Consumers[0]: sameness-groups are an enterprise-only feature",
            ),
            (
                r#"{"Kind":"exported-services","Name":"default","Services":[{"Name":"web","Namespace":"*","Consumers":[{"Peer":"a"}]}]}"#,
                "Services[0]: service name must be wildcard if namespace is wildcard",
            ),
        ];
        for (body, reason) in cases {
            assert_eq!(refusal(body), reason, "{body}");
        }
    }
}
