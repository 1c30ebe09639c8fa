//! The module graph inside `src/store`: the table modules must not form cycles, and the
//! ones the design keeps apart stay apart.
//!
//! The nodes are the children of `store` (a directory module such as `catalog/` is one node);
//! `store/mod.rs` is the hub that aggregates every table into `Tables` and defines the change
//! types, so it is left out: every child uses it and it names every child. An edge is a
//! path in non-test code that reaches another child, through `super::…`, `super::super::…`
//! or `crate::store::…`, including names inside `{…}` groups. Test modules and test-only
//! files (declared `#[cfg(test)]` in `mod.rs`) may use anything.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Pairs `(from, to)` that must never be an edge: each says what a module does not know.
const FORBIDDEN_EDGES: &[(&str, &str, &str)] = &[
    (
        "kv",
        "session",
        "a KV row's holder is an opaque ID to the kv table",
    ),
    (
        "kv",
        "locks",
        "kv writes rows; locks calls it, not the other way",
    ),
    (
        "session",
        "kv",
        "sessions end through the apply sequence, not by writing KV",
    ),
    (
        "session",
        "locks",
        "what a session's end does to its keys is locks' business",
    ),
    (
        "catalog",
        "session",
        "sessions react to catalog writes in the apply sequence",
    ),
    ("catalog", "locks", "the catalog knows nothing of locks"),
    ("catalog", "kv", "the catalog knows nothing of KV"),
];

fn store_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store")
}

/// Every `.rs` file under `dir`, with its module path below `store` (`["catalog", "apply"]`;
/// empty for `store/mod.rs`).
fn rust_files(dir: &Path, module: &[String], out: &mut Vec<(PathBuf, Vec<String>)>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("read src/store")
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("UTF-8 file name")
            .to_string();
        if path.is_dir() {
            let mut inner = module.to_vec();
            inner.push(name);
            rust_files(&path, &inner, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            // A module's `tests.rs` is its `#[cfg(test)] mod tests` in a file of its own:
            // test code, which may use anything, as the inline form cut by
            // `production_code` may.
            if name == "tests" {
                continue;
            }
            let mut path_of = module.to_vec();
            if name != "mod" {
                path_of.push(name);
            }
            out.push((path, path_of));
        }
    }
}

/// The source without comments and without the trailing `#[cfg(test)] mod tests`.
fn production_code(text: &str) -> String {
    let cut = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..cut]
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segment of every item of a `{…}` group starting at `text[0] == '{'`.
fn group_heads(text: &str) -> Vec<String> {
    let mut depth = 0usize;
    let mut heads = Vec::new();
    let mut item = String::new();
    for c in text.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 {
                    continue;
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    heads.push(std::mem::take(&mut item));
                    break;
                }
            }
            ',' if depth == 1 => {
                heads.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        if depth >= 1 {
            item.push(c);
        }
    }
    heads
        .iter()
        .map(|h| h.trim().split("::").next().unwrap_or("").trim().to_string())
        .filter(|h| !h.is_empty())
        .collect()
}

/// The modules below `store` that `code` (in module `module`) names by path.
fn referenced_children(code: &str, module: &[String]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        // The module a path starts from, as its distance from `store` (or none).
        let (consumed, base) = if rest.starts_with("crate::store::") {
            ("crate::store::".len(), Some(0usize))
        } else if rest.starts_with("super::")
            && (at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_'))
        {
            let mut supers = 0;
            let mut len = 0;
            while code[at + len..].starts_with("super::") {
                supers += 1;
                len += "super::".len();
            }
            // `super` from `store/x.rs` (module ["x"]) is store; from `store/catalog/a.rs`
            // (["catalog", "a"]) it is catalog.
            (len, module.len().checked_sub(supers))
        } else {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let tail = &code[at + consumed..];
        let heads: Vec<String> = match base {
            // A path that stays inside a child module names only itself.
            Some(depth) if depth > 0 => vec![module[0].clone()],
            Some(_) if tail.starts_with('{') => group_heads(tail),
            Some(_) => {
                let head: String = tail
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                vec![head]
            }
            None => Vec::new(),
        };
        found.extend(heads);
        at += consumed;
    }
    found
}

/// Children of `store` declared test-only in `mod.rs` (`#[cfg(test)]` then `mod x;`).
fn test_only_children(hub: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = hub.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter(|w| w[0] == "#[cfg(test)]")
        .filter_map(|w| w[1].strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

fn store_graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&store_dir(), &[], &mut files);
    let hub = fs::read_to_string(store_dir().join("mod.rs")).expect("read store/mod.rs");
    let test_only = test_only_children(&hub);
    let children: BTreeSet<String> = files
        .iter()
        .filter_map(|(_, module)| module.first().cloned())
        .filter(|child| !test_only.contains(child))
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, module) in &files {
        let Some(child) = module.first() else {
            continue;
        };
        if !children.contains(child) {
            continue;
        }
        let text = fs::read_to_string(path).expect("read a store file");
        let edges = graph.entry(child.clone()).or_default();
        for target in referenced_children(&production_code(&text), module) {
            if &target != child && children.contains(&target) {
                edges.insert(target);
            }
        }
    }
    graph
}

/// A cycle in `graph`, if there is one, as the list of modules along it.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut cycle = path[start..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn store_modules_form_no_cycle_and_keep_apart() {
    let graph = store_graph();
    for module in ["kv", "session", "locks", "catalog", "txn", "apply"] {
        assert!(graph.contains_key(module), "{module} not found: {graph:?}");
    }
    // The scanner sees the edges that exist, or the checks below would pass vacuously.
    assert!(graph["locks"].contains("kv") && graph["locks"].contains("session"));
    assert!(graph["session"].contains("catalog"));
    assert!(graph["txn"].contains("locks"));
    if let Some(cycle) = find_cycle(&graph) {
        panic!("cycle among store modules: {}", cycle.join(" → "));
    }
    for (from, to, why) in FORBIDDEN_EDGES {
        assert!(
            !graph.get(*from).is_some_and(|edges| edges.contains(*to)),
            "store::{from} must not use store::{to}: {why}"
        );
    }
}

#[test]
fn the_scanner_reads_groups_nested_paths_and_skips_tests() {
    let code = production_code(
        "use super::{kv::{self, KvOp}, session, Change};\n\
         use super::super::locks;\n\
         fn f() { crate::store::txn::apply(); } // super::restore\n\
         #[cfg(test)]\nmod tests { use super::super::catalog; }\n",
    );
    let top = referenced_children(&code, &["apply".to_string()]);
    assert!(top.contains("kv") && top.contains("session") && top.contains("txn"));
    assert!(!top.contains("restore"), "comments are not code");
    assert!(!top.contains("catalog"), "test modules are skipped");
    let nested = referenced_children(&code, &["catalog".to_string(), "apply".to_string()]);
    assert!(
        nested.contains("locks"),
        "super::super from a nested file is store"
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["a".to_string()])),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".to_string(), "b".to_string(), "a".to_string()])
    );
}
