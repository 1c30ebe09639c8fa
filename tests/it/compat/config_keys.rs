//! The config key table (`src/config/keys.rs`) held to its word, in the spirit of
//! `tests/layers.rs`: the table is read, `src/` is read, and each entry is checked against
//! the code.
//!
//! - A key that "acts" names the code that carries its value beyond `src/config` (a field
//!   path, or the quoted key a reader of the merged object looks up); that code must appear
//!   outside `src/config`, in code that is not a test (a quoted key outside `src/cli` too,
//!   which writes flags into the configuration under the same names).
//! - A key "not acted on" must not be read outside `src/config`: the field that keeps it (if
//!   any) appears nowhere else, and no reader of the merged object looks up a top-level one
//!   by name.
//! - `docs/config.md`'s key list is the table's own rendering. Run with `PRAETOR_BLESS=1` to
//!   rewrite it after changing the table.

use praetor::config::schema::{all_blocks, render_key_list, Block, Kind, Use};
use std::path::{Path, PathBuf};

const DOCS_BEGIN: &str = "<!-- key list: generated from src/config/keys.rs; do not edit -->\n";
const DOCS_END: &str = "<!-- end of key list -->";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, recursively, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's code without comment lines and without its test module.
fn code_of(text: &str) -> String {
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// The non-test code of `src/` outside `src/config`, by file.
fn code_outside_config() -> Vec<(PathBuf, String)> {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .into_iter()
        .filter(|path| {
            let relative = path.strip_prefix(&src).unwrap();
            let top = relative.components().next().unwrap().as_os_str();
            top != "config" && relative.file_name().unwrap() != "tests.rs"
        })
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            (path, code_of(&text))
        })
        .collect()
}

/// Whether `code` looks up `key` in the merged configuration object (`raw.get("key")`,
/// `raw_str("key")`, `raw_duration(config, "key")`, …).
fn reads_raw(code: &str, key: &str) -> bool {
    let quoted = format!("\"{key}\"");
    code.match_indices(&quoted).any(|(at, _)| {
        let before = &code[at.saturating_sub(40)..at];
        before.contains("raw") || before.contains("flag(")
    })
}

/// Every field of the table with its block, as `block title: key`.
fn fields() -> Vec<(&'static Block, &'static praetor::config::schema::Field)> {
    all_blocks()
        .into_iter()
        .flat_map(|block| block.fields.iter().map(move |field| (block, field)))
        .collect()
}

#[test]
fn keys_that_act_are_read_and_keys_not_acted_on_are_not() {
    let code = code_outside_config();
    let top_level = all_blocks()[0];
    let mut failures = Vec::new();
    for (block, field) in fields() {
        let name = format!("{}: {}", block.title, field.name);
        match field.use_ {
            Use::Acts(carrier) => {
                let read = code
                    .iter()
                    .filter(|(path, _)| {
                        !carrier.starts_with('"') || !path.starts_with(root().join("src/cli"))
                    })
                    .any(|(_, text)| text.contains(carrier));
                if !read {
                    failures.push(format!(
                        "{name} acts, but `{carrier}` appears nowhere outside src/config"
                    ));
                }
            }
            Use::NotActedOn { kept, .. } => {
                if !kept.is_empty() {
                    let access = format!(".{kept}");
                    for (path, text) in &code {
                        if text.contains(&access) {
                            failures.push(format!(
                                "{name} is not acted on, but {} reads `{access}`",
                                path.display()
                            ));
                        }
                    }
                }
                if std::ptr::eq(block, top_level) {
                    for (path, text) in code
                        .iter()
                        .filter(|(path, _)| !path.starts_with(root().join("src/cli")))
                    {
                        if reads_raw(text, field.name) {
                            failures.push(format!(
                                "{name} is not acted on, but {} reads it from the merged configuration",
                                path.display()
                            ));
                        }
                    }
                }
            }
            Use::Section => {
                if !matches!(field.kind, Kind::Object(_)) {
                    failures.push(format!("{name} is a section but holds no block"));
                }
            }
            Use::Covered | Use::Enterprise => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_documented_key_list_is_the_tables() {
    let path = root().join("docs/config.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let begin = text
        .find(DOCS_BEGIN)
        .expect("docs/config.md has the key list marker")
        + DOCS_BEGIN.len();
    let end = text[begin..]
        .find(DOCS_END)
        .expect("docs/config.md ends its key list")
        + begin;
    let generated = render_key_list();
    if text[begin..end] == generated {
        return;
    }
    if std::env::var_os("PRAETOR_BLESS").is_some() {
        let updated = format!("{}{generated}{}", &text[..begin], &text[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!("docs/config.md's key list differs from the key table; run this test with PRAETOR_BLESS=1 to rewrite it");
}
