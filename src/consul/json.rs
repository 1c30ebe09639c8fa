//! JSON output helpers shaped like Go's `encoding/json`: compact by default, or indented with
//! four spaces and a trailing newline (`json.MarshalIndent(v, "", "    ")`) for `?pretty` and
//! dev mode, as Consul does.
//!
//! [`JsonWriter`] is a small hand-rolled writer for hot paths (KV reads) that appends straight
//! into a reused buffer; everything else goes through serde with [`write_serde`].

use serde::Serialize;

/// Bytes that must be escaped inside a JSON string: control characters, `"` and `\\`.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        table[i] = true;
        i += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Appends `s` as a JSON string literal.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    // Most strings (field names, IDs, addresses) need no escaping: copy them in one go.
    if !bytes.iter().any(|b| NEEDS_ESCAPE[*b as usize]) {
        out.reserve(bytes.len() + 2);
        out.push(b'"');
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    out.push(b'"');
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                out.extend_from_slice(format!("\\u{:04x}", b).as_bytes());
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// A streaming writer for objects and arrays with Go's pretty layout when asked.
pub struct JsonWriter<'o> {
    out: &'o mut Vec<u8>,
    pretty: bool,
    depth: usize,
    /// Whether the container being written still has no element.
    first: bool,
}

impl<'o> JsonWriter<'o> {
    pub fn new(out: &'o mut Vec<u8>, pretty: bool) -> Self {
        JsonWriter {
            out,
            pretty,
            depth: 0,
            first: true,
        }
    }

    fn newline_indent(&mut self) {
        if self.pretty {
            self.out.push(b'\n');
            for _ in 0..self.depth {
                self.out.extend_from_slice(b"    ");
            }
        }
    }

    fn element_prefix(&mut self) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        if self.depth > 0 {
            self.newline_indent();
        }
    }

    pub fn begin_array(&mut self) {
        if self.depth > 0 {
            self.element_prefix();
        }
        self.out.push(b'[');
        self.depth += 1;
        self.first = true;
    }

    pub fn end_array(&mut self) {
        self.depth -= 1;
        if !self.first {
            self.newline_indent();
        }
        self.out.push(b']');
        self.first = false;
    }

    /// Starts an object as an array element (or at the top level).
    pub fn begin_object(&mut self) {
        if self.depth > 0 {
            self.element_prefix();
        }
        self.out.push(b'{');
        self.depth += 1;
        self.first = true;
    }

    pub fn end_object(&mut self) {
        self.end_array_like(b'}');
    }

    fn end_array_like(&mut self, close: u8) {
        self.depth -= 1;
        if !self.first {
            self.newline_indent();
        }
        self.out.push(close);
        self.first = false;
    }

    fn key(&mut self, name: &str) {
        self.element_prefix();
        write_str(self.out, name);
        self.out.push(b':');
        if self.pretty {
            self.out.push(b' ');
        }
    }

    pub fn field_u64(&mut self, name: &str, value: u64) {
        self.key(name);
        crate::proto::http::push_u64(self.out, value);
    }

    pub fn field_str(&mut self, name: &str, value: &str) {
        self.key(name);
        write_str(self.out, value);
    }

    /// Writes bytes as base64, or `null` when empty, as Go does for a nil `[]byte`.
    pub fn field_base64_or_null(&mut self, name: &str, value: &[u8]) {
        self.key(name);
        if value.is_empty() {
            self.out.extend_from_slice(b"null");
        } else {
            use base64::Engine;
            self.out.push(b'"');
            let start = self.out.len();
            let encoded_len = value.len().div_ceil(3) * 4;
            self.out.resize(start + encoded_len, 0);
            let written = base64::engine::general_purpose::STANDARD
                .encode_slice(value, &mut self.out[start..])
                .expect("buffer sized for the encoding");
            debug_assert_eq!(written, encoded_len);
            self.out.push(b'"');
        }
    }

    pub fn field_i64(&mut self, name: &str, value: i64) {
        self.key(name);
        if value < 0 {
            self.out.push(b'-');
        }
        crate::proto::http::push_u64(self.out, value.unsigned_abs());
    }

    pub fn field_bool(&mut self, name: &str, value: bool) {
        self.key(name);
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
    }

    pub fn field_null(&mut self, name: &str) {
        self.key(name);
        self.out.extend_from_slice(b"null");
    }

    /// Starts an object as the value of field `name`; close it with `end_object`.
    pub fn field_object(&mut self, name: &str) {
        self.key(name);
        self.out.push(b'{');
        self.depth += 1;
        self.first = true;
    }

    /// Starts an array as the value of field `name`; close it with `end_array`.
    pub fn field_array(&mut self, name: &str) {
        self.key(name);
        self.out.push(b'[');
        self.depth += 1;
        self.first = true;
    }

    /// Writes a field whose value is already-encoded JSON, laid out by serde in the
    /// writer's style.
    pub fn field_value(&mut self, name: &str, value: &serde_json::Value) {
        self.key(name);
        if self.pretty {
            let mut nested = Vec::new();
            write_serde(&mut nested, value, true);
            // Re-indent the nested document to the current depth.
            let text = String::from_utf8_lossy(nested.trim_ascii_end()).into_owned();
            let indent = "    ".repeat(self.depth);
            let mut first = true;
            for line in text.lines() {
                if !first {
                    self.out.push(b'\n');
                    self.out.extend_from_slice(indent.as_bytes());
                }
                first = false;
                self.out.extend_from_slice(line.as_bytes());
            }
        } else {
            write_serde(self.out, value, false);
        }
    }

    /// Writes `name: {"k": "v", …}` from pairs already in key order, or `null` for `None`.
    pub fn field_str_map<'s>(
        &mut self,
        name: &str,
        pairs: Option<impl Iterator<Item = (&'s str, &'s str)>>,
    ) {
        let Some(pairs) = pairs else {
            return self.field_null(name);
        };
        self.field_object(name);
        for (k, v) in pairs {
            self.field_str(k, v);
        }
        self.end_object();
    }

    /// Writes `name: ["a", "b"]`.
    pub fn field_str_array<'s>(&mut self, name: &str, items: impl Iterator<Item = &'s str>) {
        self.field_array(name);
        for item in items {
            self.array_str(item);
        }
        self.end_array();
    }

    /// Writes an already-rendered element (an object or value laid out for this writer's
    /// style and the current depth).
    pub fn raw_element(&mut self, rendered: &[u8]) {
        self.element_prefix();
        self.out.extend_from_slice(rendered);
    }

    pub fn array_str(&mut self, value: &str) {
        self.element_prefix();
        write_str(self.out, value);
    }

    /// Ends the document: Go's indented output ends with a newline.
    pub fn finish(self) {
        debug_assert_eq!(self.depth, 0);
        if self.pretty {
            self.out.push(b'\n');
        }
    }
}

/// Serializes any value like Go's marshaller would lay it out.
pub fn write_serde<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T, pretty: bool) {
    if pretty {
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut serializer = serde_json::Serializer::with_formatter(&mut *out, formatter);
        value
            .serialize(&mut serializer)
            .expect("serializing into a Vec cannot fail");
        out.push(b'\n');
    } else {
        serde_json::to_writer(&mut *out, value).expect("serializing into a Vec cannot fail");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_and_pretty_match_go_layout() {
        for pretty in [false, true] {
            let mut out = Vec::new();
            let mut w = JsonWriter::new(&mut out, pretty);
            w.begin_array();
            w.begin_object();
            w.field_u64("LockIndex", 0);
            w.field_str("Key", "a\"b");
            w.field_base64_or_null("Value", b"bar");
            w.field_base64_or_null("Empty", b"");
            w.end_object();
            w.end_array();
            w.finish();
            let text = String::from_utf8(out).unwrap();
            let expected = serde_json::json!([{"LockIndex": 0, "Key": "a\"b", "Value": "YmFy", "Empty": null}]);
            let mut serde_text = Vec::new();
            write_serde(&mut serde_text, &expected, pretty);
            // serde_json orders keys alphabetically in json! maps, so compare parsed values
            // and the indentation style separately.
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(&text).unwrap(),
                expected
            );
            if pretty {
                assert!(
                    text.starts_with("[\n    {\n        \"LockIndex\": 0,"),
                    "{text}"
                );
                assert!(text.ends_with("    }\n]\n"), "{text}");
            } else {
                assert_eq!(
                    text,
                    r#"[{"LockIndex":0,"Key":"a\"b","Value":"YmFy","Empty":null}]"#
                );
            }
        }
    }

    #[test]
    fn empty_containers() {
        let mut out = Vec::new();
        let mut w = JsonWriter::new(&mut out, true);
        w.begin_array();
        w.end_array();
        w.finish();
        assert_eq!(out, b"[]\n");
    }

    #[test]
    fn control_characters_are_escaped() {
        let mut out = Vec::new();
        write_str(&mut out, "a\u{1}\n");
        assert_eq!(out, b"\"a\\u0001\\n\"");
    }
}
