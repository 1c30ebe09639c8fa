//! Starting other programs from the agent (script checks, config watches) without handing
//! them the agent's descriptors.
//!
//! The runtime accepts connections through io_uring, whose accept does not set
//! close-on-exec, so at any instant the process may hold client connections that a child
//! started in that instant would keep across `exec`. A child holding a connection keeps it
//! open after the agent answered and closed its own copy: the client never sees the end of
//! the answer (seen: an HTTP request that arrived while a watch process started hung until
//! its client gave up, with the connection in the child). [`inherit_only_stdio`] marks every
//! descriptor above stderr close-on-exec between fork and exec, which covers every
//! descriptor whoever opened it, now or later; the child keeps only the stdio the command
//! set up.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The first descriptor a child must not inherit: everything after stdin, stdout, stderr.
const FIRST_PRIVATE_FD: libc::c_uint = 3;
/// Upper bound of the descriptor-by-descriptor fallback (kernels without `close_range`),
/// whatever the file limit says.
const FALLBACK_SCAN_FDS_MAX: u64 = 1 << 20;

/// Makes `command` hand its child nothing but the stdio it sets up.
pub fn inherit_only_stdio(command: &mut Command) -> &mut Command {
    // SAFETY: the hook runs between fork and exec; it makes only async-signal-safe system
    // calls (close_range, getrlimit, fcntl) and does not allocate.
    unsafe { command.pre_exec(mark_private_fds_close_on_exec) }
}

fn mark_private_fds_close_on_exec() -> io::Result<()> {
    // SAFETY: a system call on this (child) process's own descriptor table.
    let marked = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            FIRST_PRIVATE_FD,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if marked == 0 {
        return Ok(());
    }
    // Kernels before 5.11: one descriptor at a time, up to the file limit.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let end = limit.rlim_cur.min(FALLBACK_SCAN_FDS_MAX) as i32;
    for fd in FIRST_PRIVATE_FD as i32..end {
        // SAFETY: fcntl on a descriptor number; a closed one answers EBADF.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
            // SAFETY: as above.
            unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// The descriptors a shell started by `command` holds.
    fn child_fds(command: &mut Command) -> Vec<i32> {
        let output = command
            .arg("-c")
            .arg("ls /proc/self/fd")
            .output()
            .expect("running sh");
        String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect()
    }

    #[test]
    fn a_descriptor_without_close_on_exec_stays_with_the_agent() {
        let file = std::fs::File::open("/proc/self/status").unwrap();
        // dup() leaves close-on-exec off, as io_uring's accept does.
        // SAFETY: duplicating a descriptor we own; closed below.
        let leaky = unsafe { libc::dup(file.as_raw_fd()) };
        assert!(leaky > 2);
        assert!(
            child_fds(&mut Command::new("/bin/sh")).contains(&leaky),
            "without the hook the child inherits it"
        );
        let fds = child_fds(inherit_only_stdio(&mut Command::new("/bin/sh")));
        assert!(!fds.contains(&leaky), "{fds:?}");
        assert!(fds.contains(&1), "stdout stays: {fds:?}");
        // SAFETY: closing the duplicate made above.
        unsafe { libc::close(leaky) };
    }
}
