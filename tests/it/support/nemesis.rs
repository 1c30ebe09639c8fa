//! Network partitions between agents on loopback, made with iptables.
//!
//! Every agent in the harness has its own 127.x.y.z address and, since its server RPC,
//! Raft and gossip connections leave from its bind address (`shard::dial`), all traffic
//! between two agents carries their two addresses. Dropping packets by source and
//! destination on the `INPUT` chain (loopback packets traverse it) therefore cuts every
//! path between them — gossip over UDP and TCP, Raft, forwarded RPC — while the test's own
//! HTTP requests, which come from 127.0.0.1, still reach every agent. That is the partition
//! an operator's firewall makes between hosts.
//!
//! Invariants: every rule carries this process's comment and names only addresses this
//! process was given, so tests of other processes (and other helpers on the machine) are
//! never touched; `heal` and `Drop` remove exactly the rules added; rules a killed test run
//! left behind on the same addresses are removed before the first partition.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::process::Command;

/// One `iptables` invocation; `-w` waits for the xtables lock other processes may hold.
fn iptables(args: &[&str]) -> Result<String, String> {
    let output = Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run iptables (tests/run.sh installs it): {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A rule: source, destination, and the protocol and port it drops (every packet if none).
type Rule = (IpAddr, IpAddr, Option<(&'static str, u16)>);

/// The partitions one test makes among its agents' addresses.
pub struct Firewall {
    comment: String,
    /// The rules in force now.
    dropped: BTreeSet<Rule>,
}

impl Firewall {
    /// A firewall for agents on `addresses`; fails (with the reason) when iptables cannot
    /// be used, so a test never runs "partitions" that cut nothing.
    pub fn new(addresses: &[IpAddr]) -> Firewall {
        let comment = format!("praetor-test-{}", std::process::id());
        let firewall = Firewall {
            comment,
            dropped: BTreeSet::new(),
        };
        let rules = iptables(&["-S", "INPUT"]).unwrap_or_else(|e| panic!("{e}"));
        // A killed run of an earlier test process may have left rules on these addresses.
        for rule in rules.lines().filter(|r| r.starts_with("-A INPUT")) {
            let stale = addresses
                .iter()
                .any(|ip| rule.contains(&format!(" {ip}/32 ")) && rule.contains("praetor-test-"));
            if stale {
                let delete: Vec<&str> = rule
                    .trim_start_matches("-A ")
                    .split_whitespace()
                    .map(|w| w.trim_matches('"'))
                    .collect();
                let mut args = vec!["-D"];
                args.extend(delete);
                let _ = iptables(&args);
            }
        }
        firewall
    }

    fn rule(
        &self,
        source: IpAddr,
        destination: IpAddr,
        port: Option<(&'static str, u16)>,
    ) -> Vec<String> {
        let mut rule: Vec<String> = [
            "INPUT",
            "-s",
            &source.to_string(),
            "-d",
            &destination.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some((protocol, port)) = port {
            rule.extend(["-p", protocol, "--dport", &port.to_string()].map(str::to_string));
        }
        rule.extend(
            ["-m", "comment", "--comment", &self.comment, "-j", "DROP"].map(str::to_string),
        );
        rule
    }

    fn add(&mut self, source: IpAddr, destination: IpAddr, port: Option<(&'static str, u16)>) {
        if self.dropped.insert((source, destination, port)) {
            let rule = self.rule(source, destination, port);
            let mut args = vec!["-I"];
            args.extend(rule.iter().map(String::as_str));
            iptables(&args).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    fn drop_between(&mut self, a: IpAddr, b: IpAddr) {
        for (source, destination) in [(a, b), (b, a)] {
            self.add(source, destination, None);
        }
    }

    /// Drops TCP from `source` to `destination`'s `port` only (say, a server's RPC port
    /// while its gossip ports stay reachable).
    pub fn drop_tcp_port(&mut self, source: IpAddr, destination: IpAddr, port: u16) {
        self.add(source, destination, Some(("tcp", port)));
    }

    /// Drops UDP from `source` to `destination`'s `port` only (a gossip port's datagrams).
    pub fn drop_udp_port(&mut self, source: IpAddr, destination: IpAddr, port: u16) {
        self.add(source, destination, Some(("udp", port)));
    }

    /// Cuts `isolated` off from every address in `others`, in both directions.
    pub fn isolate(&mut self, isolated: IpAddr, others: &[IpAddr]) {
        for other in others.iter().filter(|o| **o != isolated) {
            self.drop_between(isolated, *other);
        }
    }

    /// Removes every rule this firewall added.
    pub fn heal(&mut self) {
        for (source, destination, port) in std::mem::take(&mut self.dropped) {
            let rule = self.rule(source, destination, port);
            let mut args = vec!["-D"];
            args.extend(rule.iter().map(String::as_str));
            if let Err(e) = iptables(&args) {
                eprintln!("nemesis: {e}");
            }
        }
    }

    pub fn is_partitioned(&self) -> bool {
        !self.dropped.is_empty()
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        self.heal();
    }
}
