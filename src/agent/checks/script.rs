//! `script` checks (`args`): run a program; exit 0 is passing, 1 warning, anything else
//! critical, with its combined stdout and stderr (capped) as output. Only agents started
//! with `enable_script_checks` (or `enable_local_script_checks` for config-file checks) run
//! them; registration refuses them otherwise.
//!
//! The program runs on a helper thread in its own process group; on timeout the whole
//! group is killed, so a forked grandchild cannot hold the check open.

use super::ProbeResult;
use crate::store::catalog::Status;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How often the helper thread polls the child for exit.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Runs `args` with a timeout and returns the verdict.
pub async fn probe(args: &[String], timeout: Duration, output_max: usize) -> ProbeResult {
    let (tx, rx) = flume::bounded(1);
    let args = args.to_vec();
    let spawned = std::thread::Builder::new()
        .name("praetor-script-check".into())
        .spawn(move || {
            let _ = tx.send(run(&args, timeout, output_max));
        });
    if let Err(e) = spawned {
        return (Status::Critical, format!("cannot start script check: {e}"));
    }
    match rx.recv_async().await {
        Ok(result) => result,
        Err(_) => (Status::Critical, "script check runner failed".to_string()),
    }
}

fn run(args: &[String], timeout: Duration, output_max: usize) -> ProbeResult {
    let Some((program, rest)) = args.split_first() else {
        return (
            Status::Critical,
            "script check has no arguments".to_string(),
        );
    };
    let (reader, writer) = match std::io::pipe() {
        Ok(pipe) => pipe,
        Err(e) => return (Status::Critical, format!("cannot create pipe: {e}")),
    };
    let writer_err = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return (Status::Critical, format!("cannot create pipe: {e}")),
    };
    let mut command = Command::new(program);
    crate::agent::child::inherit_only_stdio(&mut command)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer_err)
        .process_group(0);
    let spawned = command.spawn();
    // The command owns the pipe's write ends: dropping it lets the reader see the end.
    drop(command);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            return (
                Status::Critical,
                format!("Failed to execute {program:?}: {e}"),
            )
        }
    };
    // Collect output on another thread so a chatty child never blocks on a full pipe.
    let collector = std::thread::spawn(move || {
        let mut reader = reader;
        let mut kept = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            match reader.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = output_max.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..n.min(room)]);
                }
            }
        }
        kept
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() >= timeout => break None,
            Ok(None) => std::thread::sleep(POLL_INTERVAL),
            Err(_) => break None,
        }
    };
    let Some(status) = status else {
        // SAFETY: signalling the child's own process group, which we created.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
        return (
            Status::Critical,
            format!(
                "Timed out ({}) running check",
                crate::proto::duration::format_go_duration(timeout.as_nanos() as i64)
            ),
        );
    };
    let output = collector.join().unwrap_or_default();
    let output = String::from_utf8_lossy(&output).into_owned();
    match status.code() {
        Some(0) => (Status::Passing, output),
        Some(1) => (Status::Warning, output),
        _ => (Status::Critical, output),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_map_to_statuses() {
        let sh = |script: &str| {
            run(
                &["/bin/sh".into(), "-c".into(), script.into()],
                Duration::from_secs(5),
                4096,
            )
        };
        assert_eq!(
            sh("echo fine; exit 0"),
            (Status::Passing, "fine\n".to_string())
        );
        assert_eq!(sh("echo meh >&2; exit 1").0, Status::Warning);
        assert_eq!(sh("exit 2").0, Status::Critical);
        let (status, output) = run(
            &["/bin/sh".into(), "-c".into(), "sleep 10".into()],
            Duration::from_millis(200),
            4096,
        );
        assert_eq!(status, Status::Critical);
        assert!(output.starts_with("Timed out"), "{output}");
        assert_eq!(
            run(&["/no/such/program".into()], Duration::from_secs(1), 100).0,
            Status::Critical
        );
        let (_, long) = sh("head -c 10000 /dev/zero | tr '\\0' x");
        assert_eq!(long.len(), 4096);
    }
}
