//! Is the process a Hive `state.json` names still the one that wrote it? Blocking (reads `/proc`).
//!
//! - Linux: `/proc/<pid>/stat`. No such entry, or a zombie (`Z`) or dead (`X`) process: exited. A process
//!   that started after the state file was last written cannot have written it — the pid was reused by
//!   another process: reused (its start is boot time (`/proc/stat` `btime`) plus `starttime` clock ticks
//!   (`_SC_CLK_TCK`), compared with a 2 s margin for the tick and mtime granularities).
//! - Other Unix systems (untested): `kill(pid, 0)`: ESRCH is exited, anything else is running; pid reuse
//!   is not detected.
//! - Other systems: unknown (no evidence; the session is not reported).
//!
//! The agent must see the runtime's processes: in another pid namespace (a container) the pid means
//! nothing here, and every session would read exited. Run the agent where Hive runs.

use std::time::SystemTime;

/// What the process check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    Running,
    /// No such process (or a zombie).
    Exited,
    /// A process with that pid runs, but it started after the state file was written.
    Reused,
    /// Cannot tell on this system.
    Unknown,
}

/// Checks `pid`, whose owner last wrote its state file at `written`.
pub fn check(pid: u32, written: SystemTime) -> Process {
    if pid == 0 || pid > i32::MAX as u32 {
        return Process::Exited;
    }
    imp::check(pid, written)
}

#[cfg(target_os = "linux")]
mod imp {
    use super::Process;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    pub fn check(pid: u32, written: SystemTime) -> Process {
        let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Process::Exited,
            Err(_) => return Process::Unknown,
        };
        // `pid (comm) state ppid ...`: comm may hold anything, so fields are counted after the last ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return Process::Unknown;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        match fields.first() {
            Some(&"Z") | Some(&"X") | Some(&"x") => return Process::Exited,
            None => return Process::Unknown,
            _ => {}
        }
        // Field 22 of the whole line (`starttime`) is the 20th after the state (field 3).
        let (Some(ticks), Some(boot)) = (
            fields.get(19).and_then(|t| t.parse::<u64>().ok()),
            boot_time(),
        ) else {
            return Process::Running;
        };
        let hz = rustix::param::clock_ticks_per_second().max(1);
        let started = boot + Duration::from_millis(ticks.saturating_mul(1000) / hz);
        if started > written + Duration::from_secs(2) {
            Process::Reused
        } else {
            Process::Running
        }
    }

    /// The boot time (`btime` of `/proc/stat`).
    fn boot_time() -> Option<SystemTime> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let secs = stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        Some(UNIX_EPOCH + Duration::from_secs(secs))
    }
}

#[cfg(all(unix, not(target_os = "linux")))]
mod imp {
    use super::Process;
    use std::time::SystemTime;

    pub fn check(pid: u32, _written: SystemTime) -> Process {
        let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else {
            return Process::Exited;
        };
        match rustix::process::test_kill_process(pid) {
            Err(rustix::io::Errno::SRCH) => Process::Exited,
            _ => Process::Running,
        }
    }
}

#[cfg(not(unix))]
mod imp {
    use super::Process;
    use std::time::SystemTime;

    pub fn check(_pid: u32, _written: SystemTime) -> Process {
        Process::Unknown
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn this_process_runs_a_dead_one_exited_and_a_younger_one_is_a_reused_pid() {
        let now = SystemTime::now();
        assert_eq!(check(std::process::id(), now), Process::Running);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(check(pid, now), Process::Exited);
        // Our own process started long before a state written an hour ago? No: written before it started.
        let before_we_started = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
        assert_eq!(
            check(std::process::id(), before_we_started),
            Process::Reused
        );
    }

    #[test]
    fn a_zombie_is_exited() {
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not waited for: once it exits it is a zombie until reaped.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while check(pid, SystemTime::now()) == Process::Running {
            assert!(std::time::Instant::now() < deadline, "still running");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(check(pid, SystemTime::now()), Process::Exited);
        drop(child);
    }
}
