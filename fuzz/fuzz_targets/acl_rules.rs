//! Feeds arbitrary text to the ACL rule parser (HCL and JSON), then compiles what parses into
//! an authorizer and asks it about names taken from the input. Parsing must never panic and
//! must respect its limits; a compiled authorizer must answer every check, and an exact rule
//! must decide its own name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use praetor::store::acl::authorizer::{Authorizer, DefaultPolicy};
use praetor::store::acl::rules::{self, Access, SegmentKind, RULES_BYTES_MAX, RULES_COUNT_MAX};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(parsed) = rules::parse(text) else { return };
    assert!(text.len() <= RULES_BYTES_MAX);
    assert!(parsed.segments.len() <= RULES_COUNT_MAX);
    for default_policy in [DefaultPolicy::Allow, DefaultPolicy::Deny] {
        let authz = Authorizer::compile(&[&parsed], default_policy);
        for rule in parsed.segments.iter().take(64) {
            let name = rule.name.as_str();
            let _ = (authz.key_read(name), authz.key_list(name), authz.key_write_prefix(name));
            let _ = (authz.service_read(name), authz.intention_write(name), authz.node_write(name));
            let _ = (authz.session_read(name), authz.event_write(name), authz.query_read(name));
            let _ = authz.agent_write(name);
            // An exact key rule decides its own name unless another exact rule for the same
            // name is stronger (merging), so a deny rule on a key always denies it.
            if rule.kind == SegmentKind::Key && !rule.prefix && rule.access == Access::Deny {
                assert!(authz.key_read(name).is_err());
            }
        }
        let _ = (authz.service_read_all(), authz.node_read_all(), authz.service_write_any());
        let _ = (authz.intention_read("*"), authz.intention_write("*"), authz.snapshot());
        let _ = (authz.operator_read(), authz.mesh_write(), authz.peering_read(), authz.keyring_read());
    }
});
