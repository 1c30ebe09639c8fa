//! The web UI in a real browser: headless Chromium driven by Selenium
//! (`tests/python/ui_browser.py`) against a real `-dev` agent. tests/run.sh installs
//! `chromium`, `chromium-driver` and `selenium`; a missing one is a failure, not a skip.
//!
//! What it shows: the services page lists a service and shows another within 2 s of its
//! registration without a reload; a failing check turns its row critical (state, class,
//! badge, colour); a hidden tab makes no request and catches up when shown again; a key
//! created in the UI reads back through the API; a concurrent change is warned about and
//! never overwritten; the agent's 413 text is shown verbatim; a lock session is
//! invalidated; the first load transfers at most 150 KB and 1,000 services render in at
//! most 300 ms (both measured with the Performance API and printed).
//!
//! Screenshots go to a temporary directory, or to `$UI_SCREENSHOTS` when set (that is how
//! the ones in docs/ui/ were taken: `UI_SCREENSHOTS=docs/ui cargo test --test ui_browser`).

mod common;

use common::{Agent, TempDir};
use std::fs::File;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The script bounds itself to 150 s; this is the backstop if it hangs anyway.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(240);

#[test]
fn the_ui_in_a_real_browser() {
    let agent = Agent::dev(&["-hcl", "kv_max_value_size = 64"]);
    let temp = TempDir::new("ui-screenshots");
    let shots = std::env::var("UI_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| temp.path().to_path_buf());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/ui_browser.py");
    // Output goes to files, so a chatty failure can never fill a pipe and stall the script.
    let stdout_path = temp.path().join("stdout.txt");
    let stderr_path = temp.path().join("stderr.txt");
    let mut child = Command::new("python3")
        .arg(script)
        .arg(agent.ip.to_string())
        .arg(agent.http_port.to_string())
        .arg(&shots)
        .stdout(Stdio::from(File::create(&stdout_path).unwrap()))
        .stderr(Stdio::from(File::create(&stderr_path).unwrap()))
        .spawn()
        .expect("python3 must be installed (tests/run.sh installs it)");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the script") {
            break status;
        }
        if started.elapsed() > SCRIPT_TIMEOUT {
            child.kill().expect("stopping the script by its PID");
            child.wait().expect("reaping the script");
            panic!("ui_browser.py ran longer than {SCRIPT_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    println!("{stdout}");
    assert!(
        status.success() && stdout.trim_end().ends_with("ok"),
        "ui_browser.py failed ({status}); screenshots in {}\nstdout:\n{stdout}\nstderr:\n{stderr}\nagent log:\n{}",
        shots.display(),
        agent.log()
    );
    for shot in [
        "services",
        "service-instances",
        "kv-editor",
        "kv-error",
        "phone-services",
    ] {
        assert!(
            shots.join(format!("{shot}.png")).is_file(),
            "screenshot {shot}.png was saved"
        );
    }
}
