//! `GET /v1/agent/host` and `GET /v1/agent/version`.
//!
//! The host answer has Consul's shape (`agent/debug/host.go`, gopsutil's field names):
//! `Memory`, `CPU` (one entry per logical CPU), `Host`, `Disk` (of `/`), `CollectionTime`
//! (Unix nanoseconds) and `Errors` (`null`, or one string per fact that could not be read),
//! read from `/proc`, `/sys`, `uname` and `statvfs`. Consul marks the shape unstable; tools
//! (`consul debug`) store it whole. The version answer is Consul's `BuildInfo` with the
//! Consul API version praetor implements as `HumanVersion`, and praetor's own version beside
//! it.

use super::{ApiError, Context, Outcome, Reply, Request};
use serde_json::{json, Map, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// Consul's placeholder build date for a build that records none.
const BUILD_DATE_UNKNOWN: &str = "1970-01-01T00:00:01Z";
/// The path whose file system `Disk` describes (Consul's `DiskUsagePath`).
const DISK_USAGE_PATH: &str = "/";

pub fn version(_ctx: &Context, _request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    reply.json(
        200,
        b"",
        &json!({
            "SHA": "",
            "BuildDate": BUILD_DATE_UNKNOWN,
            "HumanVersion": crate::CONSUL_API_VERSION,
            "FIPS": "",
            "PraetorVersion": crate::PRAETOR_VERSION,
        }),
    );
    Ok(Outcome::Done)
}

pub fn host(_ctx: &Context, _request: &Request, reply: &mut Reply) -> Result<Outcome, ApiError> {
    reply.json(200, b"", &collect_host_info());
    Ok(Outcome::Done)
}

/// Every host fact Consul's `/v1/agent/host` reports; a fact that cannot be read is `null`
/// and its error is listed in `Errors`.
pub fn collect_host_info() -> Value {
    let collection_time = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let mut errors = Vec::new();
    let mut fact = |result: Result<Value, String>| {
        result.unwrap_or_else(|e| {
            errors.push(Value::String(e));
            Value::Null
        })
    };
    let memory = fact(memory());
    let cpu = fact(cpus());
    let host = fact(host_facts());
    let disk = fact(disk(DISK_USAGE_PATH));
    json!({
        "Memory": memory,
        "CPU": cpu,
        "Host": host,
        "Disk": disk,
        "CollectionTime": collection_time,
        "Errors": if errors.is_empty() { Value::Null } else { Value::Array(errors) },
    })
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("open {path}: {e}"))
}

/// `/proc/meminfo` as gopsutil's `VirtualMemoryStat`.
fn memory() -> Result<Value, String> {
    let text = read("/proc/meminfo")?;
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|line| {
                let (key, rest) = line.split_once(':')?;
                (key == name).then(|| {
                    let mut parts = rest.split_whitespace();
                    let value: u64 = parts.next()?.parse().ok()?;
                    Some(if parts.next() == Some("kB") {
                        value * 1024
                    } else {
                        value
                    })
                })?
            })
            .unwrap_or(0)
    };
    let total = field("MemTotal");
    let free = field("MemFree");
    let buffers = field("Buffers");
    let sreclaimable = field("SReclaimable");
    let cached = field("Cached") + sreclaimable;
    let available = field("MemAvailable");
    let used = total.saturating_sub(free + buffers + cached);
    let used_percent = if total > 0 {
        used as f64 / total as f64 * 100.0
    } else {
        0.0
    };
    Ok(json!({
        "total": total,
        "available": available,
        "used": used,
        "usedPercent": used_percent,
        "free": free,
        "active": field("Active"),
        "inactive": field("Inactive"),
        "wired": 0,
        "laundry": 0,
        "buffers": buffers,
        "cached": cached,
        "writeBack": field("Writeback"),
        "dirty": field("Dirty"),
        "writeBackTmp": field("WritebackTmp"),
        "shared": field("Shmem"),
        "slab": field("Slab"),
        "sreclaimable": sreclaimable,
        "sunreclaim": field("SUnreclaim"),
        "pageTables": field("PageTables"),
        "swapCached": field("SwapCached"),
        "commitLimit": field("CommitLimit"),
        "committedAS": field("Committed_AS"),
        "highTotal": field("HighTotal"),
        "highFree": field("HighFree"),
        "lowTotal": field("LowTotal"),
        "lowFree": field("LowFree"),
        "swapTotal": field("SwapTotal"),
        "swapFree": field("SwapFree"),
        "mapped": field("Mapped"),
        "vmallocTotal": field("VmallocTotal"),
        "vmallocUsed": field("VmallocUsed"),
        "vmallocChunk": field("VmallocChunk"),
        "hugePagesTotal": field("HugePages_Total"),
        "hugePagesFree": field("HugePages_Free"),
        "hugePageSize": field("Hugepagesize"),
    }))
}

/// `/proc/cpuinfo` as gopsutil's `[]InfoStat`, one entry per logical CPU.
fn cpus() -> Result<Value, String> {
    let text = read("/proc/cpuinfo")?;
    let mut entries = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let get = |name: &str| -> String {
            block
                .lines()
                .find_map(|line| {
                    let (key, value) = line.split_once(':')?;
                    (key.trim() == name).then(|| value.trim().to_string())
                })
                .unwrap_or_default()
        };
        let number = |name: &str| get(name).parse::<i64>().unwrap_or(0);
        let cache_size = get("cache size")
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<i64>().ok())
            .unwrap_or(0);
        entries.push(json!({
            "cpu": number("processor"),
            "vendorId": get("vendor_id"),
            "family": get("cpu family"),
            "model": get("model"),
            "stepping": number("stepping"),
            "physicalId": get("physical id"),
            "coreId": get("core id"),
            "cores": 1,
            "modelName": get("model name"),
            "mhz": get("cpu MHz").parse::<f64>().unwrap_or(0.0),
            "cacheSize": cache_size,
            "flags": get("flags").split_whitespace().collect::<Vec<_>>(),
            "microcode": get("microcode"),
        }));
    }
    Ok(Value::Array(entries))
}

fn uname() -> Result<(String, String, String), String> {
    // SAFETY: uname fills the zeroed struct we own.
    let names = unsafe {
        let mut names: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut names) != 0 {
            return Err(format!("uname: {}", std::io::Error::last_os_error()));
        }
        names
    };
    let text = |field: &[libc::c_char]| -> String {
        let bytes: Vec<u8> = field
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Ok((
        text(&names.nodename),
        text(&names.release),
        text(&names.machine),
    ))
}

/// `/etc/os-release` values, unquoted.
fn os_release() -> Map<String, Value> {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .filter_map(|line| line.split_once('='))
        .map(|(key, value)| {
            (
                key.to_string(),
                Value::String(value.trim_matches('"').to_string()),
            )
        })
        .collect()
}

/// gopsutil's `host.InfoStat`.
fn host_facts() -> Result<Value, String> {
    let (hostname, kernel_version, kernel_arch) = uname()?;
    let uptime_seconds = read("/proc/uptime")?
        .split_whitespace()
        .next()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(0.0) as u64;
    let boot_time = read("/proc/stat")?
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let procs = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                })
                .count()
        })
        .unwrap_or(0);
    let release = os_release();
    let value = |key: &str| {
        release
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let platform = value("ID");
    let family = value("ID_LIKE")
        .split_whitespace()
        .next()
        .map_or_else(|| platform.clone(), str::to_string);
    let host_id = [
        "/sys/class/dmi/id/product_uuid",
        "/proc/sys/kernel/random/boot_id",
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok())
    .map(|id| id.trim().to_lowercase())
    .unwrap_or_default();
    Ok(json!({
        "hostname": hostname,
        "uptime": uptime_seconds,
        "bootTime": boot_time,
        "procs": procs,
        "os": std::env::consts::OS,
        "platform": platform,
        "platformFamily": family,
        "platformVersion": value("VERSION_ID"),
        "kernelVersion": kernel_version,
        "kernelArch": kernel_arch,
        "virtualizationSystem": "",
        "virtualizationRole": "",
        "hostId": host_id,
    }))
}

/// gopsutil's `disk.UsageStat` of the file system holding `path`.
fn disk(path: &str) -> Result<Value, String> {
    let c_path = std::ffi::CString::new(path).map_err(|e| e.to_string())?;
    // SAFETY: statvfs fills the zeroed struct we own, for a NUL-terminated path.
    let stat = unsafe {
        let mut stat: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c_path.as_ptr(), &mut stat) != 0 {
            return Err(format!(
                "statvfs {path}: {}",
                std::io::Error::last_os_error()
            ));
        }
        stat
    };
    let fragment = stat.f_frsize as u64;
    let total = stat.f_blocks as u64 * fragment;
    let free = stat.f_bavail as u64 * fragment;
    let used = (stat.f_blocks as u64).saturating_sub(stat.f_bfree as u64) * fragment;
    let percent = |part: u64, whole: u64| {
        if whole == 0 {
            0.0
        } else {
            part as f64 / whole as f64 * 100.0
        }
    };
    let inodes_total = stat.f_files as u64;
    let inodes_free = stat.f_ffree as u64;
    let inodes_used = inodes_total.saturating_sub(inodes_free);
    // The last mount on the path is the one in effect.
    let fstype = std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .rev()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _device = fields.next()?;
            let mount_point = fields.next()?;
            let fstype = fields.next()?;
            (mount_point == path).then(|| fstype.to_string())
        })
        .next()
        .unwrap_or_default();
    Ok(json!({
        "path": path,
        "fstype": fstype,
        "total": total,
        "free": free,
        "used": used,
        "usedPercent": percent(used, used + free),
        "inodesTotal": inodes_total,
        "inodesUsed": inodes_used,
        "inodesFree": inodes_free,
        "inodesUsedPercent": percent(inodes_used, inodes_total),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_info_has_consuls_shape() {
        let info = collect_host_info();
        assert!(info["Errors"].is_null(), "{}", info["Errors"]);
        assert!(info["Memory"]["total"].as_u64().unwrap() > 0);
        assert!(!info["CPU"].as_array().unwrap().is_empty());
        assert_eq!(info["Host"]["os"], "linux");
        assert!(!info["Host"]["hostname"].as_str().unwrap().is_empty());
        assert_eq!(info["Disk"]["path"], "/");
        assert!(info["Disk"]["total"].as_u64().unwrap() > 0);
        assert!(info["CollectionTime"].as_u64().unwrap() > 1_600_000_000_000_000_000);
    }
}
