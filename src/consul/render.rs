//! Catalog rows as Consul's JSON: `Node`, `ServiceNode`, `NodeService`, `HealthCheck`,
//! `CheckServiceNode`, `AgentService`, with Go's field order, casing and empty-value
//! conventions (`[]` for empty tag lists, `{}` for empty meta, `null` for absent tagged
//! addresses, omitted `omitempty` fields), and [`StreamedArray`], a large answer sent from
//! the renderings it pins rather than assembled whole.

use super::json::JsonWriter;
use crate::proto::duration::format_go_duration;
use crate::store::catalog::read::CheckServiceNode;
use crate::store::catalog::{CheckDefinition, HealthCheck, Node, ServiceInstance};
use crate::store::StoreVersion;

fn str_map(
    w: &mut JsonWriter,
    name: &str,
    map: &crate::store::catalog::StrMap,
    empty_is_null: bool,
) {
    if map.is_empty() && empty_is_null {
        w.field_null(name);
        return;
    }
    w.field_object(name);
    for (k, v) in map.iter() {
        w.field_str(k, v);
    }
    w.end_object();
}

/// The fields of a `Node`, inside an open object.
pub fn node_fields(w: &mut JsonWriter, node: &Node) {
    node_fields_of_peer(w, node, "");
}

/// The fields of a `Node` imported from peer `peer` (none: a local node), whose
/// `PeerName` Consul writes only when set.
pub fn node_fields_of_peer(w: &mut JsonWriter, node: &Node, peer: &str) {
    w.field_str("ID", &node.id);
    w.field_str("Node", &node.name);
    w.field_str("Address", &node.address);
    w.field_str("Datacenter", &node.datacenter);
    if !peer.is_empty() {
        w.field_str("PeerName", peer);
    }
    str_map(w, "TaggedAddresses", &node.tagged_addresses, true);
    str_map(w, "Meta", &node.meta, false);
    w.field_u64("CreateIndex", node.create_index);
    w.field_u64("ModifyIndex", node.modify_index);
}

pub fn node(w: &mut JsonWriter, node: &Node) {
    w.begin_object();
    node_fields(w, node);
    w.end_object();
}

fn service_tagged_addresses(w: &mut JsonWriter, name: &str, service: &ServiceInstance) {
    let list = service.tagged_addresses();
    if list.is_empty() {
        return;
    }
    w.field_object(name);
    for (tag, address) in list.iter() {
        w.field_object(tag);
        w.field_str("Address", &address.address);
        w.field_i64("Port", address.port as i64);
        w.end_object();
    }
    w.end_object();
}

fn weights(w: &mut JsonWriter, name: &str, service: &ServiceInstance) {
    w.field_object(name);
    w.field_u64("Passing", service.weights.passing as u64);
    w.field_u64("Warning", service.weights.warning as u64);
    w.end_object();
}

/// `Proxy`/`ServiceProxy`: the registered configuration, or the zero value Consul prints.
fn proxy(w: &mut JsonWriter, name: &str, service: &ServiceInstance) {
    if let Some(raw) = service
        .extras
        .as_ref()
        .and_then(|e| e.proxy_json.as_deref())
    {
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(raw) {
            w.field_value(name, &value);
            return;
        }
    }
    w.field_object(name);
    w.field_str("Mode", "");
    w.field_object("MeshGateway");
    w.end_object();
    w.field_object("Expose");
    w.end_object();
    w.end_object();
}

fn connect(w: &mut JsonWriter, name: &str, service: &ServiceInstance) {
    w.field_object(name);
    if service.extras.as_ref().is_some_and(|e| e.connect_native) {
        w.field_bool("Native", true);
    }
    w.end_object();
}

/// A `ServiceNode` (`/v1/catalog/service/<s>`): node columns joined with the instance.
pub fn service_node(w: &mut JsonWriter, node: &Node, service: &ServiceInstance) {
    service_node_of_peer(w, node, service, "");
}

/// A `ServiceNode` imported from peer `peer` (none: a local one).
pub fn service_node_of_peer(
    w: &mut JsonWriter,
    node: &Node,
    service: &ServiceInstance,
    peer: &str,
) {
    w.begin_object();
    w.field_str("ID", &node.id);
    w.field_str("Node", &node.name);
    w.field_str("Address", &node.address);
    w.field_str("Datacenter", &node.datacenter);
    str_map(w, "TaggedAddresses", &node.tagged_addresses, true);
    str_map(w, "NodeMeta", &node.meta, false);
    w.field_str("ServiceKind", service.kind());
    w.field_str("ServiceID", &service.id);
    w.field_str("ServiceName", &service.name);
    w.field_str_array("ServiceTags", service.tags.iter().map(|t| &**t));
    w.field_str("ServiceAddress", &service.address);
    service_tagged_addresses(w, "ServiceTaggedAddresses", service);
    weights(w, "ServiceWeights", service);
    str_map(w, "ServiceMeta", &service.meta, false);
    w.field_i64("ServicePort", service.port as i64);
    w.field_str("ServiceSocketPath", service.socket_path());
    w.field_bool("ServiceEnableTagOverride", service.enable_tag_override);
    proxy(w, "ServiceProxy", service);
    connect(w, "ServiceConnect", service);
    w.field_null("ServiceLocality");
    if !peer.is_empty() {
        w.field_str("PeerName", peer);
    }
    w.field_u64("CreateIndex", service.create_index);
    w.field_u64("ModifyIndex", service.modify_index);
    w.end_object();
}

/// The fields of a `NodeService`, inside an open object.
pub fn node_service_fields(w: &mut JsonWriter, service: &ServiceInstance) {
    node_service_fields_of_peer(w, service, "");
}

/// The fields of a `NodeService` imported from peer `peer` (none: a local one).
pub fn node_service_fields_of_peer(w: &mut JsonWriter, service: &ServiceInstance, peer: &str) {
    if !service.kind().is_empty() {
        w.field_str("Kind", service.kind());
    }
    w.field_str("ID", &service.id);
    w.field_str("Service", &service.name);
    w.field_str_array("Tags", service.tags.iter().map(|t| &**t));
    w.field_str("Address", &service.address);
    service_tagged_addresses(w, "TaggedAddresses", service);
    str_map(w, "Meta", &service.meta, false);
    if service.port != 0 {
        w.field_i64("Port", service.port as i64);
    }
    if !service.socket_path().is_empty() {
        w.field_str("SocketPath", service.socket_path());
    }
    weights(w, "Weights", service);
    w.field_bool("EnableTagOverride", service.enable_tag_override);
    proxy(w, "Proxy", service);
    connect(w, "Connect", service);
    w.field_str("PeerName", peer);
    w.field_u64("CreateIndex", service.create_index);
    w.field_u64("ModifyIndex", service.modify_index);
}

pub fn node_service(w: &mut JsonWriter, service: &ServiceInstance) {
    w.begin_object();
    node_service_fields(w, service);
    w.end_object();
}

/// `AgentService` (`/v1/agent/services`, `/v1/agent/service/<id>`), from a catalog-shaped row.
/// `content_hash` is written for the single-service endpoint only.
pub fn agent_service_fields(
    w: &mut JsonWriter,
    service: &ServiceInstance,
    datacenter: &str,
    content_hash: Option<&str>,
) {
    if !service.kind().is_empty() {
        w.field_str("Kind", service.kind());
    }
    w.field_str("ID", &service.id);
    w.field_str("Service", &service.name);
    w.field_str_array("Tags", service.tags.iter().map(|t| &**t));
    str_map(w, "Meta", &service.meta, false);
    w.field_i64("Port", service.port as i64);
    w.field_str("Address", &service.address);
    if !service.socket_path().is_empty() {
        w.field_str("SocketPath", service.socket_path());
    }
    service_tagged_addresses(w, "TaggedAddresses", service);
    weights(w, "Weights", service);
    w.field_bool("EnableTagOverride", service.enable_tag_override);
    if let Some(hash) = content_hash {
        w.field_str("ContentHash", hash);
    }
    if service
        .extras
        .as_ref()
        .is_some_and(|e| e.proxy_json.is_some())
    {
        proxy(w, "Proxy", service);
    }
    if service.extras.as_ref().is_some_and(|e| e.connect_native) {
        connect(w, "Connect", service);
    }
    w.field_str("Datacenter", datacenter);
}

fn duration_field(w: &mut JsonWriter, name: &str, nanos: i64) {
    if nanos != 0 {
        w.field_str(name, &format_go_duration(nanos));
    }
}

/// `HealthCheckDefinition` with Go's `omitempty` rules; durations as Go strings, except
/// `TTL`, which Consul leaves as nanoseconds.
fn definition(w: &mut JsonWriter, def: Option<&CheckDefinition>) {
    w.field_object("Definition");
    if let Some(d) = def {
        duration_field(w, "Interval", d.interval_ns);
        if d.output_max_size != 0 {
            w.field_u64("OutputMaxSize", d.output_max_size);
        }
        duration_field(w, "Timeout", d.timeout_ns);
        duration_field(
            w,
            "DeregisterCriticalServiceAfter",
            d.deregister_critical_service_after_ns,
        );
        if !d.http.is_empty() {
            w.field_str("HTTP", &d.http);
        }
        if !d.tls_server_name.is_empty() {
            w.field_str("TLSServerName", &d.tls_server_name);
        }
        if d.tls_skip_verify {
            w.field_bool("TLSSkipVerify", true);
        }
        if !d.header.is_empty() {
            w.field_object("Header");
            let mut headers: Vec<&(String, Vec<String>)> = d.header.iter().collect();
            headers.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, values) in headers {
                w.field_str_array(name, values.iter().map(String::as_str));
            }
            w.end_object();
        }
        if !d.method.is_empty() {
            w.field_str("Method", &d.method);
        }
        if !d.body.is_empty() {
            w.field_str("Body", &d.body);
        }
        if d.disable_redirects {
            w.field_bool("DisableRedirects", true);
        }
        if !d.tcp.is_empty() {
            w.field_str("TCP", &d.tcp);
        }
        if !d.udp.is_empty() {
            w.field_str("UDP", &d.udp);
        }
        if !d.script_args.is_empty() {
            w.field_str_array("ScriptArgs", d.script_args.iter().map(String::as_str));
        }
        if !d.grpc.is_empty() {
            w.field_str("GRPC", &d.grpc);
        }
        if d.grpc_use_tls {
            w.field_bool("GRPCUseTLS", true);
        }
        if !d.h2ping.is_empty() {
            w.field_str("H2PING", &d.h2ping);
        }
        if d.h2ping_use_tls {
            w.field_bool("H2PingUseTLS", true);
        }
        if !d.os_service.is_empty() {
            w.field_str("OSService", &d.os_service);
        }
        if !d.alias_node.is_empty() {
            w.field_str("AliasNode", &d.alias_node);
        }
        if !d.alias_service.is_empty() {
            w.field_str("AliasService", &d.alias_service);
        }
        if d.ttl_ns != 0 {
            w.field_i64("TTL", d.ttl_ns);
        }
    }
    w.end_object();
}

/// The fields of a `HealthCheck`, inside an open object.
pub fn health_check_fields(w: &mut JsonWriter, check: &HealthCheck) {
    health_check_fields_of_peer(w, check, "");
}

/// The fields of a `HealthCheck` imported from peer `peer` (none: a local one).
pub fn health_check_fields_of_peer(w: &mut JsonWriter, check: &HealthCheck, peer: &str) {
    w.field_str("Node", &check.node);
    w.field_str("CheckID", &check.check_id);
    w.field_str("Name", &check.name);
    w.field_str("Status", check.status.as_str());
    w.field_str("Notes", check.notes());
    w.field_str("Output", &check.output);
    w.field_str("ServiceID", &check.service_id);
    w.field_str("ServiceName", &check.service_name);
    w.field_str_array("ServiceTags", check.service_tags.iter().map(|t| &**t));
    w.field_str("Type", check.kind());
    w.field_str("Interval", check.interval());
    w.field_str("Timeout", check.timeout());
    w.field_i64("ExposedPort", check.exposed_port() as i64);
    if !peer.is_empty() {
        w.field_str("PeerName", peer);
    }
    definition(w, check.definition());
    w.field_u64("CreateIndex", check.create_index);
    w.field_u64("ModifyIndex", check.modify_index);
}

pub fn health_check(w: &mut JsonWriter, check: &HealthCheck) {
    w.begin_object();
    health_check_fields(w, check);
    w.end_object();
}

/// A `CheckServiceNode` (`/v1/health/service/<s>`).
pub fn check_service_node(w: &mut JsonWriter, row: &CheckServiceNode) {
    w.begin_object();
    w.field_object("Node");
    node_fields(w, row.node);
    w.end_object();
    w.field_object("Service");
    node_service_fields(w, row.service);
    w.end_object();
    w.field_array("Checks");
    for check in row.checks() {
        health_check(w, check);
    }
    w.end_array();
    w.end_object();
}

/// A `CheckServiceNode` imported from peer `peer`: every row names the peer.
pub fn imported_check_service_node<'c>(
    w: &mut JsonWriter,
    node: &Node,
    service: &ServiceInstance,
    checks: impl Iterator<Item = &'c HealthCheck>,
    peer: &str,
) {
    w.begin_object();
    w.field_object("Node");
    node_fields_of_peer(w, node, peer);
    w.end_object();
    w.field_object("Service");
    node_service_fields_of_peer(w, service, peer);
    w.end_object();
    w.field_array("Checks");
    for check in checks {
        w.begin_object();
        health_check_fields_of_peer(w, check, peer);
        w.end_object();
    }
    w.end_array();
    w.end_object();
}

/// Renders one array element on its own, laid out as it appears inside a top-level array
/// (indented one level when pretty), for the per-row render cache.
pub fn fragment(pretty: bool, render: impl FnOnce(&mut JsonWriter)) -> Vec<u8> {
    let mut buf = Vec::with_capacity(1024);
    let mut w = JsonWriter::new(&mut buf, pretty);
    render(&mut w);
    if !pretty {
        return buf;
    }
    indent(&buf, Vec::with_capacity(buf.len() + buf.len() / 8))
}

/// What [`write_array`] puts between two elements: a comma, and when pretty the newline and
/// indentation of the next element.
pub fn element_separator(pretty: bool) -> &'static [u8] {
    if pretty {
        b",\n    "
    } else {
        b","
    }
}

/// [`fragment`] preceded by its [`element_separator`], the form the per-row render caches
/// hold: an element after the first is then one piece of a vectored answer (one iovec)
/// instead of two, and a 1,000-instance answer fits one `writev`.
pub fn separated_fragment(pretty: bool, render: impl FnOnce(&mut JsonWriter)) -> Vec<u8> {
    let separator = element_separator(pretty);
    let mut buf = Vec::with_capacity(1024);
    buf.extend_from_slice(separator);
    let mut w = JsonWriter::new(&mut buf, pretty);
    render(&mut w);
    if !pretty {
        return buf;
    }
    let mut indented = Vec::with_capacity(buf.len() + buf.len() / 8);
    indented.extend_from_slice(separator);
    indent(&buf[separator.len()..], indented)
}

/// The element of a [`separated_fragment`], without its separator.
pub fn separated_element(pretty: bool, separated: &[u8]) -> &[u8] {
    let separator = element_separator(pretty);
    debug_assert!(
        separated.starts_with(separator),
        "a separated fragment starts with its separator"
    );
    &separated[separator.len()..]
}

/// Appends `rendered` to `out`, indenting every line after the first by one level.
fn indent(rendered: &[u8], mut out: Vec<u8>) -> Vec<u8> {
    // JSON strings never contain raw newlines, so every newline is layout: indent it.
    for &b in rendered {
        out.push(b);
        if b == b'\n' {
            out.extend_from_slice(b"    ");
        }
    }
    out
}

/// Length of the JSON array [`write_array`] writes.
pub fn array_len<P: AsRef<[u8]>>(pretty: bool, parts: &[P]) -> usize {
    let elements: usize = parts.iter().map(|p| p.as_ref().len()).sum();
    match (pretty, parts.len()) {
        (false, 0) => 2,
        (true, 0) => 3,
        // "[" + elements + commas + "]"
        (false, n) => 2 + elements + (n - 1),
        // "[" + "\n    " before each + commas + "\n]" + "\n"
        (true, n) => 1 + elements + n * 5 + (n - 1) + 2 + 1,
    }
}

/// Length of the JSON array of [`separated_fragment`]s `separated` (the bare elements'
/// [`array_len`]), without stripping them first.
pub fn separated_array_len(pretty: bool, separated: &[&[u8]]) -> usize {
    if separated.is_empty() {
        return array_len::<&[u8]>(pretty, &[]);
    }
    let bytes: usize = separated.iter().map(|p| p.len()).sum();
    // The first element's separator gives way to the opening bracket (and its indentation).
    let (open, close): (&[u8], &[u8]) = if pretty {
        (b"[\n    ", b"\n]\n")
    } else {
        (b"[", b"]")
    };
    bytes - element_separator(pretty).len() + open.len() + close.len()
}

/// Writes a top-level JSON array of rendered elements exactly as [`JsonWriter`] would lay
/// out the same elements.
pub fn write_array<P: AsRef<[u8]>>(out: &mut Vec<u8>, pretty: bool, parts: &[P]) {
    out.reserve(array_len(pretty, parts));
    let finished = ArrayCursor::default().fill(parts, pretty, out, usize::MAX);
    debug_assert!(finished, "an unbounded fill writes the whole array");
}

/// How far a JSON array of rendered elements has been written: the one layout of
/// [`write_array`], resumable so [`StreamedArray`] can write it a chunk at a time.
#[derive(Default)]
struct ArrayCursor {
    opened: bool,
    next_part: usize,
    /// Whether the current part's separator was written.
    part_started: bool,
    offset_in_part: usize,
}

impl ArrayCursor {
    /// Appends the next bytes of the array of `parts` to `out` until it holds at least
    /// `chunk_bytes` (separators and the closing bracket may overshoot by a few bytes).
    /// Returns whether the array is complete; `parts` must be the same on every call.
    fn fill<P: AsRef<[u8]>>(
        &mut self,
        parts: &[P],
        pretty: bool,
        out: &mut Vec<u8>,
        chunk_bytes: usize,
    ) -> bool {
        if !self.opened {
            out.push(b'[');
            self.opened = true;
        }
        while self.next_part < parts.len() {
            if out.len() >= chunk_bytes {
                return false;
            }
            if !self.part_started {
                if self.next_part > 0 {
                    out.push(b',');
                }
                if pretty {
                    out.extend_from_slice(b"\n    ");
                }
                self.part_started = true;
            }
            let bytes = parts[self.next_part].as_ref();
            let room = chunk_bytes.saturating_sub(out.len());
            let take = room.min(bytes.len() - self.offset_in_part);
            out.extend_from_slice(&bytes[self.offset_in_part..self.offset_in_part + take]);
            self.offset_in_part += take;
            if self.offset_in_part == bytes.len() {
                self.next_part += 1;
                self.offset_in_part = 0;
                self.part_started = false;
            }
        }
        if pretty && !parts.is_empty() {
            out.push(b'\n');
        }
        out.push(b']');
        if pretty {
            out.push(b'\n');
        }
        true
    }
}

/// Answers at least this large are streamed in chunks ([`StreamedArray`]) instead of being
/// assembled whole in the connection's output buffer.
pub const STREAM_BODY_BYTES_MIN: usize = 64 * 1024;
/// Bytes one chunk of a streamed body fills before it is written: small enough to stay in
/// the core's cache and to bound each connection's buffer, large enough that a write moves
/// a useful amount.
pub const STREAM_CHUNK_BYTES: usize = 128 * 1024;

/// A rendering held by a row of the version a [`StreamedArray`] pins.
struct PinnedBytes {
    ptr: *const u8,
    len: usize,
}

impl AsRef<[u8]> for PinnedBytes {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: see `StreamedArray::new`: the pinned version keeps the bytes alive and
        // unchanged for as long as the array holding `self` exists.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A JSON array of rendered elements written out a chunk at a time, laid out exactly as
/// [`write_array`] lays it out (its length is [`array_len`] of the same parts).
///
/// Why: a large catalog answer assembled whole costs a fresh multi-megabyte buffer per
/// request, cold in every cache and page-faulted in; with many such answers in flight the
/// copies into and out of those buffers grow faster than the answers. Streamed, each
/// element is copied from the row's render cache (shared, warm) into the connection's
/// bounded buffer, and the socket reads from there.
pub struct StreamedArray {
    /// Keeps every part alive; never read.
    _version: StoreVersion,
    pretty: bool,
    parts: Vec<PinnedBytes>,
    /// Every part's bytes are preceded in memory by its [`element_separator`]
    /// ([`StreamedArray::separated`]).
    separated: bool,
    len: usize,
    cursor: ArrayCursor,
    written: usize,
}

impl StreamedArray {
    /// The array of `parts`, pinned by `version`.
    ///
    /// Every part must be a rendering held by a row reachable from `version` (as
    /// [`crate::store::catalog::render_cache::RenderCache`] hands them out): rows never
    /// change, a cache releases a rendering only when the row drops, and a row lives as long
    /// as any version that holds it. So the bytes stay valid while `version` is held here.
    pub fn new(version: &StoreVersion, pretty: bool, parts: Vec<&[u8]>) -> Self {
        let len = array_len(pretty, &parts);
        let parts = parts
            .into_iter()
            .map(|bytes| PinnedBytes {
                ptr: bytes.as_ptr(),
                len: bytes.len(),
            })
            .collect();
        StreamedArray {
            _version: version.clone(),
            pretty,
            parts,
            separated: false,
            len,
            cursor: ArrayCursor::default(),
            written: 0,
        }
    }

    /// The array of `separated` parts, each a [`separated_fragment`] held by a row reachable
    /// from `version` (the same pinning contract as [`StreamedArray::new`]). The body is the
    /// same bytes as of the bare elements; [`StreamedArray::next_pieces`] lists an element
    /// after the first together with its separator, as one piece.
    pub fn separated(version: &StoreVersion, pretty: bool, separated: Vec<&[u8]>) -> Self {
        let elements: Vec<&[u8]> = separated
            .into_iter()
            .map(|part| separated_element(pretty, part))
            .collect();
        let mut array = StreamedArray::new(version, pretty, elements);
        array.separated = true;
        array
    }

    /// The body's length in bytes, for `Content-Length`.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the next bytes to `out` until it holds at least `chunk_bytes` (separators may
    /// overshoot by a few bytes). Returns whether the body is complete.
    pub fn fill(&mut self, out: &mut Vec<u8>, chunk_bytes: usize) -> bool {
        let start = out.len();
        let done = self.cursor.fill(&self.parts, self.pretty, out, chunk_bytes);
        self.written += out.len() - start;
        if done {
            assert_eq!(self.written, self.len, "streamed body length as announced");
        }
        done
    }

    /// Lists the next pieces of the body as (pointer, length) pairs, at most `pieces_max` of
    /// them, without copying a byte: each element's rendering where the row's cache holds it,
    /// and the separators from static strings. A plain socket writes them with one `writev`,
    /// so a large answer is copied only by the kernel, as a pre-built body would be. The
    /// pointers stay valid while `self` lives (the pinned version keeps every part). Returns
    /// whether the body is complete; it must not be mixed with [`StreamedArray::fill`].
    pub fn next_pieces(&mut self, pieces: &mut Vec<(*const u8, usize)>, pieces_max: usize) -> bool {
        assert!(pieces_max >= 2, "room for a separator and an element");
        debug_assert!(
            self.cursor.offset_in_part == 0 && !self.cursor.part_started,
            "pieces never start inside an element"
        );
        let mut push = |bytes: &[u8], written: &mut usize| {
            pieces.push((bytes.as_ptr(), bytes.len()));
            *written += bytes.len();
        };
        let mut listed = 0;
        if self.parts.is_empty() {
            if !self.cursor.opened {
                self.cursor.opened = true;
                push(if self.pretty { b"[]\n" } else { b"[]" }, &mut self.written);
            }
            assert_eq!(self.written, self.len, "streamed body length as announced");
            return true;
        }
        while self.cursor.next_part < self.parts.len() && listed + 2 <= pieces_max {
            let first = self.cursor.next_part == 0;
            let separator: &'static [u8] = match (self.pretty, first) {
                (false, true) => b"[",
                (true, true) => b"[\n    ",
                (pretty, false) => element_separator(pretty),
            };
            self.cursor.opened = true;
            let element = self.parts[self.cursor.next_part].as_ref();
            if self.separated && !first {
                // SAFETY: `separated` parts are preceded by their separator inside the same
                // pinned rendering (`StreamedArray::separated`), which `self` keeps alive.
                let whole = unsafe {
                    std::slice::from_raw_parts(
                        element.as_ptr().sub(separator.len()),
                        separator.len() + element.len(),
                    )
                };
                debug_assert!(whole.starts_with(separator));
                push(whole, &mut self.written);
                listed += 1;
            } else {
                push(separator, &mut self.written);
                push(element, &mut self.written);
                listed += 2;
            }
            self.cursor.next_part += 1;
        }
        if self.cursor.next_part < self.parts.len() || listed + 1 > pieces_max {
            return false;
        }
        push(if self.pretty { b"\n]\n" } else { b"]" }, &mut self.written);
        assert_eq!(self.written, self.len, "streamed body length as announced");
        true
    }

    /// Appends the whole remaining body to `out`, for paths that cannot stream.
    pub fn fill_all(&mut self, out: &mut Vec<u8>) {
        out.reserve(self.len - self.written);
        while !self.fill(out, usize::MAX) {}
    }
}

/// Renders one row compactly and parses it back, for `?filter` evaluation.
pub fn as_value(render: impl FnOnce(&mut JsonWriter)) -> serde_json::Value {
    let mut buf = Vec::with_capacity(512);
    let mut w = JsonWriter::new(&mut buf, false);
    render(&mut w);
    w.finish();
    serde_json::from_slice(&buf).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes `next_pieces` lists, `pieces_max` at a time.
    fn gathered(mut array: StreamedArray, pieces_max: usize) -> Vec<u8> {
        let mut body = Vec::new();
        let mut pieces = Vec::new();
        let mut calls = 0;
        loop {
            pieces.clear();
            let done = array.next_pieces(&mut pieces, pieces_max);
            assert!(pieces.len() <= pieces_max);
            for &(ptr, len) in &pieces {
                // SAFETY: `array` is alive and pins every piece.
                body.extend_from_slice(unsafe { std::slice::from_raw_parts(ptr, len) });
            }
            calls += 1;
            assert!(calls < 10_000, "next_pieces makes progress");
            if done {
                return body;
            }
        }
    }

    #[test]
    fn pieces_spell_the_whole_array_at_every_batch_size() {
        let version: StoreVersion = std::sync::Arc::new(crate::store::Tables::default());
        for count in [0usize, 1, 2, 7] {
            let held: Vec<Vec<u8>> = (0..count)
                .map(|i| format!("{{\"N\":{i},\"Pad\":\"{}\"}}", "x".repeat(i * 3)).into_bytes())
                .collect();
            for pretty in [false, true] {
                let mut whole = Vec::new();
                write_array(&mut whole, pretty, &held);
                assert_eq!(whole.len(), array_len(pretty, &held));
                for pieces_max in [2, 3, 4, 5, 1024] {
                    let parts: Vec<&[u8]> = held.iter().map(|p| p.as_slice()).collect();
                    let array = StreamedArray::new(&version, pretty, parts);
                    assert_eq!(
                        gathered(array, pieces_max),
                        whole,
                        "{count} parts, pretty {pretty}, {pieces_max} pieces per batch"
                    );
                }
            }
        }
    }

    #[test]
    fn separated_parts_spell_the_same_array_in_fewer_pieces() {
        let version: StoreVersion = std::sync::Arc::new(crate::store::Tables::default());
        for count in [0usize, 1, 2, 7] {
            for pretty in [false, true] {
                let render = |i: usize| {
                    move |w: &mut JsonWriter| {
                        w.begin_object();
                        w.field_u64("N", i as u64);
                        w.field_str("Pad", &"x".repeat(i * 3));
                        w.end_object();
                    }
                };
                let bare: Vec<Vec<u8>> = (0..count).map(|i| fragment(pretty, render(i))).collect();
                let held: Vec<Vec<u8>> = (0..count)
                    .map(|i| separated_fragment(pretty, render(i)))
                    .collect();
                for (b, h) in bare.iter().zip(&held) {
                    assert_eq!(separated_element(pretty, h), &b[..]);
                }
                let mut whole = Vec::new();
                write_array(&mut whole, pretty, &bare);
                let separated: Vec<&[u8]> = held.iter().map(|p| p.as_slice()).collect();
                assert_eq!(separated_array_len(pretty, &separated), whole.len());
                for pieces_max in [2, 3, 4, 5, 1024] {
                    let parts: Vec<&[u8]> = held.iter().map(|p| p.as_slice()).collect();
                    let array = StreamedArray::separated(&version, pretty, parts);
                    assert_eq!(array.len(), whole.len());
                    assert_eq!(
                        gathered(array, pieces_max),
                        whole,
                        "{count} parts, pretty {pretty}, {pieces_max} pieces per batch"
                    );
                }
                // One piece per element plus the opening and closing brackets.
                let parts: Vec<&[u8]> = held.iter().map(|p| p.as_slice()).collect();
                let mut array = StreamedArray::separated(&version, pretty, parts);
                let mut pieces = Vec::new();
                assert!(array.next_pieces(&mut pieces, 1024));
                assert_eq!(pieces.len(), if count == 0 { 1 } else { count + 2 });
                let parts: Vec<&[u8]> = held.iter().map(|p| p.as_slice()).collect();
                let mut flat = Vec::new();
                StreamedArray::separated(&version, pretty, parts).fill_all(&mut flat);
                assert_eq!(flat, whole);
            }
        }
    }

    #[test]
    fn streamed_array_matches_the_whole_array_at_every_chunk_size() {
        let version: StoreVersion = std::sync::Arc::new(crate::store::Tables::default());
        let held: Vec<Vec<u8>> = (0..7)
            .map(|i| format!("{{\"Element\":{i},\"Pad\":\"{}\"}}", "x".repeat(i * 13)))
            .map(String::into_bytes)
            .collect();
        for pretty in [false, true] {
            for count in [0, 1, 7] {
                let parts = || -> Vec<&[u8]> { held[..count].iter().map(|p| &p[..]).collect() };
                // The layout JsonWriter gives a top-level array, spelled out independently.
                let whole: Vec<u8> = match (pretty, count) {
                    (false, _) => [b"[".to_vec(), parts().join(&b","[..]), b"]".to_vec()].concat(),
                    (true, 0) => b"[]\n".to_vec(),
                    (true, _) => {
                        let indented: Vec<Vec<u8>> = parts()
                            .iter()
                            .map(|p| [&b"\n    "[..], p].concat())
                            .collect();
                        [b"[".to_vec(), indented.join(&b","[..]), b"\n]\n".to_vec()].concat()
                    }
                };
                let mut written = Vec::new();
                write_array(&mut written, pretty, &parts());
                assert_eq!(written, whole, "write_array pretty={pretty} count={count}");
                assert_eq!(array_len(pretty, &parts()), whole.len());
                for chunk_bytes in [1, 2, 5, 16, 64, 1 << 20] {
                    let mut streamed = StreamedArray::new(&version, pretty, parts());
                    assert_eq!(streamed.len(), whole.len());
                    let mut out = Vec::new();
                    let mut chunks = 0;
                    loop {
                        let mut chunk = Vec::new();
                        let done = streamed.fill(&mut chunk, chunk_bytes);
                        // Separators and the closing bracket may overshoot a little.
                        assert!(chunk.len() <= chunk_bytes.max(1) + 6, "chunk bounded");
                        out.extend_from_slice(&chunk);
                        chunks += 1;
                        assert!(chunks <= whole.len() + 2, "fill makes progress");
                        if done {
                            break;
                        }
                    }
                    assert_eq!(
                        out, whole,
                        "pretty={pretty} count={count} chunk={chunk_bytes}"
                    );
                }
                let mut flat = Vec::new();
                StreamedArray::new(&version, pretty, parts()).fill_all(&mut flat);
                assert_eq!(flat, whole);
            }
        }
    }
    use crate::store::catalog::{CatalogOp, CheckRegistration, Registration, ServiceRegistration};
    use crate::store::{Command, Tables};

    #[test]
    fn cached_fragments_render_exactly_like_direct_rendering() {
        let mut tables = Tables::default();
        let mut changes = Vec::new();
        for i in 0..3 {
            let reg = Registration {
                node: format!("n{i}"),
                address: "10.0.0.1".into(),
                datacenter: "dc1".into(),
                node_meta: vec![("k".into(), "v".into())],
                service: Some(ServiceRegistration {
                    id: format!("web-{i}"),
                    name: "web".into(),
                    tags: vec!["a\"quoted\"".into()],
                    port: 80,
                    ..Default::default()
                }),
                checks: vec![CheckRegistration {
                    check_id: format!("c{i}"),
                    name: "multi\nline".into(),
                    status: "passing".into(),
                    service_id: format!("web-{i}"),
                    ..Default::default()
                }],
                ..Default::default()
            };
            tables.apply(
                i + 1,
                &Command::Catalog(CatalogOp::Register(Box::new(reg))),
                &mut changes,
            );
        }
        let group = tables.catalog.group("web").unwrap();
        for pretty in [false, true] {
            let mut direct = Vec::new();
            let mut w = JsonWriter::new(&mut direct, pretty);
            w.begin_array();
            for row in crate::store::catalog::read::check_service_nodes_of_group(group) {
                check_service_node(&mut w, &row);
            }
            w.end_array();
            w.finish();
            let mut cached = Vec::new();
            let mut w = JsonWriter::new(&mut cached, pretty);
            w.begin_array();
            for row in crate::store::catalog::read::check_service_nodes_of_group(group) {
                w.raw_element(&fragment(pretty, |w| check_service_node(w, &row)));
            }
            w.end_array();
            w.finish();
            assert_eq!(
                String::from_utf8(cached).unwrap(),
                String::from_utf8(direct).unwrap()
            );
        }
    }
}
