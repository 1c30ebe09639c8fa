//! `praetor connect ca get-config|set-config`, as `consul connect` names them.

use super::HttpFlags;
use clap::{Args, Subcommand};

#[derive(Subcommand, Debug)]
pub enum ConnectCommand {
    /// Reads and changes the Connect CA's configuration.
    #[command(subcommand)]
    Ca(Box<CaCommand>),
}

#[derive(Subcommand, Debug)]
pub enum CaCommand {
    /// Prints the CA configuration.
    GetConfig(GetConfigArgs),
    /// Replaces the CA configuration from a JSON file (rotating the root when the key
    /// type, key size or root lifetime changes).
    SetConfig(SetConfigArgs),
}

#[derive(Args, Debug)]
pub struct GetConfigArgs {
    #[command(flatten)]
    pub http: HttpFlags,
}

#[derive(Args, Debug)]
pub struct SetConfigArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// The JSON file with the new configuration (`Provider`, `Config`).
    #[arg(long = "config-file")]
    pub config_file: Option<String>,
}

pub fn run(command: ConnectCommand) -> Result<i32, String> {
    match command {
        ConnectCommand::Ca(command) => match *command {
            CaCommand::GetConfig(args) => get_config(args),
            CaCommand::SetConfig(args) => set_config(args),
        },
    }
}

fn get_config(args: GetConfigArgs) -> Result<i32, String> {
    let client = args.http.client()?;
    let response = client
        .ok("GET", "/v1/connect/ca/configuration", None)
        .map_err(|e| format!("Error request CA configuration: {e}"))?;
    let value: serde_json::Value =
        serde_json::from_slice(&response.body).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"\t");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(&value, &mut serializer).map_err(|e| e.to_string())?;
    println!("{}", String::from_utf8_lossy(&out));
    Ok(0)
}

fn set_config(args: SetConfigArgs) -> Result<i32, String> {
    let Some(path) = args.config_file.filter(|p| !p.is_empty()) else {
        return Err("-config-file must be set".to_string());
    };
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("Error reading config file: {e}"))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("Error parsing config file: {e}"))?;
    let client = args.http.client()?;
    client
        .ok(
            "PUT",
            "/v1/connect/ca/configuration",
            Some(value.to_string().as_bytes()),
        )
        .map_err(|e| format!("Error setting CA configuration: {e}"))?;
    println!("Configuration updated!");
    Ok(0)
}
