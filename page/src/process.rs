//! A process's identity: its pid and its start time. A pid is reused once
//! its process is gone; the pair is not (the start time is the process's
//! `starttime`, `/proc/PID/stat` field 22, clock ticks since boot). The
//! page stores both for the runtime (`driver_pid`, `driver_start`) and the
//! guard (`guard_pid`, `guard_start`), so nothing signals, trusts or hands
//! the board to a process that only has the right number. [`pid_alive`]:
//! whether a pid exists at all.

use std::io::Read;

/// A pid and the start time of the process that had it when it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessIdentity {
    /// The process id.
    pub pid: u32,
    /// Its start time (clock ticks since boot; 0 unknown).
    pub start: u64,
}

impl ProcessIdentity {
    /// The process still runs: `pid` exists and has this start time. A
    /// known start time (not 0) that differs means the pid was reused; an
    /// unknown one (0) can only be matched by the pid existing.
    pub fn is_alive(&self) -> bool {
        match start_time(self.pid) {
            Some(now) => matches(*self, now),
            None => false,
        }
    }
}

/// The pure rule of [`ProcessIdentity::is_alive`]: the process with `pid` now
/// started at `start_now`; is that the process `id` names?
pub(crate) fn matches(id: ProcessIdentity, start_now: u64) -> bool {
    id.pid != 0 && (id.start == 0 || id.start == start_now)
}

/// The start time of process `pid` (`/proc/PID/stat` field 22), `None` when
/// there is no such process (or `/proc` is not mounted). Allocation-free
/// (a stack buffer); not for a cycle path (it reads a file).
pub fn start_time(pid: u32) -> Option<u64> {
    if pid == 0 {
        return None;
    }
    let mut path = [0u8; 32];
    let n = {
        use std::io::Write;
        let mut w = &mut path[..];
        write!(w, "/proc/{pid}/stat").ok()?;
        32 - w.len()
    };
    let path = std::str::from_utf8(&path[..n]).ok()?;
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = [0u8; 1024];
    let mut len = 0;
    while len < buf.len() {
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(k) => len += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    parse_start_time(&buf[..len])
}

/// Field 22 of a `/proc/PID/stat` line. The command name (field 2) is in
/// parentheses and may hold spaces and parentheses itself, so the fields
/// are counted from the last `)`.
pub(crate) fn parse_start_time(stat: &[u8]) -> Option<u64> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // After ")": field 3 (state) is the first; field 22 is the 20th.
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// True when process `pid` exists: `kill(pid, 0)` succeeds or fails with
/// EPERM (a process of another user counts as alive). Pid 0 (the caller's
/// process group) and pids beyond `i32` are never alive. The guard's look
/// at a runtime without a pidfd, and the runtime's at the guard.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
    if unsafe { libc::kill(raw, 0) } == 0 {
        return true;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether one line of `/proc/PID/maps` maps the file with device
/// `major:minor` and inode `ino` (fields 4 and 5: `MM:mm` in hex, the
/// inode in decimal). Pure.
pub fn maps_line_is(line: &[u8], major: u64, minor: u64, ino: u64) -> bool {
    let mut fields = line
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let (Some(dev), Some(inode)) = (fields.nth(3), fields.next()) else {
        return false;
    };
    let parse = |b: &[u8], radix| {
        std::str::from_utf8(b)
            .ok()
            .and_then(|t| u64::from_str_radix(t, radix).ok())
    };
    let Some(colon) = dev.iter().position(|&b| b == b':') else {
        return false;
    };
    parse(&dev[..colon], 16) == Some(major)
        && parse(&dev[colon + 1..], 16) == Some(minor)
        && parse(inode, 10) == Some(ino)
}

/// Whether process `pid` maps the file `(dev, ino)`: `/proc/PID/maps`,
/// read with a stack buffer. `None` when it cannot be read (gone, or not
/// permitted). Allocation-free.
pub fn maps_file(pid: u32, dev: u64, ino: u64) -> Option<bool> {
    use std::io::{Read, Write};
    let (major, minor) = (u64::from(libc::major(dev)), u64::from(libc::minor(dev)));
    let mut path = [0u8; 32];
    let n = {
        let mut w = &mut path[..];
        write!(w, "/proc/{pid}/maps").ok()?;
        32 - w.len()
    };
    let mut f = std::fs::File::open(std::str::from_utf8(&path[..n]).ok()?).ok()?;
    let mut buf = [0u8; 8192];
    let mut len = 0;
    loop {
        let k = match f.read(&mut buf[len..]) {
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        };
        len += k;
        // Every whole line so far; the rest moves to the front.
        let mut start = 0;
        while let Some(nl) = buf[start..len].iter().position(|&b| b == b'\n') {
            if maps_line_is(&buf[start..start + nl], major, minor, ino) {
                return Some(true);
            }
            start += nl + 1;
        }
        if k == 0 {
            return Some(len > start && maps_line_is(&buf[start..len], major, minor, ino));
        }
        if start == 0 && len == buf.len() {
            // A line longer than the buffer (a very long path): skip it.
            len = 0;
            continue;
        }
        buf.copy_within(start..len, 0);
        len -= start;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_pid_zero_and_a_reaped_child_are_not() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }

    #[test]
    fn start_time_is_field_22_counted_from_the_last_parenthesis() {
        let line = b"4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 987654 1000 10 \n";
        assert_eq!(parse_start_time(line), Some(987654));
        assert_eq!(parse_start_time(b"4242 (x) S 1 2"), None, "too short");
        assert_eq!(parse_start_time(b"no parenthesis"), None);
        assert_eq!(parse_start_time(b""), None);
    }

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let pid = std::process::id();
        let me = ProcessIdentity {
            pid,
            start: start_time(pid).unwrap_or(0),
        };
        assert!(me.start > 0);
        assert!(me.is_alive());
        let reused = ProcessIdentity {
            start: me.start + 1,
            ..me
        };
        assert!(!reused.is_alive());
        assert!(
            matches(ProcessIdentity { pid: 5, start: 0 }, 77),
            "unknown start: pid only"
        );
        assert!(!matches(ProcessIdentity { pid: 0, start: 0 }, 0));
    }
}
