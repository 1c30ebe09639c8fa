//! Turning gossip encryption on in a running datacenter, the way Consul documents it, on real
//! processes: three servers and a client agent that gossip in plaintext get the key with
//! `encrypt_verify_incoming = false` and `encrypt_verify_outgoing = false` (a rolling restart),
//! then `encrypt_verify_outgoing = true` (another), then `encrypt_verify_incoming = true` (a
//! third). After every single restart the pool is whole, a leader serves, and a write through
//! the client agent lands; at the end an agent without the key cannot join.

use crate::common;

use common::{fresh_loopback, Agent, Cluster, TempDir};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// A 32-byte key, as `praetor keygen` prints one.
const KEY: &str = "pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s=";
/// How long the pool may take to be whole again after one restart.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(40);

/// A stage of the rollout and the HCL it adds to an agent's command line.
#[derive(Clone, Copy, Debug)]
enum Stage {
    KeyOnly,
    Outgoing,
    Enforced,
}

impl Stage {
    fn hcl(self) -> String {
        let (incoming, outgoing) = match self {
            Stage::KeyOnly => (false, false),
            Stage::Outgoing => (false, true),
            Stage::Enforced => (true, true),
        };
        format!(
            "encrypt = \"{KEY}\" encrypt_verify_incoming = {incoming} encrypt_verify_outgoing = {outgoing}"
        )
    }
}

/// The command line of an agent on `ip` joining through every server (so a restarted server
/// finds the pool even when the first address is its own).
fn agent_args(ip: IpAddr, data: &TempDir, servers: &[IpAddr], server: bool) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "agent".into(),
        "-node".into(),
        format!("{}-{ip}", if server { "s" } else { "client" }),
        "-bind".into(),
        ip.to_string(),
        "-client".into(),
        ip.to_string(),
        "-data-dir".into(),
        data.path().display().to_string(),
        "-dns-port=-1".into(),
        "-hcl".into(),
        "retry_interval = \"1s\"".into(),
    ];
    if server {
        args.extend(["-server".into(), "-bootstrap-expect".into(), "3".into()]);
    }
    for other in servers.iter().filter(|other| **other != ip) {
        args.extend(["-retry-join".into(), other.to_string()]);
    }
    args
}

/// Sets the agent's gossip stage (replacing an earlier one) and restarts it.
fn restart_in(agent: &mut Agent, stage: Stage) {
    agent.terminate();
    if let Some(at) = agent
        .args
        .iter()
        .position(|arg| arg.starts_with("encrypt = "))
    {
        agent.args[at] = stage.hcl();
    } else {
        agent.args.extend(["-hcl".into(), stage.hcl()]);
    }
    agent.restart();
}

/// Names of the members `agent` sees alive, or None while it does not answer.
fn alive_members(agent: &Agent) -> Option<Vec<String>> {
    let answer = common::try_request_timeout(
        agent.addr(),
        "GET",
        "/v1/agent/members",
        Duration::from_secs(2),
    )
    .ok()?;
    if answer.status != 200 {
        return None;
    }
    let members: serde_json::Value = serde_json::from_slice(&answer.body).ok()?;
    let mut alive: Vec<String> = members
        .as_array()?
        .iter()
        .filter(|m| m["Status"] == 1)
        .filter_map(|m| m["Name"].as_str().map(str::to_string))
        .collect();
    alive.sort();
    Some(alive)
}

/// Waits until every agent sees exactly `expected` alive, a leader serves, and a write made
/// through the client agent (forwarded over RPC to the leader) is read back from the leader.
fn wait_whole(cluster: &Cluster, client: &Agent, expected: &[String], what: &str) {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let everyone: Vec<&Agent> = cluster.servers.iter().chain([client]).collect();
    loop {
        let views: Vec<Option<Vec<String>>> = everyone.iter().map(|a| alive_members(a)).collect();
        if views.iter().all(|view| view.as_deref() == Some(expected)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the pool is not whole; views {views:?}, expected {expected:?}\n{}",
            everyone
                .iter()
                .map(|a| format!("--- {}\n{}", a.ip, a.log()))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let leader = cluster.wait_for_leader(SETTLE_TIMEOUT);
    let key = format!("/v1/kv/rollout/{}", what.replace([' ', ':'], "-"));
    loop {
        let written = common::try_request(client.addr(), "PUT", &key, what.as_bytes(), &[]);
        if matches!(&written, Ok(answer) if answer.status == 200 && answer.text().trim() == "true")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the client agent cannot write: {written:?}\n{}",
            client.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        cluster.servers[leader].get(&format!("{key}?raw")).text(),
        what
    );
}

#[test]
fn gossip_encryption_rolls_in_with_the_verify_switches() {
    let ips: Vec<IpAddr> = (0..3).map(|_| fresh_loopback()).collect();
    let data: Vec<TempDir> = (0..3)
        .map(|i| TempDir::new(&format!("roll-s{i}")))
        .collect();
    let servers = ips
        .iter()
        .zip(&data)
        .map(|(ip, dir)| Agent::spawn(*ip, 8500, agent_args(*ip, dir, &ips, true)))
        .collect();
    let mut cluster = Cluster {
        servers,
        data: Vec::new(),
    };
    let client_ip = fresh_loopback();
    let client_data = TempDir::new("roll-client");
    let mut client = Agent::spawn(
        client_ip,
        8500,
        agent_args(client_ip, &client_data, &ips, false),
    );
    let mut expected: Vec<String> = ips
        .iter()
        .map(|ip| format!("s-{ip}"))
        .chain([format!("client-{client_ip}")])
        .collect();
    expected.sort();
    wait_whole(&cluster, &client, &expected, "plaintext");

    for stage in [Stage::KeyOnly, Stage::Outgoing, Stage::Enforced] {
        for i in 0..3 {
            restart_in(&mut cluster.servers[i], stage);
            wait_whole(&cluster, &client, &expected, &format!("{stage:?} s{i}"));
        }
        restart_in(&mut client, stage);
        wait_whole(&cluster, &client, &expected, &format!("{stage:?} client"));
    }

    // Every agent now requires the key: one without it is refused, and says why.
    let outsider_ip = fresh_loopback();
    let outsider_data = TempDir::new("roll-outsider");
    let mut outsider_args = agent_args(outsider_ip, &outsider_data, &ips, false);
    outsider_args.extend(["-hcl".into(), "retry_max = 3".into()]);
    let outsider = Agent::spawn(outsider_ip, 8500, outsider_args);
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    while !outsider
        .log()
        .contains("agent: max join retry exhausted, exiting (3 attempts)")
    {
        assert!(
            Instant::now() < deadline,
            "the keyless agent kept trying:\n{}",
            outsider.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Then it exits, as Consul's agent does once `retry_max` attempts failed, having said
    // why each attempt was refused.
    assert!(
        outsider
            .log()
            .contains("remote state is encrypted and encryption is not configured"),
        "{}",
        outsider.log()
    );
    assert_eq!(alive_members(&client).as_deref(), Some(&expected[..]));
}
