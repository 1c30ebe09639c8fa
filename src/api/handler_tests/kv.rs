//! What the KV handlers answer, request by request (`/v1/kv/<key>`), in-process.

use super::{Checked, Harness};
use base64::Engine;

fn decoded(value: &serde_json::Value) -> String {
    let text = value.as_str().expect("a base64 Value");
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .expect("base64"),
    )
    .expect("UTF-8 value")
}

#[test]
fn a_put_key_reads_back_as_a_dir_entry_with_its_indexes() {
    let mut h = Harness::server();
    let put = h.check("PUT /v1/kv/app/config?flags=42", "hello");
    assert_eq!((put.status, put.text().as_str()), (200, "true"));
    let read = h.check("GET /v1/kv/app/config", "");
    assert_eq!(read.status, 200);
    let entries = read.json();
    let entry = &entries[0];
    assert_eq!(entry["Key"], "app/config");
    assert_eq!(entry["Flags"], 42);
    assert_eq!(decoded(&entry["Value"]), "hello");
    assert_eq!(entry["CreateIndex"], entry["ModifyIndex"]);
    assert_eq!(entry["LockIndex"], 0);
    assert_eq!(read.index(), h.index(), "the index header is the key's");
}

#[test]
fn a_missing_key_is_404_with_the_store_index() {
    let mut h = Harness::server();
    h.check("PUT /v1/kv/other", "x");
    let missing = h.check("GET /v1/kv/nothing-here", "");
    assert_eq!(missing.status, 404);
    assert!(
        missing.body.is_empty(),
        "Consul's 404 for a key has no body"
    );
    assert!(
        missing.index() > 0,
        "a miss still carries an index to block on"
    );
}

#[test]
fn raw_answers_the_value_bytes_alone() {
    let mut h = Harness::server();
    h.check("PUT /v1/kv/raw", "just the bytes");
    let raw = h.check("GET /v1/kv/raw?raw", "");
    assert_eq!((raw.status, raw.text().as_str()), (200, "just the bytes"));
}

#[test]
fn cas_zero_creates_only_a_missing_key() {
    let mut h = Harness::server();
    let first = h.check("PUT /v1/kv/once?cas=0", "a");
    assert_eq!(first.text(), "true");
    let second = h.check("PUT /v1/kv/once?cas=0", "b");
    assert_eq!((second.status, second.text().as_str()), (200, "false"));
    let read = h.check("GET /v1/kv/once", "");
    assert_eq!(
        decoded(&read.json()[0]["Value"]),
        "a",
        "the refused write left it"
    );
}

#[test]
fn cas_with_the_modify_index_swaps_and_a_stale_index_does_not() {
    let mut h = Harness::server();
    h.check("PUT /v1/kv/k", "1");
    let modify_index = h.check("GET /v1/kv/k", "").json()[0]["ModifyIndex"]
        .as_u64()
        .expect("an index");
    let swapped = h.check(&format!("PUT /v1/kv/k?cas={modify_index}"), "2");
    assert_eq!(swapped.text(), "true");
    let stale = h.check(&format!("PUT /v1/kv/k?cas={modify_index}"), "3");
    assert_eq!(stale.text(), "false");
    assert_eq!(
        decoded(&h.check("GET /v1/kv/k", "").json()[0]["Value"]),
        "2"
    );
}

#[test]
fn bad_parameters_are_400_with_consuls_words() {
    let mut h = Harness::server();
    let cas = h.check("PUT /v1/kv/k?cas=soon", "v");
    assert_eq!(cas.status, 400);
    assert!(cas.text().contains("cas"), "{}", cas.text());
    let flags = h.check("PUT /v1/kv/k?flags=-1", "v");
    assert_eq!(flags.status, 400);
    let conflicting = h.check("PUT /v1/kv/k?cas=0&acquire=x", "v");
    assert_eq!(conflicting.status, 400);
    assert!(
        conflicting.text().starts_with("Conflicting flags: "),
        "{}",
        conflicting.text()
    );
    let no_key = h.check("PUT /v1/kv/", "v");
    assert_eq!(
        (no_key.status, no_key.text().as_str()),
        (400, "Missing key name")
    );
    let traversal = h.check("GET /v1/kv/a/../b", "");
    assert_eq!(traversal.status, 400);
    assert_eq!(h.index(), 0, "no refused request wrote anything");
}

#[test]
fn keys_with_a_separator_fold_at_the_separator() {
    let mut h = Harness::server();
    for key in ["web/a", "web/b/c", "web/b/d", "db/x"] {
        h.check(&format!("PUT /v1/kv/{key}"), "v");
    }
    let keys = h.check("GET /v1/kv/web/?keys&separator=/", "").json();
    assert_eq!(keys, serde_json::json!(["web/a", "web/b/"]));
    let all = h.check("GET /v1/kv/?keys", "").json();
    assert_eq!(all.as_array().map(Vec::len), Some(4));
}

#[test]
fn recurse_reads_and_deletes_a_whole_prefix() {
    let mut h = Harness::server();
    for key in ["tree/a", "tree/b", "treetop", "other"] {
        h.check(&format!("PUT /v1/kv/{key}"), "v");
    }
    let listed = h.check("GET /v1/kv/tree?recurse", "").json();
    let keys: Vec<_> = listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|entry| entry["Key"].as_str().expect("a key").to_string())
        .collect();
    assert_eq!(keys, ["tree/a", "tree/b", "treetop"]);
    let deleted = h.check("DELETE /v1/kv/tree/?recurse", "");
    assert_eq!(deleted.text(), "true");
    assert_eq!(h.check("GET /v1/kv/tree/a", "").status, 404);
    assert_eq!(h.check("GET /v1/kv/treetop", "").status, 200);
}

#[test]
fn delete_cas_deletes_only_at_the_modify_index() {
    let mut h = Harness::server();
    h.check("PUT /v1/kv/d", "v");
    let index = h.check("GET /v1/kv/d", "").json()[0]["ModifyIndex"]
        .as_u64()
        .expect("an index");
    assert_eq!(
        h.check(&format!("DELETE /v1/kv/d?cas={}", index + 100), "")
            .text(),
        "false"
    );
    assert_eq!(h.check("GET /v1/kv/d", "").status, 200);
    assert_eq!(
        h.check(&format!("DELETE /v1/kv/d?cas={index}"), "").text(),
        "true"
    );
    assert_eq!(h.check("GET /v1/kv/d", "").status, 404);
}

#[test]
fn a_blocking_read_waits_for_a_change_to_its_key_and_answers_the_new_index() {
    let mut h = Harness::server();
    h.check("PUT /v1/kv/watched", "1");
    let index = h.index();
    let Checked::Parked(op) = h.serve(&format!("GET /v1/kv/watched?index={index}"), "") else {
        panic!("a read at the current index waits");
    };
    // A write elsewhere moves the store but not the key's index: still waiting.
    h.check("PUT /v1/kv/unrelated", "x");
    let Checked::Parked(op) = h.resume(op) else {
        panic!("an unrelated key does not answer the watch");
    };
    h.check("PUT /v1/kv/watched", "2");
    let Checked::Answered(answer) = h.resume(op) else {
        panic!("the key changed");
    };
    assert_eq!(answer.index(), h.index());
    assert_eq!(decoded(&answer.json()[0]["Value"]), "2");
}

#[test]
fn a_lock_acquire_needs_a_live_session() {
    let mut h = Harness::server();
    h.check(
        "PUT /v1/catalog/register",
        r#"{"Node":"n1","Address":"10.0.0.1"}"#,
    );
    let refused = h.check(
        "PUT /v1/kv/lock?acquire=00000000-0000-0000-0000-000000000000",
        "",
    );
    assert_eq!(refused.status, 500);
    assert!(
        refused.text().contains("invalid session"),
        "{}",
        refused.text()
    );
    let session = h.check("PUT /v1/session/create", r#"{"Node":"n1","Checks":[]}"#);
    assert_eq!(session.status, 200, "{}", session.text());
    let id = session.json()["ID"].as_str().expect("an ID").to_string();
    assert_eq!(
        h.check(&format!("PUT /v1/kv/lock?acquire={id}"), "").text(),
        "true"
    );
    let held = h.check("GET /v1/kv/lock", "").json();
    assert_eq!(held[0]["Session"], id.as_str());
    assert_eq!(held[0]["LockIndex"], 1);
    assert_eq!(
        h.check(&format!("PUT /v1/kv/lock?release={id}"), "").text(),
        "true"
    );
    assert!(h.check("GET /v1/kv/lock", "").json()[0]
        .get("Session")
        .is_none());
}
