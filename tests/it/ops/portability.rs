//! A checkout anywhere works: no tracked file names the directory this checkout happens to
//! live in (or the machine's `/work/` layout) or anything beside the repository (the
//! benchmark floors are part of loadgen), and docs/benchmarks.md's commands name result files
//! by relative paths.

use std::path::Path;
use std::process::Command;

/// The tracked text files of the repository.
fn tracked_text_files(root: &Path) -> Vec<(String, String)> {
    let output = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .expect("git is installed");
    assert!(output.status.success());
    output
        .stdout
        .split(|b| *b == 0)
        .filter(|name| !name.is_empty())
        .filter_map(|name| {
            let name = String::from_utf8(name.to_vec()).ok()?;
            let text = std::fs::read_to_string(root.join(&name)).ok()?;
            Some((name, text))
        })
        .collect()
}

#[test]
fn no_tracked_file_names_an_absolute_checkout_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let checkout = root.display().to_string();
    let files = tracked_text_files(root);
    assert!(files.len() > 100, "git ls-files listed the repository");
    for (name, text) in &files {
        assert!(
            !text.contains(&checkout),
            "{name} names this checkout's directory {checkout}"
        );
        // Spelled in pieces so that this file does not match itself.
        for machine_path in [["/work", "/main"], ["/work", "/wt/"], ["/work", "/shared"]] {
            let machine_path = machine_path.concat();
            assert!(
                !text.contains(&machine_path),
                "{name} names {machine_path}, a path of the build machine"
            );
        }
    }
}

#[test]
fn nothing_reaches_outside_the_repository_and_results_are_named_relatively() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // A clone is all a user has: the floors are `loadgen floor`, the baselines and the design
    // brief are quoted where they matter, and no script or doc points beside the checkout.
    // Spelled in pieces so that this file does not match itself.
    let outside = [
        ["../", "shared/"].concat(),
        ["shared/", "floor"].concat(),
        ["BASELINES", ".md"].concat(),
    ];
    for (name, text) in tracked_text_files(root) {
        for word in &outside {
            assert!(
                !text.contains(word.as_str()),
                "{name} names {word}, which is outside the repository"
            );
        }
    }
    let docs = std::fs::read_to_string(root.join("docs/benchmarks.md")).unwrap();
    for line in docs.lines().filter(|l| l.contains("results/")) {
        for word in line.split([' ', '`', '(', ')', '|']) {
            if let Some(at) = word.find("results/") {
                assert!(
                    at == 0 || !word[..at].contains('/'),
                    "docs/benchmarks.md names a result by an absolute path: {word}"
                );
            }
        }
    }
}
