//! The web UI in a real browser: headless Chromium driven by Selenium
//! (`tests/python/ui_browser.py`) against a real `-dev` agent. tests/run.sh installs
//! `chromium`, `chromium-driver` and `selenium`; a missing one is a failure, not a skip.
//!
//! What it shows: the services page lists a service and shows another within 2 s of its
//! registration without a reload; a failing check turns its row critical (state, class,
//! badge, colour); a hidden tab makes no request and catches up when shown again; a key
//! created in the UI reads back through the API; a concurrent change is warned about and
//! never overwritten; the agent's 413 text is shown verbatim; a lock session is
//! invalidated; intentions say they are not available on an agent without the mesh (or are
//! made and switched when it has one); sidecar proxies are shown under their service's
//! instances (not as services in the list), with their checks and upstreams, and a
//! service's topology tab shows its upstream with the intention's decision, offers to allow
//! a denied one and follows a change live, and its intentions tab lists the intentions that
//! apply to it; the datacenter switcher shows a WAN-joined dc2's
//! catalog; with ACLs on (default deny) a bad token is refused at login in the agent's
//! words, a read-only token's denied write shows the agent's 403 text, the token stays in
//! sessionStorage only, and a management token lists and edits tokens and makes a policy,
//! a role linking a policy and a token holding the role; lists that ACLs empty or cut say
//! so (anonymous, filtered to nothing, filtered in part, refused with a 403) instead of
//! calling themselves empty; the first
//! load transfers at most 150 KB and 1,000 services render in at most 300 ms (both
//! measured with the Performance API and printed).
//!
//! Screenshots go to a temporary directory, or to `$UI_SCREENSHOTS` when set (that is how
//! the ones in docs/ui/ were taken: `UI_SCREENSHOTS=docs/ui cargo test --test it ui::ui_browser::`).

use crate::common;

use common::{Agent, TempDir};
use std::fs::File;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The script bounds itself to 260 s; this is the backstop if it hangs anyway.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(330);

/// The initial management token of the agent with ACLs.
const MANAGEMENT: &str = "5ec7e7a1-0000-4000-8000-00000000a11d";

#[test]
fn the_ui_in_a_real_browser() {
    let agent = Agent::dev(&["-hcl", "limits { kv_max_value_size = 64 }"]);
    // dc2 joins dc1's WAN pool (a -dev agent's is on port 8302 of its bind address).
    let join_wan = format!("retry_join_wan = [\"{}:8302\"]", agent.ip);
    let dc2 = Agent::dev(&["-datacenter", "dc2", "-hcl", &join_wan]);
    let acl = format!(
        "acl {{ enabled = true\n default_policy = \"deny\"\n tokens {{ initial_management = \"{MANAGEMENT}\" }} }}"
    );
    let secured = Agent::dev(&["-hcl", &acl]);
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
        .args([dc2.ip.to_string(), dc2.http_port.to_string()])
        .args([secured.ip.to_string(), secured.http_port.to_string()])
        .arg(MANAGEMENT)
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
        "ui_browser.py failed ({status}); screenshots in {}\nstdout:\n{stdout}\nstderr:\n{stderr}\nagent log:\n{}\ndc2 log:\n{}\nACL agent log:\n{}",
        shots.display(),
        agent.log(),
        dc2.log(),
        secured.log()
    );
    for shot in [
        "services",
        "service-instances",
        "kv-editor",
        "kv-error",
        "datacenters",
        "login-refused",
        "acl-denied",
        "acl-tokens",
        "acl-policy",
        "acl-hidden-keys",
        "acl-denied-list",
        "service-sidecar",
        "service-topology",
        "phone-services",
    ] {
        assert!(
            shots.join(format!("{shot}.png")).is_file(),
            "screenshot {shot}.png was saved"
        );
    }
}
