//! The kernel floor (`testkit::install_kernel_floor`): under it the system
//! calls newer than Linux 4.4 fail with ENOSYS and the old ones work, in
//! the process that installed it and in every program it starts.

use std::process::Command;

use testkit::{bin, ok, output, under_kernel_floor};

/// A system call probed: its name and a harmless call of it.
type Probe = (&'static str, fn() -> libc::c_long);

/// The calls probed. Each is harmless on a new kernel:
/// `clone3` with no arguments and `close_range` on fds nobody has fail
/// with EINVAL/succeed without effect.
fn newer_calls() -> [Probe; 4] {
    [
        ("pidfd_open", || {
            // SAFETY: pidfd_open(pid, flags) takes integers; a pidfd it
            // returns is left to the exiting child.
            unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) }
        }),
        ("statx", || {
            let mut buf = [0u8; 256];
            // SAFETY: a NUL-terminated path and a buffer of 256 bytes,
            // more than struct statx (256 bytes) needs.
            unsafe {
                libc::syscall(
                    libc::SYS_statx,
                    libc::AT_FDCWD,
                    c"/".as_ptr(),
                    0,
                    libc::STATX_BASIC_STATS,
                    buf.as_mut_ptr(),
                )
            }
        }),
        ("close_range", || {
            // SAFETY: integers only; fds this high are open nowhere.
            unsafe { libc::syscall(libc::SYS_close_range, 0x7fff_fff0u32, 0x7fff_fffeu32, 0) }
        }),
        ("clone3", || {
            // SAFETY: a null clone_args of size 0: the kernel refuses it
            // (EINVAL) and starts nothing.
            unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) }
        }),
    ]
}

fn errno() -> i32 {
    // SAFETY: reads this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Forks; the child installs the floor and makes every call of
/// `newer_calls`, then `getppid` and `uname`; its exit code has bit i set
/// when call i did NOT fail with ENOSYS, bit 6 when an old call failed,
/// bit 7 when the filter could not be installed. Returns that code.
fn probe_in_child_under_the_floor() -> i32 {
    // SAFETY: the child makes only raw system calls (async-signal-safe),
    // allocates nothing and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let mut code = 0;
        if testkit::install_kernel_floor().is_err() {
            // SAFETY: ends the forked child at once.
            unsafe { libc::_exit(1 << 7) };
        }
        for (i, (_, call)) in newer_calls().iter().enumerate() {
            if !(call() == -1 && errno() == libc::ENOSYS) {
                code |= 1 << i;
            }
        }
        // SAFETY: utsname is plain bytes; all zeros is a valid value.
        let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
        // SAFETY: getppid takes nothing; uname writes into `uts`.
        if unsafe { libc::getppid() } <= 0 || unsafe { libc::uname(&mut uts) } != 0 {
            code |= 1 << 6;
        }
        // SAFETY: ends the forked child without running the test's atexit
        // handlers or destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(rc, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status),
        "the probing child died: status {status:#x}"
    );
    libc::WEXITSTATUS(status)
}

#[test]
fn calls_newer_than_4_4_fail_with_enosys_under_the_floor_and_old_calls_work() {
    // Without the filter this machine's kernel has them all (the test
    // would otherwise prove nothing): none fails with ENOSYS here.
    for (name, call) in newer_calls() {
        let rc = call();
        assert!(
            !(rc == -1 && errno() == libc::ENOSYS),
            "{name} is missing on this kernel even without the floor"
        );
        if name == "pidfd_open" && rc >= 0 {
            // SAFETY: closes the pidfd just opened.
            unsafe { libc::close(rc as i32) };
        }
    }
    let code = probe_in_child_under_the_floor();
    assert_eq!(code & (1 << 7), 0, "the floor could not be installed");
    assert_eq!(
        code & (1 << 6),
        0,
        "getppid or uname failed under the floor"
    );
    for (i, (name, _)) in newer_calls().iter().enumerate() {
        assert_eq!(
            code & (1 << i),
            0,
            "{name} did not fail with ENOSYS under the floor"
        );
    }
}

/// The seccomp lines of `/proc/self/status` of a shell started by `cmd`.
fn seccomp_status(cmd: &mut Command) -> String {
    let out = ok(
        output(cmd.args(["-c", "grep ^Seccomp /proc/self/status"])),
        "sh reading its status",
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_program_started_under_the_floor_runs_with_the_filter_and_the_kernel_floor_program_runs_it_too()
{
    let plain = seccomp_status(&mut Command::new("sh"));
    assert!(plain.contains("Seccomp:\t0"), "{plain}");
    let floored = seccomp_status(under_kernel_floor(&mut Command::new("sh")));
    assert!(floored.contains("Seccomp:\t2"), "{floored}");
    let wrapped = seccomp_status(Command::new(bin("kernel-floor")).arg("sh"));
    assert!(wrapped.contains("Seccomp:\t2"), "{wrapped}");
    let missing = output(Command::new(bin("kernel-floor")).arg("/nonexistent/program"));
    assert_eq!(missing.status.code(), Some(127));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/program"),
        "{missing:?}"
    );
}
