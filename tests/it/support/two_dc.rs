//! Two datacenters' data planes apart on one loopback: which processes may open
//! connections to which addresses.
//!
//! Every Envoy connects from 127.0.0.1 (the kernel's source for loopback routes) unless
//! its bootstrap binds its upstream connections, so rules by source address cannot tell a
//! sidecar from a gateway. A [`Fence`] tells them apart by process instead: each
//! datacenter's proxies run in a cgroup (v2) of their own, and an `OUTPUT` rule rejects
//! TCP connections from that cgroup to the addresses it must not reach (iptables'
//! `cgroup --path` match, which sees the cgroup of the socket's creator). The agents stay
//! outside every cgroup, so WAN gossip, RPC and the test's own requests are untouched.
//!
//! Invariants: cgroups and rules carry this process's ID, and `Drop` removes exactly the
//! rules added and the cgroups made (after their processes are gone: declare the fence
//! before the Envoys it holds).

#![allow(dead_code)]

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;

fn iptables(args: &[String]) -> Result<(), String> {
    let output = Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run iptables (tests/run.sh installs it): {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup` on a unified host,
/// `/sys/fs/cgroup/unified` on a hybrid one).
fn cgroup2_root() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("read /proc/self/mounts");
    mounts
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(fields[1]))
        })
        .expect("a cgroup v2 hierarchy must be mounted for the fence")
}

/// The cgroups and rules of one test.
pub struct Fence {
    root: PathBuf,
    prefix: String,
    groups: Vec<PathBuf>,
    rules: Vec<Vec<String>>,
}

impl Fence {
    pub fn new() -> Fence {
        Fence {
            root: cgroup2_root(),
            prefix: format!("praetor-test-{}", std::process::id()),
            groups: Vec::new(),
            rules: Vec::new(),
        }
    }

    /// The directory of cgroup `name` (made on first use), to start processes in.
    pub fn group(&mut self, name: &str) -> PathBuf {
        let path = self.root.join(format!("{}-{name}", self.prefix));
        if !self.groups.contains(&path) {
            std::fs::create_dir_all(&path)
                .unwrap_or_else(|e| panic!("cannot make cgroup {}: {e}", path.display()));
            self.groups.push(path.clone());
        }
        path
    }

    /// Rejects every TCP connection a process of cgroup `name` opens to `destination`
    /// (with a reset, so it fails at once rather than after a timeout).
    pub fn cut(&mut self, name: &str, destination: IpAddr) {
        self.group(name);
        let rule: Vec<String> = [
            "OUTPUT",
            "-p",
            "tcp",
            "-d",
            &destination.to_string(),
            "-m",
            "cgroup",
            "--path",
            &format!("{}-{name}", self.prefix),
            "-m",
            "comment",
            "--comment",
            &self.prefix,
            "-j",
            "REJECT",
            "--reject-with",
            "tcp-reset",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut insert = vec!["-I".to_string()];
        insert.extend(rule.iter().cloned());
        iptables(&insert).unwrap_or_else(|e| panic!("{e}"));
        self.rules.push(rule);
    }
}

impl Drop for Fence {
    fn drop(&mut self) {
        for rule in std::mem::take(&mut self.rules) {
            let mut delete = vec!["-D".to_string()];
            delete.extend(rule);
            if let Err(e) = iptables(&delete) {
                eprintln!("fence: {e}");
            }
        }
        for group in &self.groups {
            let _ = std::fs::remove_dir(group);
        }
    }
}
