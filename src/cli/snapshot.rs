//! `praetor snapshot save|restore|inspect`, as Consul's `consul snapshot` commands.
//!
//! `inspect` reads an archive offline and summarizes it as Consul's does: the metadata (ID,
//! size, index, term, version), then one row per record type — Consul's name for the type,
//! how many records, and their bytes — largest first, and with `-kvdetails` the KV records
//! grouped by key prefix. The records and their sizes come from
//! [`crate::api::snapshot::visit_records`], which says how they are counted.

use super::HttpFlags;
use crate::api::snapshot::SNAPSHOT_STATE_BYTES_MAX;
use crate::proto::snapshot_archive;
use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Key depth `-kvdetails` groups by unless `-kvdepth` says otherwise (Consul's default).
const KV_DEPTH_DEFAULT: usize = 2;

#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Saves the cluster state to FILE.
    Save(FileArgs),
    /// Restores the cluster state from FILE (replicated to every server).
    Restore(FileArgs),
    /// Prints a snapshot file's metadata and its records' counts and sizes by type.
    Inspect(InspectArgs),
}

#[derive(Args, Debug)]
pub struct FileArgs {
    #[command(flatten)]
    pub http: HttpFlags,
    /// The snapshot file.
    pub file: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// Output format: pretty or json.
    #[arg(long = "format", default_value = "pretty")]
    pub format: String,
    /// Also break the KV records down by key prefix.
    #[arg(long)]
    pub kvdetails: bool,
    /// With -kvdetails: how many `/`-separated key segments a prefix has.
    #[arg(long, default_value_t = KV_DEPTH_DEFAULT)]
    pub kvdepth: usize,
    /// With -kvdetails: only keys starting with this prefix.
    #[arg(long)]
    pub kvfilter: Option<String>,
    /// The snapshot file.
    pub file: Option<PathBuf>,
}

/// The FILE argument, with Consul's message when it is missing (a second one is refused as
/// Consul refuses it, "Too many arguments (expected 1, got 2)", before the command runs).
fn one_file(file: &Option<PathBuf>) -> Result<&PathBuf, String> {
    file.as_ref()
        .ok_or_else(|| "Missing FILE argument".to_string())
}

pub fn run(command: SnapshotCommand) -> Result<i32, String> {
    match command {
        SnapshotCommand::Save(args) => {
            let file = one_file(&args.file)?;
            let response = args
                .http
                .client()?
                .ok("GET", "/v1/snapshot", None)
                .map_err(|e| format!("Error saving snapshot: {e}"))?;
            // Verify before keeping it, as Consul does.
            snapshot_archive::read_archive(&response.body, SNAPSHOT_STATE_BYTES_MAX)
                .and_then(|archive| crate::api::snapshot::verify_state(&archive.state))
                .map_err(|e| format!("Error verifying snapshot: {e}"))?;
            let tmp = file.with_extension("tmp");
            std::fs::write(&tmp, &response.body)
                .map_err(|e| format!("Error writing snapshot file: {e}"))?;
            std::fs::rename(&tmp, file).map_err(|e| format!("Error writing snapshot file: {e}"))?;
            let index = response.header("X-Consul-Index").unwrap_or("0");
            println!("Saved and verified snapshot to index {index}");
            Ok(0)
        }
        SnapshotCommand::Restore(args) => {
            let file = one_file(&args.file)?;
            let data =
                std::fs::read(file).map_err(|e| format!("Error opening snapshot file: {e}"))?;
            args.http
                .client()?
                .ok("PUT", "/v1/snapshot", Some(&data))
                .map_err(|e| format!("Error restoring snapshot: {e}"))?;
            println!("Restored snapshot");
            Ok(0)
        }
        SnapshotCommand::Inspect(args) => {
            let file = one_file(&args.file)?;
            let data =
                std::fs::read(file).map_err(|e| format!("Error opening snapshot file: {e}"))?;
            let archive = snapshot_archive::read_archive(&data, SNAPSHOT_STATE_BYTES_MAX)
                .map_err(|e| format!("Error reading snapshot: {e}"))?;
            let meta: Value = serde_json::from_slice(&archive.meta_json)
                .map_err(|e| format!("Error reading snapshot: meta.json is not JSON: {e}"))?;
            let kv_details = args.kvdetails.then(|| KvBreakdown {
                depth: args.kvdepth,
                filter: args.kvfilter.clone().unwrap_or_default(),
            });
            let summary = Summary::of(&meta, &archive.state, kv_details.as_ref())
                .map_err(|e| format!("Error extracting snapshot data: {e}"))?;
            let text = match args.format.as_str() {
                "pretty" => summary.pretty(),
                "json" => super::json_indented(&summary.json())?,
                other => {
                    return Err(format!(
                        "Error outputting enhanced snapshot data: Unknown format: {other}"
                    ))
                }
            };
            println!("{text}");
            Ok(0)
        }
    }
}

/// `-kvdetails`: how KV records are grouped.
struct KvBreakdown {
    depth: usize,
    filter: String,
}

/// Records of one type (or KV records under one prefix): how many, and their bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
struct TypeStats {
    name: String,
    sum: usize,
    count: usize,
}

/// What `inspect` prints.
struct Summary {
    meta: Value,
    stats: Vec<TypeStats>,
    total_size: usize,
    kv_stats: Option<Vec<TypeStats>>,
    total_size_kv: usize,
}

/// Consul's `OutputFormat` as `-format=json` prints it.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct JsonOutput<'a> {
    meta: JsonMeta,
    stats: &'a [TypeStats],
    #[serde(rename = "StatsKV")]
    stats_kv: Option<&'a [TypeStats]>,
    total_size: usize,
    #[serde(rename = "TotalSizeKV")]
    total_size_kv: usize,
}

/// Consul's `MetadataInfo`.
#[derive(Serialize)]
struct JsonMeta {
    #[serde(rename = "ID")]
    id: Value,
    #[serde(rename = "Size")]
    size: Value,
    #[serde(rename = "Index")]
    index: Value,
    #[serde(rename = "Term")]
    term: Value,
    #[serde(rename = "Version")]
    version: Value,
}

/// Adds records to per-name statistics.
#[derive(Default)]
struct Tally {
    by_name: BTreeMap<String, TypeStats>,
    total: usize,
}

impl Tally {
    fn add(&mut self, name: &str, size: usize) {
        let stats = self
            .by_name
            .entry(name.to_string())
            .or_insert_with(|| TypeStats {
                name: name.to_string(),
                ..TypeStats::default()
            });
        stats.sum += size;
        stats.count += 1;
        self.total += size;
    }

    /// Largest first, then by name, as Consul sorts them.
    fn sorted(self) -> Vec<TypeStats> {
        let mut stats: Vec<TypeStats> = self.by_name.into_values().collect();
        stats.sort_by(|a, b| b.sum.cmp(&a.sum).then_with(|| a.name.cmp(&b.name)));
        stats
    }
}

impl Summary {
    fn of(meta: &Value, state: &[u8], kv: Option<&KvBreakdown>) -> Result<Summary, String> {
        let mut tally = Tally::default();
        let mut kv_tally = Tally::default();
        crate::api::snapshot::visit_records(state, |record_type, kv_key, size_bytes| {
            tally.add(record_type, size_bytes);
            if let (Some(breakdown), Some(key)) = (kv, kv_key) {
                if let Some(prefix) = breakdown.prefix_of(key) {
                    kv_tally.add(&prefix, size_bytes);
                }
            }
        })?;
        let total_size = tally.total;
        let total_size_kv = kv_tally.total;
        Ok(Summary {
            meta: meta.clone(),
            stats: tally.sorted(),
            total_size,
            kv_stats: kv.map(|_| kv_tally.sorted()),
            total_size_kv,
        })
    }

    fn meta_field(&self, key: &str) -> Value {
        self.meta.get(key).cloned().unwrap_or(Value::Null)
    }

    /// Consul's tabwriter layout: the metadata, a blank line, the type table, and with
    /// `-kvdetails` a blank line and the prefix table.
    fn pretty(&self) -> String {
        let text = |v: Value| match v {
            Value::String(s) => s,
            Value::Null => String::new(),
            other => other.to_string(),
        };
        let mut meta = Table::default();
        for key in ["ID", "Size", "Index", "Term", "Version"] {
            meta.row(vec![format!(" {key}"), text(self.meta_field(key))]);
        }
        let mut out = meta.render();
        out.push('\n');
        out.push_str(&stats_table(" Type", &self.stats, self.total_size).render());
        if let Some(kv_stats) = &self.kv_stats {
            out.push('\n');
            out.push_str(&stats_table(" Key Name", kv_stats, self.total_size_kv).render());
        }
        out.trim_end_matches('\n').to_string()
    }

    /// Consul's JSON layout (`OutputFormat`), fields in Consul's order.
    fn json(&self) -> JsonOutput<'_> {
        JsonOutput {
            meta: JsonMeta {
                id: self.meta_field("ID"),
                size: self.meta_field("Size"),
                index: self.meta_field("Index"),
                term: self.meta_field("Term"),
                version: self.meta_field("Version"),
            },
            stats: &self.stats,
            stats_kv: self.kv_stats.as_deref(),
            total_size: self.total_size,
            total_size_kv: self.total_size_kv,
        }
    }
}

impl KvBreakdown {
    /// The prefix a key is counted under: its first `depth` segments, or `None` when the
    /// filter leaves it out.
    fn prefix_of(&self, key: &str) -> Option<String> {
        if !key.starts_with(&self.filter) {
            return None;
        }
        let segments: Vec<&str> = key.split('/').collect();
        let depth = self.depth.min(segments.len());
        Some(segments[..depth].join("/"))
    }
}

/// A type table: header, rule, one row per type, rule, total.
fn stats_table(title: &str, stats: &[TypeStats], total: usize) -> Table {
    let mut table = Table::default();
    let rule = || vec![" ----".to_string(), "----".to_string(), "----".to_string()];
    table.row(vec![title.to_string(), "Count".into(), "Size".into()]);
    table.row(rule());
    for s in stats {
        table.row(vec![
            format!(" {}", s.name),
            s.count.to_string(),
            byte_size(s.sum as u64),
        ]);
    }
    table.row(rule());
    table.row(vec![
        " Total".into(),
        String::new(),
        byte_size(total as u64),
    ]);
    table
}

/// Rows laid out as Go's `tabwriter.NewWriter(w, 8, 8, 6, ' ', 0)` lays out cells ended by
/// a tab: every cell but a row's last is padded to its column's widest cell plus 6, at
/// least 8; the last cell is written as it is.
#[derive(Default)]
struct Table {
    rows: Vec<Vec<String>>,
}

/// `tabwriter`'s minimum cell width and padding, as Consul's inspect sets them.
const TABLE_CELL_WIDTH_MIN: usize = 8;
const TABLE_CELL_PADDING: usize = 6;

impl Table {
    fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns.saturating_sub(1))
            .map(|column| {
                let widest = self
                    .rows
                    .iter()
                    .filter(|row| row.len() > column + 1)
                    .map(|row| row[column].chars().count())
                    .max()
                    .unwrap_or(0);
                (widest + TABLE_CELL_PADDING).max(TABLE_CELL_WIDTH_MIN)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    out.push_str(cell);
                } else {
                    out.push_str(&format!("{cell:<width$}", width = widths[i]));
                }
            }
            out.push('\n');
        }
        out
    }
}

/// Consul's `ByteSize`: one decimal unless it is `.0`, in B, KB, MB, GB or TB of 1024.
fn byte_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TB"),
        (1 << 30, "GB"),
        (1 << 20, "MB"),
        (1 << 10, "KB"),
    ];
    if bytes == 0 {
        return "0".to_string();
    }
    let (value, unit) = UNITS
        .iter()
        .find(|(size, _)| bytes >= *size)
        .map_or((bytes as f64, "B"), |(size, unit)| {
            (bytes as f64 / *size as f64, *unit)
        });
    let text = format!("{value:.1}");
    format!("{}{unit}", text.strip_suffix(".0").unwrap_or(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_read_as_consuls() {
        assert_eq!(byte_size(0), "0");
        assert_eq!(byte_size(12), "12B");
        assert_eq!(byte_size(1024), "1KB");
        assert_eq!(byte_size(12_595), "12.3KB");
        assert_eq!(byte_size(3 << 20), "3MB");
    }

    #[test]
    fn tables_lay_out_as_consuls_tabwriter() {
        let stats = vec![
            TypeStats {
                name: "KVS".into(),
                sum: 12_595,
                count: 27,
            },
            TypeStats {
                name: "CoordinateBatchUpdate".into(),
                sum: 166,
                count: 1,
            },
        ];
        let text = stats_table(" Type", &stats, 12_761).render();
        assert_eq!(
            text,
            concat!(
                " Type                       Count      Size\n",
                " ----                       ----       ----\n",
                " KVS                        27         12.3KB\n",
                " CoordinateBatchUpdate      1          166B\n",
                " ----                       ----       ----\n",
                " Total                                 12.5KB\n",
            )
        );
    }

    #[test]
    fn json_keeps_consuls_field_order() {
        let summary = Summary {
            meta: serde_json::json!({"Version": 1, "ID": "2-9-1", "Term": 2, "Index": 9, "Size": 10}),
            stats: vec![TypeStats {
                name: "KVS".into(),
                sum: 5,
                count: 1,
            }],
            total_size: 5,
            kv_stats: None,
            total_size_kv: 0,
        };
        let text = crate::cli::json_indented(&summary.json()).unwrap();
        let order: Vec<usize> = [
            "\"Meta\"",
            "\"ID\"",
            "\"Size\"",
            "\"Index\"",
            "\"Term\"",
            "\"Version\"",
            "\"Stats\"",
            "\"Name\"",
            "\"Sum\"",
            "\"Count\"",
            "\"StatsKV\": null",
            "\"TotalSize\"",
            "\"TotalSizeKV\"",
        ]
        .iter()
        .map(|key| text.find(key).unwrap_or_else(|| panic!("{key} in {text}")))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert!(
            text.starts_with("{\n   \"Meta\": {\n      \"ID\": \"2-9-1\""),
            "{text}"
        );
    }

    #[test]
    fn kv_prefixes_follow_depth_and_filter() {
        let breakdown = KvBreakdown {
            depth: 2,
            filter: "vault/".into(),
        };
        assert_eq!(
            breakdown.prefix_of("vault/logical/a/b").as_deref(),
            Some("vault/logical")
        );
        assert_eq!(breakdown.prefix_of("vault").as_deref(), None);
        assert_eq!(breakdown.prefix_of("other/x"), None);
        let shallow = KvBreakdown {
            depth: 5,
            filter: String::new(),
        };
        assert_eq!(shallow.prefix_of("a/b").as_deref(), Some("a/b"));
    }
}
