//! The `praetor` command line: the agent and the operator commands.
//!
//! Each command declares its flags once, as a clap `Args` struct whose doc comments are the
//! flags' descriptions. The command line itself is read as Consul's commands read theirs,
//! with Go's `flag` syntax ([`goflag`]), and the usage text is written in Consul's layout
//! from the same declarations ([`usage`]); clap only turns the canonical argument list
//! [`goflag::read`] produces into the typed structs.
//!
//! Every command exits non-zero with one readable line on error; a refused command line
//! adds one line pointing to the command's `-h`.

pub mod acl;
pub mod agent;
pub mod catalog;
pub mod client;
pub mod config;
pub mod connect;
pub mod debug;
pub mod envoy;
pub mod goflag;
pub mod gossip;
pub mod grpc_bootstrap;
pub mod intention;
pub mod kv;
pub mod lock;
pub mod maint;
pub mod operator;
pub mod ops;
pub mod peering;
pub mod services;
pub mod snapshot;
pub mod tls;
pub mod usage;
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
    /// Creates, checks, reads, lists, deletes and matches intentions.
    #[command(subcommand)]
    Intention(intention::IntentionCommand),
    /// The service mesh: the CA's configuration and the built-in proxy.
    #[command(subcommand)]
    Connect(connect::ConnectCommand),
    /// Cluster peering: generates and uses peering tokens, lists, reads and deletes peerings.
    #[command(subcommand)]
    Peering(peering::PeeringCommand),
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

/// JSON indented with three spaces, as Consul's CLI prints it (`json.MarshalIndent(v, "", "   ")`);
/// a struct keeps its fields' order, as Go's encoder does.
pub fn json_indented<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, String> {
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

/// The command tree as [`goflag::read`] and [`usage::render`] read it: clap's own help flag
/// and help subcommand are off (`-h` is read by `goflag`), and the tree is built, so every
/// argument's settings are resolved.
pub fn command_tree() -> clap::Command {
    fn without_clap_help(command: clap::Command) -> clap::Command {
        command
            .disable_help_flag(true)
            .disable_help_subcommand(true)
            .mut_subcommands(without_clap_help)
    }
    let mut tree = without_clap_help(Cli::command());
    tree.build();
    tree
}

/// The process's arguments; one that is not UTF-8 is refused rather than panicked on.
fn utf8_args() -> Result<Vec<String>, String> {
    std::env::args_os()
        .map(|a| {
            a.into_string()
                .map_err(|a| format!("argument is not valid UTF-8: {}", a.to_string_lossy()))
        })
        .collect()
}

/// A refused command line: the reason, then where the usage is.
fn refuse(path: &[String], message: &str) {
    eprintln!("{message}");
    eprintln!("See '{} -h' for usage.", goflag::full_name(path));
}

/// Entry point used by `main`; returns the process exit code.
pub fn main() -> i32 {
    let argv = match utf8_args() {
        Ok(argv) => argv,
        Err(message) => {
            eprintln!("{message}");
            return goflag::USAGE_EXIT_CODE;
        }
    };
    let tree = command_tree();
    let (path, args) = match goflag::read(&version_flag_as_command(argv), &tree) {
        goflag::Reading::Run { path, args } => (path, args),
        goflag::Reading::Help(path) => {
            print!("{}", usage::render(&tree, &path));
            return 0;
        }
        goflag::Reading::GroupUsage { path, code } => {
            eprint!("{}", usage::render(&tree, &path));
            return code;
        }
        goflag::Reading::Refuse {
            path,
            message,
            code,
        } => {
            refuse(&path, &message);
            return code;
        }
    };
    let cli = match tree
        .try_get_matches_from(args)
        .and_then(|matches| Cli::from_arg_matches(&matches))
    {
        Ok(cli) => cli,
        Err(e) => {
            refuse(&path, &goflag::clap_error_line(&e));
            return goflag::usage_exit_code(&path);
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
        Command::Peering(command) => peering::run(command),
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

    /// The struct clap builds from a command line read the Go way.
    fn parsed(args: &[&str]) -> Cli {
        let argv: Vec<String> = std::iter::once("praetor")
            .chain(args.iter().copied())
            .map(String::from)
            .collect();
        let tree = command_tree();
        match goflag::read(&argv, &tree) {
            goflag::Reading::Run { args, .. } => {
                let matches = tree.try_get_matches_from(args).unwrap();
                Cli::from_arg_matches(&matches).unwrap()
            }
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn lock_child_commands_pass_through_untouched() {
        let cli = parsed(&[
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
            "-n",
        ]);
        let Command::Lock(lock) = cli.command else {
            panic!("expected lock")
        };
        assert_eq!(lock.limit, 2);
        assert_eq!(lock.name.as_deref(), Some("x"));
        assert_eq!(lock.timeout, Some(std::time::Duration::from_secs(5)));
        assert!(lock.verbose && !lock.shell);
        assert_eq!(lock.prefix.as_deref(), Some("svc/leader"));
        assert_eq!(lock.child, vec!["ls", "-name", "-la", "--", "-n"]);
        let cli = parsed(&[
            "lock",
            "-n=3",
            "-http-addr",
            "1.2.3.4:8500",
            "p",
            "sh",
            "-c",
            "echo -n hi",
        ]);
        let Command::Lock(lock) = cli.command else {
            panic!("expected lock")
        };
        assert_eq!(lock.limit, 3);
        assert_eq!(lock.prefix.as_deref(), Some("p"));
        assert_eq!(lock.child, vec!["sh", "-c", "echo -n hi"]);
        assert_eq!(lock.http.http_addr.as_deref(), Some("1.2.3.4:8500"));
        assert!(lock.shell);
        // A prefix alone: the child is missing and `run` says so.
        let Command::Lock(lock) = parsed(&["lock", "p"]).command else {
            panic!("expected lock")
        };
        assert!(lock.child.is_empty());
    }

    #[test]
    fn watch_handlers_pass_through_untouched() {
        let cli = parsed(&[
            "watch",
            "-type=key",
            "-key",
            "k",
            "-passingonly",
            "cat",
            "-n",
        ]);
        let Command::Watch(watch) = cli.command else {
            panic!("expected watch")
        };
        assert_eq!(watch.watch_type.as_deref(), Some("key"));
        assert_eq!(watch.key.as_deref(), Some("k"));
        assert!(watch.passingonly);
        assert_eq!(watch.child, vec!["cat", "-n"]);
        let cli = parsed(&["watch", "-type", "nodes", "-handler", "cat -n"]);
        let Command::Watch(watch) = cli.command else {
            panic!("expected watch")
        };
        assert_eq!(watch.handler.as_deref(), Some("cat -n"));
        assert!(watch.child.is_empty());
    }

    #[test]
    fn agent_flags_parse() {
        let cli = parsed(&[
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
        let Command::Agent(agent) = cli.command else {
            panic!("expected agent")
        };
        assert!(agent.dev);
        assert_eq!(agent.http_port, Some(18500));
        assert_eq!(agent.dns_port, Some(-1));
        assert_eq!(agent.retry_join, vec!["a", "b"]);
        // `-https-port` starts with `-h`, the help flag's spelling, and is still itself.
        let cli = parsed(&["agent", "-dev", "-https-port", "8501", "-grpc-tls-port=-1"]);
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

    /// Only the flags given become config keys, under the names and nesting a config file
    /// uses, so files fill in the rest.
    #[test]
    fn agent_flags_become_the_config_keys_they_name_and_nothing_else() {
        let cli = parsed(&["agent"]);
        let Command::Agent(agent) = cli.command else {
            panic!("expected agent")
        };
        assert!(agent.to_config_object().is_empty());
        let cli = parsed(&[
            "agent",
            "-server",
            "-node",
            "n1",
            "-data-dir",
            "/d",
            "-ui-dir",
            "/ui",
            "-node-meta",
            "rack:r1",
            "-node-meta",
            "bare",
            "-retry-max",
            "3",
            "-log-json",
            "-http-port",
            "18500",
        ]);
        let Command::Agent(agent) = cli.command else {
            panic!("expected agent")
        };
        assert_eq!(
            serde_json::Value::Object(agent.to_config_object()),
            serde_json::json!({
                "server": true,
                "node_name": "n1",
                "data_dir": "/d",
                "ui_config": {"dir": "/ui"},
                "node_meta": {"rack": "r1", "bare": ""},
                "retry_max": 3,
                "log_json": true,
                "ports": {"http": 18500},
            })
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

    /// Every command of the tree, groups included, by path.
    fn all_commands(
        command: &clap::Command,
        path: &[String],
        out: &mut Vec<(Vec<String>, clap::Command)>,
    ) {
        out.push((path.to_vec(), command.clone()));
        for child in command.get_subcommands() {
            let mut child_path = path.to_vec();
            child_path.push(child.get_name().to_string());
            all_commands(child, &child_path, out);
        }
    }

    fn leaf_commands() -> Vec<(String, clap::Command)> {
        let mut all = Vec::new();
        all_commands(&command_tree(), &[], &mut all);
        all.into_iter()
            .filter(|(_, c)| !c.has_subcommands())
            .map(|(path, c)| (path.join(" "), c))
            .collect()
    }

    #[test]
    fn every_client_command_takes_the_https_and_unix_socket_flags() {
        let leaves = leaf_commands();
        let mut clients = 0;
        for (path, command) in &leaves {
            let flags: Vec<&str> = goflag::declared_flags(command)
                .map(goflag::flag_name)
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
            let goflag::Reading::Run { args, .. } = goflag::read(&argv, &command_tree()) else {
                panic!("`{path}` refused its HTTP flags");
            };
            for flag in CLIENT_TLS_FLAGS {
                assert!(
                    args.contains(&format!("--{flag}=x")),
                    "`{path}`: -{flag} is not passed on: {args:?}"
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

    /// Every flag of every command has a long name Go's syntax can reach, a one-line
    /// description for `-h`, and a kind the reader knows; every command has a summary.
    #[test]
    fn every_flag_is_described_in_one_line() {
        let mut all = Vec::new();
        all_commands(&command_tree(), &[], &mut all);
        let mut flags = 0;
        let mut problems = Vec::new();
        for (path, command) in &all {
            let name = goflag::full_name(path);
            if !path.is_empty() {
                let about = command
                    .get_about()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                if about.trim().is_empty() {
                    problems.push(format!("`{name}` has no summary"));
                }
            }
            for arg in goflag::declared_flags(command) {
                flags += 1;
                let Some(flag) = arg.get_long() else {
                    problems.push(format!("`{name}`: {:?} has no long name", arg.get_id()));
                    continue;
                };
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                if help.trim().is_empty() {
                    problems.push(format!("`{name} -{flag}` has no description"));
                }
                if help.contains('\n') {
                    problems.push(format!(
                        "`{name} -{flag}`'s description is more than one line: {help:?}"
                    ));
                }
                if arg.get_num_args().is_some_and(|n| n.max_values() > 1) {
                    problems.push(format!(
                        "`{name} -{flag}` takes several values per use, which Go's syntax cannot give"
                    ));
                }
                if matches!(
                    arg.get_action(),
                    clap::ArgAction::SetFalse | clap::ArgAction::Count
                ) {
                    problems.push(format!(
                        "`{name} -{flag}` has an action the reader does not translate"
                    ));
                }
            }
            if !command.has_subcommands() {
                let text = usage::render(&command_tree(), path);
                assert!(text.starts_with(&format!("Usage: {name}")), "{text}");
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
        assert!(flags > 300, "only {flags} flags found");
    }
}
