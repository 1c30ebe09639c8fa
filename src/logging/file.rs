//! The log file (`-log-file`) with Consul's rotation: the active file always has the
//! configured name (`consul.log` when the path names a directory) and is appended to across
//! restarts; when it has reached `log_rotate_bytes` or is older than `log_rotate_duration`
//! (24 h by default), it is renamed to `<stem>-<unix nanoseconds><ext>` before the next line
//! and a new one is opened. After each rotation the oldest rotated files beyond
//! `log_rotate_max_files` are deleted (0 keeps all of them, -1 keeps none).
//!
//! Used only under the logger's lock, so nothing here synchronizes, and nothing here logs.

use crate::config::process::LogFileConfig;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Consul's permissions for the log file.
const LOG_FILE_MODE: u32 = 0o640;

pub struct LogFile {
    directory: PathBuf,
    /// The active file's name.
    name: String,
    /// The name without its extension, and the extension (`.log` when it had none): rotated
    /// files are `<stem>-<nanos><extension>`.
    stem: String,
    extension: String,
    file: File,
    bytes_written: u64,
    created: SystemTime,
    rotate_bytes: u64,
    rotate_duration: Duration,
    rotate_max_files: i64,
}

impl LogFile {
    /// Opens (or creates) the active file for appending.
    pub fn open(config: &LogFileConfig, now: SystemTime) -> io::Result<LogFile> {
        let (directory, name) = split_path(&config.path);
        let (stem, extension) = match name.rfind('.') {
            Some(dot) if dot > 0 => (name[..dot].to_string(), name[dot..].to_string()),
            _ => (name.clone(), ".log".to_string()),
        };
        let (file, bytes_written, created) = open_active(&directory.join(&name), now)?;
        Ok(LogFile {
            directory,
            name,
            stem,
            extension,
            file,
            bytes_written,
            created,
            rotate_bytes: config.rotate_bytes,
            rotate_duration: config.rotate_duration,
            rotate_max_files: config.rotate_max_files,
        })
    }

    /// The active file's path.
    pub fn path(&self) -> PathBuf {
        self.directory.join(&self.name)
    }

    /// Writes one line, rotating first when the active file is due.
    pub fn write_line(&mut self, line: &[u8], now: SystemTime) -> io::Result<()> {
        let too_big = self.rotate_bytes > 0 && self.bytes_written >= self.rotate_bytes;
        let too_old = now.duration_since(self.created).unwrap_or_default() >= self.rotate_duration;
        if too_big || too_old {
            self.rotate(now)?;
        }
        self.file.write_all(line)?;
        self.bytes_written += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self, now: SystemTime) -> io::Result<()> {
        let nanos = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let rotated = self
            .directory
            .join(format!("{}-{nanos}{}", self.stem, self.extension));
        std::fs::rename(self.path(), &rotated)?;
        self.prune()?;
        let (file, bytes_written, created) = open_active(&self.path(), now)?;
        debug_assert_eq!(bytes_written, 0, "a rotated log file starts empty");
        self.file = file;
        self.bytes_written = bytes_written;
        self.created = created;
        Ok(())
    }

    /// Deletes the oldest rotated files beyond `rotate_max_files`. Their names sort by time:
    /// the timestamps have the same number of digits until the year 2286.
    fn prune(&self) -> io::Result<()> {
        if self.rotate_max_files == 0 {
            return Ok(());
        }
        let mut rotated = rotated_files(&self.directory, &self.stem, &self.extension)?;
        rotated.sort();
        let keep = self.rotate_max_files.max(0) as usize;
        let excess = rotated.len().saturating_sub(keep);
        for path in &rotated[..excess] {
            std::fs::remove_file(path)?;
        }
        Ok(())
    }
}

/// Consul splits the path into directory and file name; a path ending in `/` names a
/// directory and the file is `consul.log` in it.
fn split_path(path: &Path) -> (PathBuf, String) {
    let text = path.to_string_lossy();
    if text.ends_with('/') || path.is_dir() {
        return (path.to_path_buf(), "consul.log".to_string());
    }
    let directory = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let name = path.file_name().map_or_else(
        || "consul.log".to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    (directory, name)
}

/// Opens the active file for appending; returns it, its size and when it was created (for
/// an existing file, its birth time where the file system keeps one, else now).
fn open_active(path: &Path, now: SystemTime) -> io::Result<(File, u64, SystemTime)> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(LOG_FILE_MODE)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", path.display())))?;
    let metadata = file.metadata()?;
    // An empty file starts its period now, whatever the file system says.
    let created = if metadata.len() == 0 {
        now
    } else {
        metadata.created().unwrap_or(now).min(now)
    };
    Ok((file, metadata.len(), created))
}

/// Rotated files of this log: `<stem>-<digits><extension>` in its directory.
fn rotated_files(directory: &Path, stem: &str, extension: &str) -> io::Result<Vec<PathBuf>> {
    let prefix = format!("{stem}-");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(directory)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(middle) = name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(extension))
        else {
            continue;
        };
        if !middle.is_empty() && middle.bytes().all(|b| b.is_ascii_digit()) {
            found.push(entry.path());
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "praetor-logfile-{name}-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn rotates_by_size_and_keeps_the_newest() {
        let dir = temp_dir("size");
        let config = LogFileConfig {
            path: dir.join("agent.log"),
            rotate_bytes: 10,
            rotate_duration: Duration::from_secs(3600),
            rotate_max_files: 2,
        };
        let start = SystemTime::now();
        let nanos = |seconds: u64| {
            (start + Duration::from_secs(seconds))
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        };
        let mut log = LogFile::open(&config, start).unwrap();
        for i in 0..5u64 {
            log.write_line(b"0123456789ab\n", start + Duration::from_secs(i))
                .unwrap();
        }
        let names = names(&dir);
        // Four rotations happened; two rotated files are kept beside the active one.
        assert_eq!(names.len(), 3, "{names:?}");
        assert_eq!(names[2], "agent.log");
        assert!(names[0].starts_with("agent-") && names[0].ends_with(".log"));
        assert_eq!(names[0], format!("agent-{}.log", nanos(3)));
        assert_eq!(names[1], format!("agent-{}.log", nanos(4)));
        assert_eq!(
            std::fs::read_to_string(dir.join("agent.log")).unwrap(),
            "0123456789ab\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rotates_by_age_appends_across_opens_and_defaults_the_name() {
        let dir = temp_dir("age");
        let config = LogFileConfig {
            path: PathBuf::from(format!("{}/", dir.display())),
            rotate_bytes: 0,
            rotate_duration: Duration::from_secs(60),
            rotate_max_files: 0,
        };
        let start = SystemTime::now();
        let mut log = LogFile::open(&config, start).unwrap();
        log.write_line(b"one\n", start).unwrap();
        drop(log);
        let mut log = LogFile::open(&config, start).unwrap();
        log.write_line(b"two\n", start).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("consul.log")).unwrap(),
            "one\ntwo\n"
        );
        log.write_line(b"three\n", start + Duration::from_secs(61))
            .unwrap();
        let names = names(&dir);
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(names[1], "consul.log");
        assert_eq!(
            std::fs::read_to_string(dir.join(&names[0])).unwrap(),
            "one\ntwo\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn negative_max_files_keeps_no_rotated_file() {
        let dir = temp_dir("none");
        let config = LogFileConfig {
            path: dir.join("x"),
            rotate_bytes: 1,
            rotate_duration: Duration::from_secs(3600),
            rotate_max_files: -1,
        };
        let now = SystemTime::now();
        let mut log = LogFile::open(&config, now).unwrap();
        log.write_line(b"a\n", now).unwrap();
        log.write_line(b"b\n", now).unwrap();
        assert_eq!(names(&dir), vec!["x".to_string()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
