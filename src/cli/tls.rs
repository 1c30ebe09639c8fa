//! `praetor tls ca create` and `praetor tls cert create`: Consul's certificate commands, with
//! Consul's flags, defaults, file names and output lines.
//!
//! Files go to the current directory (CA paths given with `-ca`/`-key` are taken as given): `<domain>-agent-ca.pem` and `<domain>-agent-ca-key.pem`
//! for the CA (refused if either exists); `<dc>-<kind>-<domain>-<n>.pem` and
//! `<dc>-<kind>-<domain>-<n>-key.pem` for certificates, with the first `n` from 0 for which
//! neither file exists. Keys are written with mode 0600, certificates 0644, each through a
//! temporary file renamed into place so a half-written file never carries the final name.

use crate::tls::generate::{self, CaOptions, CertKind, CertOptions};
use clap::{Args, Subcommand};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Most certificate files of one kind tried before giving up on a free index (Consul's).
const CERT_FILE_INDEX_MAX: u32 = 10_000;
/// Largest CA certificate or key file read.
const CA_FILE_BYTES_MAX: u64 = 1 << 20;

#[derive(Subcommand, Debug)]
pub enum TlsCommand {
    /// Creates and manages the agent CA.
    #[command(subcommand)]
    Ca(CaCommand),
    /// Creates agent certificates signed by the agent CA.
    #[command(subcommand)]
    Cert(CertCommand),
}

#[derive(Subcommand, Debug)]
pub enum CaCommand {
    /// Creates a new agent CA (`<domain>-agent-ca.pem` and its key).
    Create(CaCreateArgs),
}

#[derive(Subcommand, Debug)]
pub enum CertCommand {
    /// Creates a new certificate for a server, a client agent or the CLI.
    Create(CertCreateArgs),
}

#[derive(Args, Debug)]
pub struct CaCreateArgs {
    /// Days the CA is valid for (about 5 years).
    #[arg(long, default_value_t = generate::CA_DAYS_DEFAULT)]
    pub days: u32,
    /// The cluster's DNS domain; names the files and, with -name-constraint, the constraint.
    #[arg(long, default_value = "consul")]
    pub domain: String,
    /// Restrict the CA to sign only localhost and names in -domain and
    /// -additional-name-constraint.
    #[arg(long = "name-constraint")]
    pub name_constraint: bool,
    /// Another permitted DNS domain (repeatable; with -name-constraint).
    #[arg(long = "additional-name-constraint")]
    pub additional_name_constraint: Vec<String>,
    /// The CA's common name (default: "Consul Agent CA <serial>").
    #[arg(long = "common-name")]
    pub common_name: Option<String>,
}

#[derive(Args, Debug)]
pub struct CertCreateArgs {
    /// The CA certificate.
    #[arg(long, default_value = "#DOMAIN#-agent-ca.pem")]
    pub ca: String,
    /// The CA's private key.
    #[arg(long, default_value = "#DOMAIN#-agent-ca-key.pem")]
    pub key: String,
    /// A server certificate (server.<dc>.<domain>).
    #[arg(long)]
    pub server: bool,
    /// A client agent certificate (client.<dc>.<domain>).
    #[arg(long)]
    pub client: bool,
    /// A CLI certificate (cli.<dc>.<domain>).
    #[arg(long)]
    pub cli: bool,
    /// With -server: also name <node>.server.<dc>.<domain>.
    #[arg(long)]
    pub node: Option<String>,
    /// Days the certificate is valid for.
    #[arg(long, default_value_t = generate::CERT_DAYS_DEFAULT)]
    pub days: u32,
    /// The datacenter named in the certificate and its file name.
    #[arg(long, default_value = "dc1")]
    pub dc: String,
    /// The cluster's DNS domain named in the certificate and its file name.
    #[arg(long, default_value = "consul")]
    pub domain: String,
    /// An extra DNS name (repeatable; localhost is always included).
    #[arg(long = "additional-dnsname")]
    pub additional_dnsname: Vec<String>,
    /// An extra IP address (repeatable; 127.0.0.1 is always included).
    #[arg(long = "additional-ipaddress")]
    pub additional_ipaddress: Vec<String>,
}

pub fn run(command: TlsCommand) -> Result<i32, String> {
    match command {
        TlsCommand::Ca(CaCommand::Create(args)) => ca_create(&args),
        TlsCommand::Cert(CertCommand::Create(args)) => cert_create(&args),
    }
}

/// Writes `contents` to `path` (which must not exist) with `mode`, through a temporary file.
fn write_new(path: &Path, contents: &str, mode: u32) -> Result<(), String> {
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temporary)?;
        file.write_all(contents.as_bytes())?;
        file.sync_all()?;
        // `hard_link` fails if the final name appeared meanwhile: never overwrite.
        std::fs::hard_link(&temporary, path)?;
        std::fs::remove_file(&temporary)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result.map_err(|e| format!("Error writing {}: {e}", path.display()))
}

fn ca_create(args: &CaCreateArgs) -> Result<i32, String> {
    let certificate = PathBuf::from(format!("{}-agent-ca.pem", args.domain));
    let key = PathBuf::from(format!("{}-agent-ca-key.pem", args.domain));
    for path in [&certificate, &key] {
        if path.exists() {
            return Err(format!("{} already exists.", path.display()));
        }
    }
    let (certificate_pem, key_pem) = generate::generate_ca(&CaOptions {
        days: args.days,
        domain: args.domain.clone(),
        name_constraint: args.name_constraint,
        additional_name_constraints: args.additional_name_constraint.clone(),
        common_name: args.common_name.clone(),
    })?;
    write_new(&certificate, &certificate_pem, 0o644)?;
    println!("==> Saved {}", certificate.display());
    write_new(&key, &key_pem, 0o600)?;
    println!("==> Saved {}", key.display());
    Ok(0)
}

fn read_small(path: &Path, what: &str) -> Result<String, String> {
    let data = crate::tls::files::read_bounded(path, CA_FILE_BYTES_MAX, what)?;
    String::from_utf8(data).map_err(|_| format!("{what} {}: not a PEM file", path.display()))
}

fn cert_create(args: &CertCreateArgs) -> Result<i32, String> {
    if args.ca.is_empty() {
        return Err("Please provide the ca".to_string());
    }
    if args.key.is_empty() {
        return Err("Please provide the key".to_string());
    }
    let kind = match (args.server, args.client, args.cli) {
        (true, false, false) => CertKind::Server,
        (false, true, false) => CertKind::Client,
        (false, false, true) => CertKind::Cli,
        _ => return Err("Please provide either -server, -client, or -cli".to_string()),
    };
    if args.node.is_some() && kind != CertKind::Server {
        return Err("-node requires -server".to_string());
    }
    let ip_addresses = args
        .additional_ipaddress
        .iter()
        .filter(|text| !text.trim().is_empty())
        .map(|text| {
            text.trim()
                .parse::<IpAddr>()
                .map_err(|_| format!("-additional-ipaddress: {text:?} is not an IP address"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let prefix = format!("{}-{}-{}", args.dc, kind.name(), args.domain);
    let (certificate, key) = free_file_names(&prefix)?;
    let ca_file = PathBuf::from(args.ca.replacen("#DOMAIN#", &args.domain, 1));
    let key_file = PathBuf::from(args.key.replacen("#DOMAIN#", &args.domain, 1));
    let ca_pem = read_small(&ca_file, "Error reading CA:")?;
    let ca_key_pem = read_small(&key_file, "Error reading CA key:")?;
    if kind == CertKind::Server {
        println!("==> WARNING: Server Certificates grants authority to become a");
        println!("    server and access all state in the cluster including root keys");
        println!("    and all ACL tokens. Do not distribute them to production hosts");
        println!("    that are not server nodes. Store them as securely as CA keys.");
    }
    println!("==> Using {} and {}", ca_file.display(), key_file.display());
    let options = CertOptions {
        kind,
        datacenter: args.dc.clone(),
        domain: args.domain.clone(),
        node: args.node.clone(),
        additional_dns_names: args.additional_dnsname.clone(),
        additional_ip_addresses: ip_addresses,
        days: args.days,
        not_before: None,
    };
    let (certificate_pem, key_pem) = generate::generate_cert(&ca_pem, &ca_key_pem, &options)?;
    write_new(&certificate, &certificate_pem, 0o644)?;
    println!("==> Saved {}", certificate.display());
    write_new(&key, &key_pem, 0o600)?;
    println!("==> Saved {}", key.display());
    Ok(0)
}

/// The first `<prefix>-<n>.pem` / `<prefix>-<n>-key.pem` pair of which neither file exists.
fn free_file_names(prefix: &str) -> Result<(PathBuf, PathBuf), String> {
    for index in 0..=CERT_FILE_INDEX_MAX {
        let certificate = PathBuf::from(format!("{prefix}-{index}.pem"));
        let key = PathBuf::from(format!("{prefix}-{index}-key.pem"));
        if !certificate.exists() && !key.exists() {
            return Ok((certificate, key));
        }
    }
    Err("Could not find a filename that doesn't already exist".to_string())
}
