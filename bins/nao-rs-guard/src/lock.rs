//! One guard per page: an exclusive `flock` on `PAGE.guard.lock` in the
//! page's folder (`deathswitch.guard.lock` beside `deathswitch`), taken
//! before the guard touches the page. The lock dies with its process (the
//! kernel drops it when the last descriptor closes: crash, SIGKILL), so a
//! stale file never keeps a guard out. The holder writes its pid into the
//! file; a second guard refuses to start with an error naming it, and so
//! never writes the page (two guards each took the other's `guard_pid` for
//! damage and repaired the page in a loop).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The lock file of the page at `page`: `PAGE.guard.lock` in its folder.
pub fn lock_path(page: &Path) -> PathBuf {
    let mut name = page
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_else(|| "deathswitch".into());
    name.push(".guard.lock");
    page.with_file_name(name)
}

/// The held lock; dropping it (or the process ending) lets it go.
#[derive(Debug)]
pub struct GuardLock {
    _file: File,
    path: PathBuf,
}

impl GuardLock {
    /// Takes the lock of the page at `page` or says who holds it. The file
    /// is created with mode 0660 (whatever the umask), opened `O_CLOEXEC`
    /// and `O_NOFOLLOW` (a symlink planted at the path is refused).
    pub fn take(page: &Path) -> Result<GuardLock, String> {
        let path = lock_path(page);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o660)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| {
                format!(
                    "cannot open the guard's lock file {}: {e}; the page's folder must exist and be writable by the guard (on the robot systemd makes /run/nao-rs), and the path must not be a symlink",
                    path.display()
                )
            })?;
        // SAFETY: flock on a descriptor we own; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let holder = text.trim();
                let holder = if holder.is_empty() { "unknown" } else { holder };
                return Err(format!(
                    "another nao-rs-guard (pid {holder}) already guards this page: it holds {}. One guard per page: \
                     two would each repair the page the other writes. Stop that one first (`systemctl stop nao-rs-guard`, or kill {holder})",
                    path.display()
                ));
            }
            return Err(format!("cannot lock {}: {e}", path.display()));
        }
        // Ours: 0660 whatever the umask, and our pid for the next one to name.
        let _ = file.set_permissions(std::fs::Permissions::from_mode(0o660));
        let _ = file.set_len(0);
        let _ = file.seek(SeekFrom::Start(0));
        let _ = writeln!(file, "{}", std::process::id());
        Ok(GuardLock { _file: file, path })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_file_sits_beside_the_page() {
        assert_eq!(
            lock_path(Path::new("/run/nao-rs/deathswitch")),
            Path::new("/run/nao-rs/deathswitch.guard.lock")
        );
    }

    #[test]
    fn a_second_lock_names_the_first_holder_and_a_released_lock_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("deathswitch");
        let first = GuardLock::take(&page).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::metadata(first.path()).unwrap().mode() & 0o777,
            0o660
        );
        // flock locks belong to the open file description: a second open
        // in this process conflicts like another process would.
        let e = GuardLock::take(&page).unwrap_err();
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        drop(first);
        GuardLock::take(&page).expect("free again once the holder let go");
    }

    #[test]
    fn a_symlink_at_the_lock_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("deathswitch");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), lock_path(&page)).unwrap();
        let e = GuardLock::take(&page).unwrap_err();
        assert!(e.contains("symlink"), "{e}");
        assert!(!dir.path().join("elsewhere").exists());
    }
}
