//! The module layering of `src/`, enforced.
//!
//! Reads every Rust file under `src/`, removes comments and literals, and collects each path
//! that leaves its top-level module: `crate::m::…` (and `crate::{m::…, …}`), and `super::`
//! chains that climb to the crate root. Each edge must be one that [`LAYERS`] allows, and
//! the edges must form no cycle among the top-level modules. The pure layers ([`PURE`]) must
//! not touch sockets, files, threads, the clock, entropy or a runtime outside their test
//! modules. Every failure names the file and line, the edge or use, and the rule.
//!
//! Inside `api` the modules form no cycle either (vocabulary → handlers → routes → server),
//! but for the client-agent paths [`API_CYCLE_EXCUSED`] names.
//!
//! The table here, `src/lib.rs`'s layer list and ARCHITECTURE.md's code map describe the
//! same layering; change them together.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Each top-level module of `src/`, bottom layer first, with the modules it may use. A new
/// module must be placed here before it builds.
#[rustfmt::skip]
const LAYERS: &[(&str, &[&str])] = &[
    // Wire formats only.
    ("proto",   &[]),
    // The replicated state: tables, apply, change sets, snapshots. Pure.
    ("store",   &["proto"]),
    // Consensus and membership cores. Pure.
    ("raft",    &["proto"]),
    ("gossip",  &["proto"]),
    // The raft thread's decisions over the consensus core and the store. Pure.
    ("replica", &["proto", "store", "raft"]),
    // Consul's shapes: JSON, body decoding, ?filter, definitions, metrics. Pure.
    ("consul",  &["proto", "store"]),
    // Flags and config files merged into the agent's configuration.
    ("config",  &["proto", "store", "consul"]),
    // Certificates, rustls configurations per protocol, the TLS stream over monoio.
    ("tls",     &["proto", "config"]),
    // The process-wide metric recorders and their registry, named by Consul's catalogue:
    // the only runtime layer that uses `consul`.
    ("telemetry", &["consul"]),
    // The agent's `log` backend in Consul's format, its log file and rotation, `monitor`'s
    // subscribers.
    ("logging", &["config"]),
    // The runtime: shard threads, channels, store versions, watches, the raft thread.
    ("shard",   &["proto", "store", "raft", "replica", "config", "tls", "telemetry"]),
    // Gossip driver, pools, server discovery, member reconcile, user events.
    ("cluster", &["proto", "store", "gossip", "consul", "config", "telemetry", "shard"]),
    // DNS resolution, its socket loops, and a client agent's protocol with its servers
    // (Consul's prepared query calls in `consul`'s shapes).
    ("dns",     &["proto", "store", "consul", "config", "telemetry", "shard", "cluster"]),
    // The HTTP API: routing table, handlers, server loop; serves `dns::remote` on servers.
    ("api",     &["proto", "store", "gossip", "replica", "consul", "config", "tls", "telemetry",
                  "logging", "shard", "cluster", "dns"]),
    // Local services and checks, runners, anti-entropy, agent endpoint work.
    ("agent",   &["proto", "store", "gossip", "replica", "consul", "config", "tls", "telemetry",
                  "logging", "shard", "cluster", "api"]),
    // The gRPC server: Envoy's xDS from store versions and the agent's answers, and the
    // cluster peering stream (its endpoint's certificate is signed with `tls`'s Connect CA).
    ("xds",     &["proto", "store", "consul", "api", "tls"]),
    // The built-in mTLS proxy: a data plane fed by its agent over HTTP.
    ("proxy",   &["proto", "tls"]),
    // Start-up wiring: the only module that imports every layer.
    ("node",    &["proto", "store", "raft", "gossip", "replica", "consul", "config", "tls", "shard",
                  "cluster", "api", "dns", "agent", "xds"]),
    // Operator commands.
    ("cli",     &["proto", "gossip", "consul", "config", "tls", "logging", "shard", "api", "agent",
                  "proxy", "node", "xds"]),
];

/// Layers that do no I/O, read no clock, draw no entropy and start no thread: time, bytes
/// and seeds come in as arguments.
const PURE: &[&str] = &["proto", "store", "raft", "gossip", "replica", "consul"];

/// What a pure layer must not use outside its test modules, and what it does.
const IMPURE: &[(&str, &str)] = &[
    ("std::fs", "does file I/O"),
    ("std::thread", "uses threads"),
    ("std::process", "runs processes"),
    ("std::env", "reads the process environment"),
    ("TcpStream", "opens sockets"),
    ("TcpListener", "opens sockets"),
    ("UdpSocket", "opens sockets"),
    ("ToSocketAddrs", "resolves names"),
    ("to_socket_addrs", "resolves names"),
    ("Instant::now", "reads the clock"),
    ("SystemTime::now", "reads the clock"),
    ("monoio", "uses the runtime"),
    ("tokio", "uses a runtime"),
    ("flume", "uses channels between threads"),
    ("thread_local", "keeps per-thread state"),
    ("libc", "makes system calls"),
    ("socket2", "opens sockets"),
    ("core_affinity", "pins threads"),
    ("rand::random", "draws entropy (seed a generator instead)"),
    ("rand::rng", "draws entropy (seed a generator instead)"),
    ("thread_rng", "draws entropy (seed a generator instead)"),
    ("OsRng", "draws entropy (seed a generator instead)"),
    ("from_entropy", "draws entropy (seed a generator instead)"),
    ("from_os_rng", "draws entropy (seed a generator instead)"),
    ("OnceLock", "keeps process-wide state"),
    ("LazyLock", "keeps process-wide state"),
    ("println", "writes to standard output"),
    ("eprintln", "writes to standard error"),
];

/// Precise exceptions to [`IMPURE`] outside inline test modules: (file, use, reason).
#[rustfmt::skip]
const IMPURE_ALLOWED: &[(&str, &str, &str)] = &[
    // A test file of its own: on request it rewrites the pinned snapshot fixture it compares
    // against, so a compatible format change is one deliberate command.
    ("src/store/catalog/tests.rs", "std::env", "regenerates the pinned snapshot fixture"),
    ("src/store/catalog/tests.rs", "std::fs", "regenerates the pinned snapshot fixture"),
];

#[test]
fn every_crate_path_follows_the_layers() {
    let sources = read_sources();
    let modules: BTreeSet<&str> = sources.iter().filter_map(|s| s.module.as_deref()).collect();
    let declared: BTreeSet<&str> = LAYERS.iter().map(|(module, _)| *module).collect();
    assert_eq!(
        modules, declared,
        "src/'s top-level modules and tests/layers.rs's LAYERS must name the same modules: \
         place a new module in a layer"
    );
    let mut violations = String::new();
    for source in &sources {
        for edge in edges(source) {
            if let Err(rule) = allowed(&edge) {
                let _ = writeln!(
                    violations,
                    "{}:{}: `{}` makes {} use {}: {rule}",
                    source.display, edge.line, edge.path, edge.from, edge.to
                );
            }
        }
    }
    assert!(violations.is_empty(), "layer violations:\n{violations}");
}

#[test]
fn the_top_level_modules_form_no_cycle() {
    let sources = read_sources();
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for source in &sources {
        for edge in edges(source) {
            graph
                .entry(edge.from.clone())
                .or_default()
                .entry(edge.to.clone())
                .or_insert_with(|| format!("{}:{} `{}`", source.display, edge.line, edge.path));
        }
    }
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "the top-level modules import each other in a cycle:\n{}",
            cycle_text(&graph, &cycle)
        );
    }
}

/// Edges inside `api` that still close a cycle, each named with why: a handler reaching its
/// client-agent variant in `api::rpc` (whose server side sits above the handlers). Consul's
/// RPC work (issue #36) moves the client paths out of `rpc`; shrink this list as it does.
const API_CYCLE_EXCUSED: &[(&str, &str, &str)] = &[
    (
        "catalog",
        "rpc",
        "a client agent's catalog reads (rpc::client_catalog)",
    ),
    (
        "health",
        "rpc",
        "a client agent's health reads (rpc::client_catalog)",
    ),
    ("kv", "rpc", "a client agent's KV reads (rpc::client)"),
    (
        "keyring",
        "rpc",
        "the keyring through a server, Internal.KeyringOperation (rpc::keyring)",
    ),
    (
        "query",
        "rpc",
        "a client agent's prepared queries, and a failover's remote answers (rpc::client)",
    ),
    (
        "session",
        "rpc",
        "a client agent's session calls (rpc::client_session)",
    ),
    (
        "txn",
        "rpc",
        "a client agent's transactions (rpc::client_txn)",
    ),
    (
        "status",
        "rpc",
        "a client agent's status calls (rpc::client)",
    ),
    (
        "routes",
        "rpc",
        "which routes a client agent forwards (rpc::client)",
    ),
    (
        "config",
        "rpc",
        "a client agent's config entry calls (rpc::client_config)",
    ),
    (
        "acl",
        "rpc",
        "a client agent's tokens, policies and roles (rpc::client_acl)",
    ),
    (
        "connect",
        "rpc",
        "a client agent's CA configuration calls (rpc::client_operator)",
    ),
    (
        "operator",
        "rpc",
        "a client agent's operator calls (rpc::client_operator)",
    ),
    (
        "intentions",
        "rpc",
        "a client agent's intention calls (rpc::client_intention)",
    ),
    (
        "event",
        "rpc",
        "a user event fired in another datacenter (rpc::event)",
    ),
    (
        "gateways",
        "rpc",
        "a client agent's gateway-services reads (rpc::client_catalog)",
    ),
    (
        "coordinate",
        "rpc",
        "a client agent's coordinate datacenters (rpc::client_internal)",
    ),
    (
        "federation_state",
        "rpc",
        "a client agent's federation-state reads (rpc::client_internal)",
    ),
    (
        "ui",
        "rpc",
        "a client agent's UI node reads (rpc::client_internal)",
    ),
    (
        "peering",
        "rpc",
        "a client agent's peering calls (rpc::client_peering)",
    ),
    (
        "snapshot",
        "rpc",
        "a client agent's and a follower's snapshots (rpc::snapshot)",
    ),
];

/// The modules inside `api` (a file or a folder each; `mod.rs` is the vocabulary every
/// module may use) with the `api` modules each one names: `super::x` from a file directly
/// in `api`, `super::super::x` one folder down, `crate::api::x` anywhere. Test modules are
/// left out.
fn api_graph(sources: &[Source]) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for source in sources {
        let Some(relative) = source.display.strip_prefix("src/api/") else {
            continue;
        };
        let module = relative
            .split('/')
            .next()
            .expect("a path")
            .trim_end_matches(".rs")
            .to_string();
        if module == "mod" {
            continue;
        }
        let tokens = tokenize(&without_test_modules(&source.code));
        let climbs_to_api = source.depth - 1;
        let mut i = 0;
        while i < tokens.len() {
            let mut names = Vec::new();
            let mut next = i + 1;
            if tokens[i].1 == "crate"
                && tokens.get(i + 1).is_some_and(|t| t.1 == "::")
                && tokens.get(i + 2).is_some_and(|t| t.1 == "api")
                && tokens.get(i + 3).is_some_and(|t| t.1 == "::")
            {
                names = first_segments(&tokens, i + 4);
                next = i + 4;
            } else if tokens[i].1 == "super" {
                let mut climbs = 0;
                let mut j = i;
                while tokens.get(j).is_some_and(|t| t.1 == "super")
                    && tokens.get(j + 1).is_some_and(|t| t.1 == "::")
                {
                    climbs += 1;
                    j += 2;
                }
                if climbs == climbs_to_api {
                    names = first_segments(&tokens, j);
                }
                next = j.max(i + 1);
            }
            for name in names {
                let known = sources.iter().any(|s| {
                    s.display == format!("src/api/{name}.rs")
                        || s.display == format!("src/api/{name}/mod.rs")
                });
                if known && name != module {
                    graph
                        .entry(module.clone())
                        .or_default()
                        .entry(name)
                        .or_insert_with(|| format!("{}:{}", source.display, tokens[i].0));
                }
            }
            i = next;
        }
    }
    graph
}

#[test]
fn the_modules_inside_api_form_no_cycle() {
    let sources = read_sources();
    let mut graph = api_graph(&sources);
    for (from, to, why) in API_CYCLE_EXCUSED {
        let edges = graph.get_mut(*from);
        assert!(
            edges.and_then(|e| e.remove(*to)).is_some(),
            "API_CYCLE_EXCUSED names {from} -> {to} ({why}), which no longer exists: remove it"
        );
    }
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "modules inside api import each other in a cycle:\n{}",
            cycle_text(&graph, &cycle)
        );
    }
    // The vocabulary stays below everything: it names no handler, no route, no server.
    const VOCABULARY: &[&str] = &["authz", "context", "agent_channel", "client_tokens"];
    for vocabulary in VOCABULARY {
        let uses: Vec<&String> = graph
            .get(*vocabulary)
            .map(|edges| edges.keys().collect())
            .unwrap_or_default();
        let above: Vec<&&String> = uses
            .iter()
            .filter(|m| !VOCABULARY.contains(&m.as_str()) && m.as_str() != "rpc")
            .collect();
        assert!(
            above.is_empty(),
            "api::{vocabulary} is vocabulary but uses {above:?}"
        );
    }
}

#[test]
fn the_allowed_layers_form_no_cycle_and_name_known_modules() {
    let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let known: BTreeSet<&str> = LAYERS.iter().map(|(module, _)| *module).collect();
    for (position, (module, uses)) in LAYERS.iter().enumerate() {
        for used in *uses {
            assert!(
                known.contains(used),
                "LAYERS: {module} may use unknown module {used}"
            );
            let below = LAYERS[..position].iter().any(|(m, _)| m == used);
            assert!(
                below,
                "LAYERS: {module} may use {used}, which is not listed below it"
            );
            graph
                .entry(module.to_string())
                .or_default()
                .insert(used.to_string(), String::new());
        }
    }
    assert_eq!(find_cycle(&graph), None, "LAYERS itself has a cycle");
}

#[test]
fn the_pure_layers_do_no_io_read_no_clock_and_start_no_thread() {
    let mut violations = String::new();
    for source in read_sources() {
        let Some(module) = source.module.as_deref() else {
            continue;
        };
        if !PURE.contains(&module) {
            continue;
        }
        for (line, found, why) in impure_uses(&source.code) {
            let excused = IMPURE_ALLOWED
                .iter()
                .any(|(file, what, _)| *file == source.display && *what == found);
            if !excused {
                let _ = writeln!(
                    violations,
                    "{}:{line}: `{found}` {why}, and {module} is a pure layer \
                     (tests/layers.rs PURE; a precise exception goes in IMPURE_ALLOWED)",
                    source.display
                );
            }
        }
    }
    assert!(
        violations.is_empty(),
        "impure code in pure layers:\n{violations}"
    );
}

/// Layers that reach servers only through Consul's typed calls (issue #36): outside their
/// test modules they parse no HTTP, write no HTTP request text and send no forwarded-HTTP
/// frames (which no longer exist; the marks keep them from coming back).
const NO_HTTP: &[&str] = &["agent", "cluster", "dns", "shard"];

/// Files of those layers whose HTTP is their job, not a way to reach a server: the HTTP
/// health check runner speaks HTTP to the checked service.
const NO_HTTP_EXEMPT: &[&str] = &["src/agent/checks/http.rs"];

/// What those layers must not name, and what naming it means.
const HTTP_MARKS: &[(&str, &str)] = &[
    ("httparse", "parses HTTP"),
    ("FORWARD_HTTP", "sends an HTTP request in praetor's frames"),
    (
        "FORWARD_HTTP_RESPONSE",
        "reads an HTTP answer from praetor's frames",
    ),
];

/// Where `raw` (a file's text) names an [`HTTP_MARKS`] item or holds HTTP request text,
/// outside comments and test modules: `(line, what)`.
fn http_uses(raw: &str) -> Vec<(usize, &'static str)> {
    let code = without_test_modules(&strip(raw));
    let mut found: Vec<(usize, &'static str)> = tokenize(&code)
        .into_iter()
        .filter_map(|(line, token)| {
            HTTP_MARKS
                .iter()
                .find(|(mark, _)| *mark == token)
                .map(|(mark, _)| (line, *mark))
        })
        .collect();
    // Request text lives in string literals, which `strip` blanks: the raw lines are read
    // for it, less comments and test modules.
    for (index, line) in without_test_modules(raw).lines().enumerate() {
        if !line.trim_start().starts_with("//") && line.contains("HTTP/1.") {
            found.push((index + 1, "HTTP/1."));
        }
    }
    found.sort_unstable();
    found
}

#[test]
fn the_typed_call_layers_write_and_parse_no_http() {
    let mut violations = String::new();
    for source in read_sources() {
        let Some(module) = source.module.as_deref() else {
            continue;
        };
        if !NO_HTTP.contains(&module) || NO_HTTP_EXEMPT.contains(&source.display.as_str()) {
            continue;
        }
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(&source.display);
        let raw = std::fs::read_to_string(&path).expect("a source file reads");
        for (line, what) in http_uses(&raw) {
            let why = HTTP_MARKS
                .iter()
                .find(|(mark, _)| *mark == what)
                .map_or("writes HTTP request text", |(_, why)| why);
            let _ = writeln!(
                violations,
                "{}:{line}: `{what}` {why}, and {module} reaches servers only through typed \
                 calls (tests/layers.rs NO_HTTP)",
                source.display
            );
        }
    }
    assert!(
        violations.is_empty(),
        "HTTP in layers that speak typed calls:\n{violations}"
    );
}

#[test]
fn the_scanner_flags_http_outside_comments_and_test_modules() {
    let found = http_uses(
        "use httparse::Response;\n\
         // a comment may say HTTP/1.1 and httparse\n\
         fn send() { call(kind::FORWARD_HTTP, b\"GET / HTTP/1.1\\r\\n\"); }\n\
         fn read(k: u8) -> bool { k == kind::FORWARD_HTTP_RESPONSE }\n\
         #[cfg(test)]\nmod tests { fn t() { let _ = \"PUT /x HTTP/1.1\"; httparse::EMPTY_HEADER; } }\n",
    );
    assert_eq!(
        found,
        vec![
            (1, "httparse"),
            (3, "FORWARD_HTTP"),
            (3, "HTTP/1."),
            (4, "FORWARD_HTTP_RESPONSE"),
        ]
    );
}

// The checks above are only as good as the scanner; these make sure it sees what it must.

#[test]
fn the_scanner_finds_crate_paths_groups_and_climbing_super_chains() {
    let source = Source::synthetic(
        "src/store/catalog/apply.rs",
        "use crate::api::Reply;\n\
         use crate::{proto::http, shard::{self, Shard}, CONSUL_API_VERSION};\n\
         fn f() { let _ = crate :: dns::x(); }\n\
         mod tests { use super::super::super::super::agent::Agent; use super::super::rows::X; }\n",
    );
    let found: Vec<(String, usize)> = edges(&source).map(|e| (e.to, e.line)).collect();
    let expected = [
        ("api", 1),
        ("proto", 2),
        ("shard", 2),
        ("dns", 3),
        ("agent", 4),
    ];
    let expected: Vec<(String, usize)> = expected
        .iter()
        .map(|(m, line)| (m.to_string(), *line))
        .collect();
    assert_eq!(found, expected);
}

#[test]
fn the_scanner_ignores_comments_strings_and_chars() {
    let source = Source::synthetic(
        "src/raft/core.rs",
        "// crate::api in a comment\n\
         /* crate::api /* nested */ crate::agent */\n\
         /// [`crate::shard`] in docs\n\
         const A: &str = \"crate::api\";\n\
         const B: &str = r#\"crate::\"api\"#;\n\
         const C: char = '\"'; fn f<'a>(x: &'a str) -> &'a str { x }\n\
         const D: &[u8] = b\"std::fs\";\n",
    );
    assert_eq!(edges(&source).count(), 0);
    assert!(impure_uses(&source.code).is_empty());
}

#[test]
fn the_scanner_flags_forbidden_edges_and_impure_uses() {
    let upward = Source::synthetic("src/consul/x.rs", "use crate::api::Context;\n");
    let edge = edges(&upward).next().expect("an edge");
    let rule = allowed(&edge).expect_err("consul may not use api");
    assert!(rule.contains("consul may use only"), "{rule}");

    let code = strip(
        "use std::{collections::HashMap, fs};\n\
         fn now() { let _ = std::time::Instant::now(); std::thread::spawn(|| {}); }\n\
         #[cfg(test)]\nmod tests { fn t() { std::fs::read(\"x\"); } }\n\
         #[cfg(test)]\nfn helper() { let _ = rand::random::<u64>(); }\n\
         static NAMES: &[&'static str] = &[\"a\"];\n\
         static COUNT: std::sync::atomic::AtomicU64 = AtomicU64::new(0);\n\
         static mut RAW: u64 = 0;\n\
         static SERIES: OnceLock<Vec<u8>> = OnceLock::new();\n",
    );
    let found: Vec<(usize, &str)> = impure_uses(&code)
        .into_iter()
        .map(|(line, what, _)| (line, what))
        .collect();
    assert_eq!(
        found,
        vec![
            (1, "std::fs"),
            (2, "Instant::now"),
            (2, "std::thread"),
            (6, "rand::random"),
            (8, "static"),
            (9, "static"),
            (10, "OnceLock"),
            (10, "OnceLock"),
        ],
        "test modules are exempt, other test-only items are not; constant statics are pure"
    );
}

/// One file of `src/`, its top-level module, and its code without comments or literals.
struct Source {
    display: String,
    /// The top-level module the file belongs to; `None` for `lib.rs` and `main.rs`.
    module: Option<String>,
    /// Module depth of the file itself: 1 for `src/api/mod.rs`, 2 for `src/api/kv.rs`.
    depth: usize,
    code: String,
}

impl Source {
    fn new(display: String, text: &str) -> Source {
        let relative = display.strip_prefix("src/").expect("a file under src/");
        let mut parts: Vec<&str> = relative.split('/').collect();
        let file = parts.pop().expect("a file name");
        let module_of_file = match file {
            "mod.rs" | "lib.rs" | "main.rs" => None,
            name => Some(name.strip_suffix(".rs").expect("a Rust file")),
        };
        let depth = parts.len() + usize::from(module_of_file.is_some());
        let module = parts
            .first()
            .copied()
            .or(module_of_file)
            .map(str::to_string);
        Source {
            display,
            module,
            depth,
            code: strip(text),
        }
    }

    fn synthetic(display: &str, text: &str) -> Source {
        Source::new(display.to_string(), text)
    }
}

fn read_sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    collect_rust_files(&root.join("src"), &mut files);
    assert!(
        files.len() > 50,
        "found only {} files under src/",
        files.len()
    );
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("readable source");
            let display = path
                .strip_prefix(root)
                .expect("under the manifest dir")
                .to_string_lossy()
                .replace('\\', "/");
            Source::new(display, &text)
        })
        .collect()
}

fn collect_rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("readable directory")
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A path from one top-level module into another.
#[derive(Debug)]
struct Edge {
    from: String,
    to: String,
    line: usize,
    /// The path as written, up to the module it names.
    path: String,
}

fn allowed(edge: &Edge) -> Result<(), String> {
    let (_, uses) = LAYERS
        .iter()
        .find(|(module, _)| *module == edge.from)
        .ok_or_else(|| format!("{} is not in LAYERS", edge.from))?;
    if uses.contains(&edge.to.as_str()) {
        return Ok(());
    }
    let rule = if uses.is_empty() {
        format!("{} may use no other module", edge.from)
    } else {
        format!("{} may use only {}", edge.from, uses.join(", "))
    };
    Err(format!("{rule} (tests/layers.rs LAYERS)"))
}

/// The edges leaving `source`'s top-level module.
fn edges(source: &Source) -> impl Iterator<Item = Edge> + '_ {
    let tokens = tokenize(&source.code);
    let mut found = Vec::new();
    // Inline modules (`mod tests { … }`) deepen the module path until their brace closes.
    let mut inline_modules: Vec<usize> = Vec::new();
    let mut braces = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let (line, token) = (tokens[i].0, tokens[i].1.as_str());
        match token {
            "{" => braces += 1,
            "}" => {
                if inline_modules.last() == Some(&braces) {
                    inline_modules.pop();
                }
                braces = braces.saturating_sub(1);
            }
            "mod" if tokens.get(i + 2).is_some_and(|t| t.1 == "{") => {
                inline_modules.push(braces + 1);
            }
            "crate" if tokens.get(i + 1).is_some_and(|t| t.1 == "::") => {
                for name in first_segments(&tokens, i + 2) {
                    found.push((line, "crate".to_string(), name));
                }
            }
            "super" if tokens.get(i + 1).is_some_and(|t| t.1 == "::") => {
                let mut climbs = 0;
                let mut j = i;
                while tokens.get(j).is_some_and(|t| t.1 == "super")
                    && tokens.get(j + 1).is_some_and(|t| t.1 == "::")
                {
                    climbs += 1;
                    j += 2;
                }
                if climbs == source.depth + inline_modules.len() {
                    let prefix = "super::".repeat(climbs);
                    for name in first_segments(&tokens, j) {
                        found.push((line, prefix.trim_end_matches("::").to_string(), name));
                    }
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    let from = source.module.clone();
    found.into_iter().filter_map(move |(line, root, name)| {
        let from = from.clone()?;
        let is_module = LAYERS.iter().any(|(module, _)| *module == name);
        // Items of the crate root (`CONSUL_API_VERSION`) belong to no layer.
        (is_module && name != from).then(|| Edge {
            path: format!("{root}::{name}"),
            from,
            to: name,
            line,
        })
    })
}

/// The first segment of the path starting at token `at`: one name, or every item of a
/// `{…}` group.
fn first_segments(tokens: &[(usize, String)], at: usize) -> Vec<String> {
    let Some((_, token)) = tokens.get(at) else {
        return Vec::new();
    };
    if token != "{" {
        return vec![token.clone()];
    }
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut expecting_item = true;
    for (_, token) in &tokens[at..] {
        match token.as_str() {
            "{" => {
                depth += 1;
                expecting_item = depth == 1;
            }
            "}" => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            "," if depth == 1 => expecting_item = true,
            name if expecting_item && depth == 1 => {
                if name != "self" {
                    names.push(name.to_string());
                }
                expecting_item = false;
            }
            _ => {}
        }
    }
    names
}

/// Identifiers, `::`, braces and other punctuation, each with its line.
fn tokenize(code: &str) -> Vec<(usize, String)> {
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut chars = code.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c == '\n' {
            line += 1;
        } else if c.is_alphabetic() || c == '_' {
            let mut end = start + c.len_utf8();
            while let Some(&(i, d)) = chars.peek() {
                if !(d.is_alphanumeric() || d == '_') {
                    break;
                }
                end = i + d.len_utf8();
                chars.next();
            }
            tokens.push((line, code[start..end].to_string()));
        } else if c == ':' && chars.peek().is_some_and(|&(_, d)| d == ':') {
            chars.next();
            tokens.push((line, "::".to_string()));
        } else if !c.is_whitespace() {
            tokens.push((line, c.to_string()));
        }
    }
    tokens
}

/// The impure uses in `code` outside `#[cfg(test)]` modules: (line, use, what it is).
fn impure_uses(code: &str) -> Vec<(usize, &'static str, &'static str)> {
    let code = without_test_modules(code);
    let tokens = tokenize(&code);
    let mut found = Vec::new();
    for (i, (line, token)) in tokens.iter().enumerate() {
        // `use std::{fs, thread}` names `std::fs` and `std::thread` too.
        if token == "std"
            && tokens.get(i + 1).is_some_and(|t| t.1 == "::")
            && tokens.get(i + 2).is_some_and(|t| t.1 == "{")
        {
            for name in first_segments(&tokens, i + 2) {
                let named = format!("std::{name}");
                if let Some((what, why)) = IMPURE.iter().find(|(what, _)| *what == named) {
                    found.push((*line, *what, *why));
                }
            }
        }
        for (what, why) in IMPURE {
            let parts: Vec<&str> = what.split("::").collect();
            let matches = parts.iter().enumerate().all(|(k, part)| {
                let at = i + 2 * k;
                tokens.get(at).is_some_and(|t| t.1 == *part)
                    && (k + 1 == parts.len() || tokens.get(at + 1).is_some_and(|t| t.1 == "::"))
            });
            if matches {
                found.push((*line, *what, *why));
            }
        }
        // A `static` that can change (`static mut`, or one holding atomics, locks or cells)
        // is state shared by the whole process; a pure layer's statics are constants.
        if token == "static" && tokens.get(i.wrapping_sub(1)).is_none_or(|t| t.1 != "'") {
            let declared: Vec<&str> = tokens[i + 1..]
                .iter()
                .map(|t| t.1.as_str())
                .take_while(|t| *t != "=" && *t != ";")
                .collect();
            let mutable = declared.first() == Some(&"mut")
                || declared.iter().any(|t| {
                    t.starts_with("Atomic")
                        || ["Mutex", "RwLock", "Cell", "RefCell", "UnsafeCell"].contains(t)
                });
            if mutable {
                found.push((*line, "static", "keeps process-wide mutable state"));
            }
        }
    }
    found
}

/// `code` with every `#[cfg(test)]` item's braced body blanked (lines kept).
fn without_test_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    const ATTRIBUTE: &str = "#[cfg(test)]";
    while let Some(at) = rest.find(ATTRIBUTE) {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let item = after[ATTRIBUTE.len()..].trim_start();
        let is_module = ["mod ", "pub mod ", "pub(crate) mod ", "pub(super) mod "]
            .iter()
            .any(|start| item.starts_with(start));
        let open = after.find('{');
        let (true, Some(open)) = (is_module, open) else {
            // Only whole test modules are exempt; any other item is scanned like the rest.
            out.push_str(ATTRIBUTE);
            rest = &after[ATTRIBUTE.len()..];
            continue;
        };
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.extend(
            after[..end]
                .chars()
                .map(|c| if c == '\n' { '\n' } else { ' ' }),
        );
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// `text` with comments and string, byte-string and char literals blanked; newlines kept
/// so that lines still count.
fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&chars, i) {
            // r"…", r#"…"#, br"…": no escapes; ends at a quote and as many hashes.
            let prefix = if chars[i] == 'b' || chars[i] == 'c' {
                2
            } else {
                1
            };
            i += prefix + hashes + 1;
            while i < chars.len() {
                if chars[i] == '"' && (0..hashes).all(|k| chars.get(i + 1 + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                blank(&mut out, chars[i]);
                i += 1;
            }
            out.push_str("\"\"");
        } else if c == '"'
            || ((c == 'b' || c == 'c') && next == Some('"') && !ident_before(&chars, i))
        {
            i += if c == '"' { 1 } else { 2 };
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&d) = chars.get(i) {
                    blank(&mut out, d);
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}'), not a lifetime or label ('a).
            if next == Some('\\') {
                // Past the quote, the backslash and the escaped character.
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// At `i`, the number of hashes of a raw string literal that starts there.
fn raw_string_start(chars: &[char], i: usize) -> Option<usize> {
    if ident_before(chars, i) {
        return None;
    }
    let mut j = i;
    if matches!(chars.get(j), Some('b') | Some('c')) {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some(hashes)
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// One line per edge of `cycle`, with where the edge is written.
fn cycle_text(graph: &BTreeMap<String, BTreeMap<String, String>>, cycle: &[String]) -> String {
    let mut text = String::new();
    for pair in cycle.windows(2) {
        let _ = writeln!(
            text,
            "  {} -> {}: {}",
            pair[0], pair[1], graph[&pair[0]][&pair[1]]
        );
    }
    text
}

/// A cycle in `graph`, as its nodes with the first repeated at the end.
fn find_cycle(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Visiting,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeMap<String, String>>,
        marks: &mut BTreeMap<String, Mark>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Visiting) => {
                let from = stack.iter().position(|n| n == node).expect("on the stack");
                let mut cycle = stack[from..].to_vec();
                cycle.push(node.to_string());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_string(), Mark::Visiting);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flat_map(|edges| edges.keys()) {
            if let Some(cycle) = visit(next, graph, marks, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        marks.insert(node.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        let mut stack = Vec::new();
        if let Some(cycle) = visit(node, graph, &mut marks, &mut stack) {
            return Some(cycle);
        }
    }
    None
}
