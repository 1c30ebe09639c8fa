//! The agent's contract with whatever supervises it: systemd's readiness protocol and the
//! pid file.
//!
//! [`notify`] speaks `sd_notify(3)` without libsystemd: one datagram (`READY=1`,
//! `STOPPING=1`) to the Unix socket named by `NOTIFY_SOCKET`, a path or, starting with `@`,
//! a name in the abstract namespace. Without the variable it does nothing, so the agent runs
//! the same under any supervisor. Consul's package unit is `Type=notify`, so systemd holds
//! `systemctl start` until `READY=1` arrives, which the agent sends once its listeners are
//! bound and every shard serves them.
//!
//! [`PidFile`] writes the process id as Consul does (the digits, no newline) and removes
//! the file when dropped at a clean exit; a killed agent leaves it behind, as Consul's does.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

/// The environment variable systemd sets for `Type=notify` services.
const NOTIFY_SOCKET_VARIABLE: &str = "NOTIFY_SOCKET";

/// Sends one state line to the service manager. `Ok(false)` when none listens.
pub fn notify(state: &str) -> Result<bool, String> {
    let Some(target) = std::env::var_os(NOTIFY_SOCKET_VARIABLE) else {
        return Ok(false);
    };
    let target = target.to_string_lossy().into_owned();
    send_state(&target, state)
        .map(|()| true)
        .map_err(|e| format!("sd_notify {state:?} to {target}: {e}"))
}

fn send_state(target: &str, state: &str) -> std::io::Result<()> {
    debug_assert!(!state.contains('\0'), "a notify state is text");
    let socket = UnixDatagram::unbound()?;
    if let Some(name) = target.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        socket.send_to_addr(state.as_bytes(), &address)?;
    } else {
        socket.send_to(state.as_bytes(), Path::new(target))?;
    }
    Ok(())
}

/// The pid file, removed when this is dropped.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
}

impl PidFile {
    /// Writes this process's id to `path`, replacing what was there.
    pub fn write(path: &Path) -> Result<PidFile, String> {
        if path.is_dir() {
            return Err(format!(
                "Could not open pid file: {} is a directory",
                path.display()
            ));
        }
        std::fs::write(path, std::process::id().to_string())
            .map_err(|e| format!("Could not open pid file: {}: {e}", path.display()))?;
        Ok(PidFile {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Only our own file: another agent may have taken the path over since.
        let ours = std::fs::read_to_string(&self.path)
            .is_ok_and(|text| text.trim() == std::process::id().to_string());
        if ours {
            if let Err(error) = std::fs::remove_file(&self.path) {
                log::warn!(
                    "agent: Could not remove pid file {}: {error}",
                    self.path.display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_reach_path_and_abstract_sockets() {
        let dir = std::env::temp_dir().join(format!("praetor-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).unwrap();
        send_state(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("praetor-notify-test-{}", std::process::id());
        let address = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_listener = UnixDatagram::bind_addr(&address).unwrap();
        send_state(&format!("@{name}"), "STOPPING=1").unwrap();
        let n = abstract_listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn pid_file_is_written_and_removed() {
        let path = std::env::temp_dir().join(format!("praetor-pid-{}", std::process::id()));
        let pid_file = PidFile::write(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            std::process::id().to_string()
        );
        drop(pid_file);
        assert!(!path.exists());
        assert!(PidFile::write(&std::env::temp_dir())
            .unwrap_err()
            .contains("is a directory"));
    }
}
