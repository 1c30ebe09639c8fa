//! The `praetor` command line: the agent and the operator commands.
//!
//! Consul's flags are Go flags: one dash (`-dev`, `-http-port=8500`). clap wants two for long
//! flags, so [`normalize_args`] adds the second dash to any argument that names a long flag
//! of the (sub)command being parsed — and only those, so values and child-command arguments
//! that happen to start with a dash pass through untouched.
//!
//! Every command exits non-zero with one readable line on error.

pub mod agent;
pub mod client;
pub mod gossip;
pub mod kv;
pub mod operator;
pub mod snapshot;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "praetor",
    about = "A Consul-compatible control plane",
    disable_version_flag = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Runs an agent (server with -server, or -dev for a throwaway single server).
    Agent(Box<agent::AgentArgs>),
    /// Reads and writes the key/value store.
    #[command(subcommand)]
    Kv(kv::KvCommand),
    /// Operator tools: the Raft configuration and leadership.
    #[command(subcommand)]
    Operator(operator::OperatorCommand),
    /// Saves, restores and inspects snapshots of the cluster state.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
    /// Prints the Consul API version praetor implements and praetor's own version.
    Version,
    /// Lists the members of the agent's gossip pool.
    Members(gossip::MembersArgs),
    /// Tells the agent to join a gossip pool through the given addresses.
    Join(gossip::JoinArgs),
    /// Makes the agent leave the cluster gracefully and shut down.
    Leave(gossip::LeaveArgs),
    /// Forces a failed member into the left state (or forgets it with -prune).
    ForceLeave(gossip::ForceLeaveArgs),
    /// Fires a user event to the cluster.
    Event(gossip::EventArgs),
    /// Generates a new gossip encryption key.
    Keygen,
    /// Lists, installs, switches and removes gossip encryption keys across the pool.
    Keyring(gossip::KeyringArgs),
    /// Estimates the round-trip time between two nodes from their network coordinates.
    Rtt(gossip::RttArgs),
}

/// Flags every HTTP-speaking command takes, as Consul's CLI names them.
#[derive(Args, Debug, Clone, Default)]
pub struct HttpFlags {
    /// Address of the agent's HTTP API (default: $CONSUL_HTTP_ADDR or 127.0.0.1:8500).
    #[arg(long = "http-addr")]
    pub http_addr: Option<String>,
    /// ACL token (default: $CONSUL_HTTP_TOKEN).
    #[arg(long)]
    pub token: Option<String>,
    /// Datacenter to query (default: the agent's).
    #[arg(long)]
    pub datacenter: Option<String>,
    /// Allow any server to answer, not only the leader.
    #[arg(long)]
    pub stale: bool,
}

impl HttpFlags {
    pub fn client(&self) -> client::Client {
        client::Client::new(client::ClientOptions::from_flags(
            self.http_addr.as_deref(),
            self.token.as_deref(),
            self.datacenter.as_deref(),
            self.stale,
        ))
    }
}

/// Adds a dash to single-dash long flags that the command tree knows.
pub fn normalize_args(args: Vec<String>, command: &clap::Command) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut current = command.clone();
    let mut iter = args.into_iter();
    if let Some(program) = iter.next() {
        out.push(program);
    }
    let mut passthrough = false;
    for arg in iter {
        if passthrough {
            out.push(arg);
            continue;
        }
        if arg == "--" {
            passthrough = true;
            out.push(arg);
            continue;
        }
        if let Some(sub) = current.find_subcommand(&arg) {
            current = sub.clone();
            out.push(arg);
            continue;
        }
        if arg.starts_with('-') && !arg.starts_with("--") && arg.len() > 2 {
            let name = arg[1..].split('=').next().unwrap_or("");
            if current.get_arguments().any(|a| a.get_long() == Some(name)) || name == "help" {
                out.push(format!("-{arg}"));
                continue;
            }
        }
        out.push(arg);
    }
    out
}

/// Entry point used by `main`; returns the process exit code.
pub fn main() -> i32 {
    let command = Cli::command();
    let args = normalize_args(std::env::args().collect(), &command);
    let matches = match command.try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let result = match cli.command {
        Command::Agent(args) => agent::run(*args),
        Command::Kv(command) => kv::run(command),
        Command::Operator(command) => operator::run(command),
        Command::Snapshot(command) => snapshot::run(command),
        Command::Members(args) => gossip::members(args),
        Command::Join(args) => gossip::join(args),
        Command::Leave(args) => gossip::leave(args),
        Command::ForceLeave(args) => gossip::force_leave(args),
        Command::Event(args) => gossip::event(args),
        Command::Keygen => gossip::keygen(),
        Command::Keyring(args) => gossip::keyring(args),
        Command::Rtt(args) => gossip::rtt(args),
        Command::Version => {
            println!("Consul v{}", crate::CONSUL_API_VERSION);
            println!("praetor v{}", crate::PRAETOR_VERSION);
            println!("Protocol 2 spoken by default, understands 2 to 3 (agent will automatically use protocol >2 when speaking to compatible agents)");
            Ok(0)
        }
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("{message}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalized(args: &[&str]) -> Vec<String> {
        normalize_args(
            args.iter().map(|s| s.to_string()).collect(),
            &Cli::command(),
        )
    }

    #[test]
    fn single_dash_long_flags_become_double() {
        assert_eq!(
            normalized(&[
                "praetor",
                "agent",
                "-dev",
                "-http-port=1",
                "-dns-port",
                "-1"
            ]),
            vec![
                "praetor",
                "agent",
                "--dev",
                "--http-port=1",
                "--dns-port",
                "-1"
            ]
        );
        assert_eq!(
            normalized(&["praetor", "kv", "put", "-flags=3", "key", "-not-a-flag"]),
            vec!["praetor", "kv", "put", "--flags=3", "key", "-not-a-flag"]
        );
    }

    #[test]
    fn agent_flags_parse() {
        let args = normalized(&[
            "praetor",
            "agent",
            "-dev",
            "-http-port",
            "18500",
            "-dns-port=-1",
            "-retry-join",
            "a",
            "-retry-join",
            "b",
        ]);
        let cli = Cli::try_parse_from(args).unwrap();
        let Command::Agent(agent) = cli.command else {
            panic!("expected agent")
        };
        assert!(agent.dev);
        assert_eq!(agent.http_port, Some(18500));
        assert_eq!(agent.dns_port, Some(-1));
        assert_eq!(agent.retry_join, vec!["a", "b"]);
    }
}
