//! Feeds arbitrary bytes to the config entry decoder (`PUT /v1/config` bodies, bootstrap
//! entries) and to the legacy intention decoder (`/v1/connect/intentions` bodies). Decoding
//! must never panic; an entry that decodes must render, and its rendering must decode back to
//! the same entry (a round trip through Consul's JSON loses nothing); a discovery chain must
//! compile (or refuse) over a store holding it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use praetor::consul::config_entry::{self, intention};
use praetor::store::mesh::config_entry::ConfigEntryOp;
use praetor::store::{Command, Tables};

fuzz_target!(|data: &[u8]| {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        if let Ok(legacy) = intention::decode_legacy(&value) {
            let _ = legacy.validate(true);
            let _ = legacy.validate(false);
        }
    }
    let Ok(entry) = config_entry::decode_body(data) else { return };
    let mut rendered = Vec::new();
    config_entry::render(&entry, false, &mut rendered);
    let again = config_entry::decode_body(&rendered)
        .unwrap_or_else(|e| panic!("a rendered entry does not decode: {e:?}: {}", String::from_utf8_lossy(&rendered)));
    assert_eq!(again, entry, "the round trip changed the entry");
    let mut pretty = Vec::new();
    config_entry::render(&entry, true, &mut pretty);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&pretty).ok(),
        serde_json::from_slice::<serde_json::Value>(&rendered).ok(),
        "pretty and compact renderings differ"
    );
    let mut tables = Tables::default();
    let mut changes = Vec::new();
    let _ = tables.apply(
        1,
        &Command::ConfigEntry(ConfigEntryOp::Set { entry: Box::new(entry.clone()), cas: None }),
        &mut changes,
    );
    let _ = praetor::consul::discovery_chain::compile(&tables, &entry.name, "dc1", Default::default());
});
