//! The `praetor` command line: the agent and the operator commands.
//!
//! Consul's flags are Go flags: one dash (`-dev`, `-http-port=8500`). clap wants two for long
//! flags, so [`normalize_args`] adds the second dash to any argument that names a long flag
//! of the (sub)command being parsed — and only those, so values and child-command arguments
//! that happen to start with a dash pass through untouched.
//!
//! Every command exits non-zero with one readable line on error.

pub mod acl;
pub mod agent;
pub mod catalog;
pub mod client;
pub mod config;
pub mod connect;
pub mod debug;
pub mod envoy;
pub mod gossip;
pub mod intention;
pub mod kv;
pub mod lock;
pub mod maint;
pub mod operator;
pub mod ops;
pub mod services;
pub mod snapshot;
pub mod tls;
pub mod watch;

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
    /// Lists datacenters, nodes and services in the catalog.
    #[command(subcommand)]
    Catalog(catalog::CatalogCommand),
    /// Registers and deregisters services with the local agent.
    #[command(subcommand)]
    Services(services::ServicesCommand),
    /// Puts the node or a service into maintenance mode, or lists what is.
    Maint(maint::MaintArgs),
    /// Operator tools: the Raft configuration and leadership.
    #[command(subcommand)]
    Operator(operator::OperatorCommand),
    /// Saves, restores and inspects snapshots of the cluster state.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCommand),
    /// Runs a command while holding a lock (or, with -n > 1, a semaphore slot).
    Lock(Box<lock::LockArgs>),
    /// Watches a view (key, prefix, services, nodes, service, checks, event) and runs a
    /// handler on every change.
    Watch(Box<watch::WatchArgs>),
    /// Prints the Consul API version praetor implements and praetor's own version.
    Version(VersionArgs),
    /// Lists the members of the agent's gossip pool.
    Members(gossip::MembersArgs),
    /// Tells the agent to join a gossip pool through the given addresses.
    Join(gossip::JoinArgs),
    /// Makes the agent leave the cluster gracefully and shut down.
    Leave(gossip::LeaveArgs),
    /// Forces a failed member into the left state (or forgets it with -prune).
    ForceLeave(gossip::ForceLeaveArgs),
    /// Makes the agent reload its configuration (services, checks, TLS certificates).
    Reload(gossip::ReloadArgs),
    /// Fires a user event to the cluster.
    Event(gossip::EventArgs),
    /// Generates a new gossip encryption key.
    Keygen,
    /// Lists, installs, switches and removes gossip encryption keys across the pool.
    Keyring(gossip::KeyringArgs),
    /// Estimates the round-trip time between two nodes from their network coordinates.
    Rtt(gossip::RttArgs),
    /// Creates the agent CA and agent certificates (Consul's file names and names).
    #[command(subcommand)]
    Tls(tls::TlsCommand),
    /// Manages ACL tokens, policies, roles, auth methods and binding rules.
    #[command(subcommand)]
    Acl(Box<acl::AclCommand>),
    /// Logs in with an auth method: trades a bearer token for an ACL token.
    Login(acl::LoginArgs),
    /// Deletes the token a login created.
    Logout(acl::LogoutArgs),
    /// Streams the agent's log lines as they are written.
    Monitor(ops::MonitorArgs),
    /// Prints the agent's runtime statistics for operators.
    Info(ops::InfoArgs),
    /// Checks config files and directories as the agent would load them.
    Validate(ops::ValidateArgs),
    /// Records an archive of the agent's state, metrics, logs and host for diagnosis.
    Debug(Box<debug::DebugArgs>),
    /// Writes, reads, lists and deletes config entries.
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Creates, checks, reads, deletes and matches intentions.
    #[command(subcommand)]
    Intention(intention::IntentionCommand),
    /// The service mesh: the CA's configuration and the built-in proxy.
    #[command(subcommand)]
    Connect(connect::ConnectCommand),
}

/// Flags every HTTP-speaking command takes, as Consul's CLI names them (its client, server
/// and namespace flag sets). Each falls back to Consul's environment variable; see
/// [`client::ClientOptions::resolve`] for the precedence.
#[derive(Args, Debug, Clone, Default)]
pub struct HttpFlags {
    /// Address of the agent's HTTP API: `host:port`, `http://…`, `https://…` or
    /// `unix:///path` (default: $CONSUL_HTTP_ADDR or 127.0.0.1:8500).
    #[arg(long = "http-addr")]
    pub http_addr: Option<String>,
    /// ACL token (default: $CONSUL_HTTP_TOKEN).
    #[arg(long)]
    pub token: Option<String>,
    /// File holding the ACL token; wins over -token (default: $CONSUL_HTTP_TOKEN_FILE).
    #[arg(long = "token-file")]
    pub token_file: Option<String>,
    /// CA certificate file for HTTPS (default: $CONSUL_CACERT).
    #[arg(long = "ca-file")]
    pub ca_file: Option<String>,
    /// Directory of CA certificates for HTTPS (default: $CONSUL_CAPATH).
    #[arg(long = "ca-path")]
    pub ca_path: Option<String>,
    /// Client certificate for HTTPS (default: $CONSUL_CLIENT_CERT).
    #[arg(long = "client-cert")]
    pub client_cert: Option<String>,
    /// Client key for HTTPS (default: $CONSUL_CLIENT_KEY).
    #[arg(long = "client-key")]
    pub client_key: Option<String>,
    /// Server name the agent's certificate must carry (default: $CONSUL_TLS_SERVER_NAME,
    /// else the address's host).
    #[arg(long = "tls-server-name")]
    pub tls_server_name: Option<String>,
    /// Datacenter to query (default: the agent's).
    #[arg(long)]
    pub datacenter: Option<String>,
    /// Allow any server to answer, not only the leader.
    #[arg(long)]
    pub stale: bool,
    /// Namespace (Consul Enterprise; refused, default: $CONSUL_NAMESPACE).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Admin partition (Consul Enterprise; refused, default: $CONSUL_PARTITION).
    #[arg(long)]
    pub partition: Option<String>,
}

impl HttpFlags {
    /// The client these flags and the environment describe.
    pub fn client(&self) -> Result<client::Client, String> {
        let options = client::ClientOptions::resolve(self, &client::process_env)
            .map_err(|e| format!("Error initializing client: {e}"))?;
        Ok(client::Client::new(options))
    }
}

#[derive(Args, Debug)]
pub struct VersionArgs {
    /// Output format: pretty or json.
    #[arg(long, default_value = "pretty")]
    pub format: String,
}

/// Consul's RPC protocol versions, as `consul version` reports them.
const RPC_PROTOCOL_DEFAULT: u32 = 2;
const RPC_PROTOCOL_MIN: u32 = 2;
const RPC_PROTOCOL_MAX: u32 = 3;

/// `version`: Consul's output, with praetor's own version after Consul's line in the pretty
/// format. praetor records no build date; the JSON carries Go's zero time there, as a Consul
/// built without one would.
fn version(args: VersionArgs) -> Result<i32, String> {
    match args.format.as_str() {
        "pretty" => {
            println!("Consul v{}", crate::CONSUL_API_VERSION);
            println!("praetor v{}", crate::PRAETOR_VERSION);
            println!(
                "Protocol {RPC_PROTOCOL_DEFAULT} spoken by default, understands {RPC_PROTOCOL_MIN} to {RPC_PROTOCOL_MAX} (agent will automatically use protocol >{RPC_PROTOCOL_DEFAULT} when speaking to compatible agents)"
            );
        }
        "json" => {
            let info = serde_json::json!({
                "Version": crate::CONSUL_API_VERSION,
                "Revision": "",
                "Prerelease": "",
                "BuildDate": "0001-01-01T00:00:00Z",
                "RPC": {
                    "Default": RPC_PROTOCOL_DEFAULT,
                    "Min": RPC_PROTOCOL_MIN,
                    "Max": RPC_PROTOCOL_MAX,
                },
            });
            println!(
                "{}",
                crate::cli::json_indented(&info)
                    .map_err(|e| format!("Failed to marshal version info: {e}"))?
            );
        }
        other => return Err(format!("Unknown format: {other}")),
    }
    Ok(0)
}

/// JSON indented with three spaces, as Consul's CLI prints it (`json.MarshalIndent(v, "", "   ")`).
pub fn json_indented(value: &serde_json::Value) -> Result<String, String> {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"   ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(value, &mut serializer).map_err(|e| e.to_string())?;
    String::from_utf8(out).map_err(|e| e.to_string())
}

/// Consul's CLI answers `-v`, `-version` and `--version` before any command, as `version`.
fn version_flag_as_command(mut args: Vec<String>) -> Vec<String> {
    if args
        .get(1)
        .is_some_and(|a| matches!(a.as_str(), "-v" | "-version" | "--version"))
    {
        args[1] = "version".to_string();
    }
    args
}

/// Commands whose trailing arguments are a child command line: after this many positional
/// arguments, everything passes through untouched, as Go's flag parsing stops at the first
/// non-flag argument (`lock PREFIX CMD…`, `watch … CMD…`).
fn leading_positionals_before_child(command: &str) -> Option<usize> {
    match command {
        "lock" => Some(1),
        "watch" => Some(0),
        _ => None,
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
    // For commands with a child command line: positionals still expected before it, and
    // whether the previous argument was a flag waiting for its value.
    let mut positionals_left: Option<usize> = None;
    let mut value_expected = false;
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
        if let Some(left) = positionals_left {
            if value_expected {
                value_expected = false;
                out.push(arg);
                continue;
            }
            if !arg.starts_with('-') || arg == "-" {
                if left == 0 {
                    // The child command starts here; `--` keeps clap off its flags.
                    out.push("--".to_string());
                    out.push(arg);
                    passthrough = true;
                } else {
                    out.push(arg);
                    positionals_left = Some(left - 1);
                    if left == 1 {
                        out.push("--".to_string());
                        passthrough = true;
                    }
                }
                continue;
            }
            let name = arg.trim_start_matches('-').split('=').next().unwrap_or("");
            let known = current.get_arguments().find(|a| {
                a.get_long() == Some(name) || a.get_short().is_some_and(|c| name == c.to_string())
            });
            if let Some(flag) = known {
                value_expected = !arg.contains('=')
                    && flag.get_action().takes_values()
                    && !flag.is_require_equals_set();
                let is_long = flag.get_long() == Some(name) && name.len() > 1;
                if is_long && !arg.starts_with("--") {
                    out.push(format!("-{arg}"));
                    continue;
                }
            }
            out.push(arg);
            continue;
        }
        if let Some(sub) = current.find_subcommand(&arg) {
            current = sub.clone();
            positionals_left = leading_positionals_before_child(&arg);
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
    let args = normalize_args(
        version_flag_as_command(std::env::args().collect()),
        &command,
    );
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
    // A command whose output is cut short (`praetor members | head -1`) ends quietly, as
    // Consul's CLI does, instead of panicking on the closed pipe: the default SIGPIPE
    // action ends the process. Commands that run children or serve (agent, lock, watch,
    // connect, monitor, debug) keep Rust's ignored SIGPIPE and handle write errors.
    let ends_on_closed_pipe = !matches!(
        cli.command,
        Command::Agent(_)
            | Command::Lock(_)
            | Command::Watch(_)
            | Command::Connect(_)
            | Command::Monitor(_)
            | Command::Debug(_)
    );
    if ends_on_closed_pipe {
        // SAFETY: sets the signal's disposition back to the default before any thread
        // exists; no handler function is involved.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let result = match cli.command {
        Command::Agent(args) => agent::run(*args),
        Command::Kv(command) => kv::run(command),
        Command::Catalog(command) => catalog::run(command),
        Command::Services(command) => services::run(command),
        Command::Maint(args) => maint::run(args),
        Command::Operator(command) => operator::run(command),
        Command::Snapshot(command) => snapshot::run(command),
        Command::Members(args) => gossip::members(args),
        Command::Join(args) => gossip::join(args),
        Command::Leave(args) => gossip::leave(args),
        Command::ForceLeave(args) => gossip::force_leave(args),
        Command::Reload(args) => gossip::reload(args),
        Command::Event(args) => gossip::event(args),
        Command::Keygen => gossip::keygen(),
        Command::Keyring(args) => gossip::keyring(args),
        Command::Rtt(args) => gossip::rtt(args),
        Command::Tls(command) => tls::run(command),
        Command::Acl(command) => acl::run(*command),
        Command::Login(args) => acl::login(args),
        Command::Logout(args) => acl::logout(args),
        Command::Config(command) => config::run(command),
        Command::Intention(command) => intention::run(command),
        Command::Connect(command) => connect::run(command),
        Command::Lock(args) => lock::run(*args),
        Command::Watch(args) => watch::run(*args),
        Command::Version(args) => version(args),
        Command::Monitor(args) => ops::monitor(args),
        Command::Info(args) => ops::info(args),
        Command::Validate(args) => ops::validate(args),
        Command::Debug(args) => debug::run(*args),
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
    fn lock_child_commands_pass_through_untouched() {
        assert_eq!(
            normalized(&[
                "praetor",
                "lock",
                "-n",
                "2",
                "-name=x",
                "-timeout",
                "5s",
                "-verbose",
                "-shell=false",
                "svc/leader",
                "ls",
                "-name",
                "-la",
                "--",
                "-n"
            ]),
            vec![
                "praetor",
                "lock",
                "-n",
                "2",
                "--name=x",
                "--timeout",
                "5s",
                "--verbose",
                "--shell=false",
                "svc/leader",
                "--",
                "ls",
                "-name",
                "-la",
                "--",
                "-n"
            ]
        );
        let cli = Cli::try_parse_from(normalized(&[
            "praetor",
            "lock",
            "-n=3",
            "-http-addr",
            "1.2.3.4:8500",
            "p",
            "sh",
            "-c",
            "echo -n hi",
        ]))
        .unwrap();
        let Command::Lock(lock) = cli.command else {
            panic!("expected lock")
        };
        assert_eq!(lock.limit, 3);
        assert_eq!(lock.prefix.as_deref(), Some("p"));
        assert_eq!(lock.child, vec!["sh", "-c", "echo -n hi"]);
        assert_eq!(lock.http.http_addr.as_deref(), Some("1.2.3.4:8500"));
        assert!(lock.shell);
        // A prefix alone: the child is missing and `run` says so.
        let cli = Cli::try_parse_from(normalized(&["praetor", "lock", "p"])).unwrap();
        let Command::Lock(lock) = cli.command else {
            panic!("expected lock")
        };
        assert!(lock.child.is_empty());
    }

    #[test]
    fn watch_handlers_pass_through_untouched() {
        let cli = Cli::try_parse_from(normalized(&[
            "praetor",
            "watch",
            "-type=key",
            "-key",
            "k",
            "-passingonly",
            "cat",
            "-n",
        ]))
        .unwrap();
        let Command::Watch(watch) = cli.command else {
            panic!("expected watch")
        };
        assert_eq!(watch.watch_type.as_deref(), Some("key"));
        assert_eq!(watch.key.as_deref(), Some("k"));
        assert!(watch.passingonly);
        assert_eq!(watch.child, vec!["cat", "-n"]);
        let cli = Cli::try_parse_from(normalized(&[
            "praetor", "watch", "-type", "nodes", "-handler", "cat -n",
        ]))
        .unwrap();
        let Command::Watch(watch) = cli.command else {
            panic!("expected watch")
        };
        assert_eq!(watch.handler.as_deref(), Some("cat -n"));
        assert!(watch.child.is_empty());
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
        // `-https-port` starts with `-h`, clap's help flag, unless it is normalized first.
        let cli = Cli::try_parse_from(normalized(&[
            "praetor",
            "agent",
            "-dev",
            "-https-port",
            "8501",
            "-grpc-tls-port=-1",
        ]))
        .unwrap();
        let Command::Agent(agent) = cli.command else {
            panic!("expected agent")
        };
        assert_eq!(
            (agent.https_port, agent.grpc_tls_port),
            (Some(8501), Some(-1))
        );
        assert_eq!(
            agent.to_config_object()["ports"],
            serde_json::json!({"https": 8501, "grpc_tls": -1})
        );
    }

    /// Commands that never speak to an agent's HTTP API, by their path in the command tree.
    /// Every other command must take Consul's HTTP client flags; a new local-only command
    /// belongs here.
    const LOCAL_COMMANDS: [&str; 7] = [
        "agent",
        "validate",
        "version",
        "keygen",
        "tls ca create",
        "tls cert create",
        "snapshot inspect",
    ];

    /// Consul's flags for reaching the agent over HTTPS or a Unix socket (`-http-addr` takes
    /// `https://…` and `unix://…`).
    const CLIENT_TLS_FLAGS: [&str; 6] = [
        "http-addr",
        "ca-file",
        "ca-path",
        "client-cert",
        "client-key",
        "tls-server-name",
    ];

    fn leaf_commands(command: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
        let children: Vec<&clap::Command> = command
            .get_subcommands()
            .filter(|c| c.get_name() != "help")
            .collect();
        if children.is_empty() {
            out.push((path.trim().to_string(), command.clone()));
        }
        for child in children {
            leaf_commands(child, &format!("{path} {}", child.get_name()), out);
        }
    }

    #[test]
    fn every_client_command_takes_the_https_and_unix_socket_flags() {
        let mut leaves = Vec::new();
        leaf_commands(&Cli::command(), "", &mut leaves);
        let mut clients = 0;
        for (path, command) in &leaves {
            let flags: Vec<&str> = command
                .get_arguments()
                .filter_map(|a| a.get_long())
                .collect();
            if LOCAL_COMMANDS.contains(&path.as_str()) {
                assert!(
                    !flags.contains(&"http-addr"),
                    "`{path}` is listed as local but takes -http-addr"
                );
                continue;
            }
            clients += 1;
            for flag in CLIENT_TLS_FLAGS {
                assert!(
                    flags.contains(&flag),
                    "`praetor {path}` lacks -{flag}: flatten `HttpFlags` into it, or list it in LOCAL_COMMANDS if it never calls an agent"
                );
            }
            // The single-dash spelling reaches clap for each of them.
            let mut argv = vec!["praetor".to_string()];
            argv.extend(path.split(' ').map(str::to_string));
            argv.extend(CLIENT_TLS_FLAGS.iter().map(|f| format!("-{f}=x")));
            let normalized = normalize_args(argv, &Cli::command());
            for flag in CLIENT_TLS_FLAGS {
                assert!(
                    normalized.contains(&format!("--{flag}=x")),
                    "`{path}`: -{flag} is not normalized: {normalized:?}"
                );
            }
        }
        for local in LOCAL_COMMANDS {
            assert!(
                leaves.iter().any(|(path, _)| path == local),
                "LOCAL_COMMANDS names `{local}`, which is no command"
            );
        }
        assert!(clients >= 25, "only {clients} client commands found");
    }
}
