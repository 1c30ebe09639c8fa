//! `praetor snapshot save|restore|inspect`.

use super::HttpFlags;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Saves the cluster state to FILE.
    Save(FileArgs),
    /// Restores the cluster state from FILE (replicated to every server).
    Restore(FileArgs),
    /// Prints a snapshot file's metadata and contents summary.
    Inspect(InspectArgs),
}

#[derive(Args, Debug)]
pub struct FileArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    pub file: PathBuf,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// Output format: pretty or json (Consul's `-format`).
    #[arg(long = "format", default_value = "pretty")]
    pub format: String,
    pub file: PathBuf,
}

pub fn run(command: SnapshotCommand) -> Result<i32, String> {
    match command {
        SnapshotCommand::Save(args) => {
            let response = args
                .http
                .client()?
                .ok("GET", "/v1/snapshot", None)
                .map_err(|e| format!("Error saving snapshot: {e}"))?;
            // Verify before keeping it, as Consul does.
            crate::api::snapshot::inspect(&response.body)
                .map_err(|e| format!("Error verifying snapshot: {e}"))?;
            let tmp = args.file.with_extension("tmp");
            std::fs::write(&tmp, &response.body)
                .map_err(|e| format!("Error writing snapshot file: {e}"))?;
            std::fs::rename(&tmp, &args.file)
                .map_err(|e| format!("Error writing snapshot file: {e}"))?;
            let index = response.header("X-Consul-Index").unwrap_or("0");
            println!("Saved and verified snapshot to index {index}");
            Ok(0)
        }
        SnapshotCommand::Restore(args) => {
            let data = std::fs::read(&args.file)
                .map_err(|e| format!("Error opening snapshot file: {e}"))?;
            args.http
                .client()?
                .ok("PUT", "/v1/snapshot", Some(&data))
                .map_err(|e| format!("Error restoring snapshot: {e}"))?;
            println!("Restored snapshot");
            Ok(0)
        }
        SnapshotCommand::Inspect(args) => {
            let data = std::fs::read(&args.file)
                .map_err(|e| format!("Error opening snapshot file: {e}"))?;
            let text = match args.format.as_str() {
                "pretty" => crate::api::snapshot::inspect(&data),
                "json" => crate::api::snapshot::inspect_json(&data),
                other => return Err(format!("Unknown format: {other}")),
            }
            .map_err(|e| format!("Error inspecting snapshot: {e}"))?;
            print!("{text}");
            Ok(0)
        }
    }
}
