//! The kernel floor: a seccomp filter that answers every x86_64 system
//! call newer than Linux 4.4 with ENOSYS, the way the robot's kernel
//! (`4.4.86-rt99-aldebaran`) answers it, so a test on a new kernel runs a
//! program as the robot would.
//!
//! - [`install_kernel_floor`] puts the filter on the calling thread (and
//!   everything it starts later: filters are inherited across fork and
//!   exec, and cannot be removed);
//! - [`under_kernel_floor`] makes a [`Command`] start its program under it;
//! - [`KERNEL_FLOOR_ENV`]: with `NAO_RS_TEST_KERNEL_FLOOR=4.4` in a test's
//!   environment, every program the kit starts ([`crate::Proc`],
//!   [`crate::output`]) runs under the filter, so a whole test file runs
//!   against the floor unchanged;
//! - the `kernel-floor` program (`kernel-floor PROGRAM ARGS...`, in this
//!   package, never shipped to a robot) runs any program under it, also as
//!   cargo's runner, which puts a whole test binary under the filter.
//!
//! The filter judges by number only: x86_64 numbers were handed out in
//! order, and `mlock2` (325) was the last of 4.4, so every number above
//! it is newer than 4.4 (`copy_file_range` 326, `statx` 332, `rseq` 334,
//! `pidfd_send_signal` 424, `pidfd_open` 434, `clone3` 435, `close_range`
//! 436, ...). The x32 numbers (bit 30 set) and any other architecture
//! (a 32-bit `int 0x80`) get ENOSYS as well. New flags of old calls
//! (`CLONE_PIDFD`, `O_TMPFILE`'s later uses, ...) are not caught: a
//! number-only filter cannot know them.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The environment variable that asks the kit to start every program
/// under the kernel floor; its only accepted value is [`FLOOR_4_4`].
pub const KERNEL_FLOOR_ENV: &str = "NAO_RS_TEST_KERNEL_FLOOR";

/// The value of [`KERNEL_FLOOR_ENV`] for the robot's kernel.
pub const FLOOR_4_4: &str = "4.4";

/// The last x86_64 system call number of Linux 4.4 (`mlock2`).
pub const LAST_CALL_OF_4_4: u32 = 325;

/// `AUDIT_ARCH_X86_64` of linux/audit.h: `EM_X86_64` (62), 64-bit,
/// little-endian.
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;

/// The x32 ABI's bit in the system call number (`__X32_SYSCALL_BIT`).
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Offsets in `struct seccomp_data` (linux/seccomp.h): `int nr` at 0,
/// `__u32 arch` at 4.
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;

const fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The classic BPF program. A jump's offsets count the instructions to
/// skip after it: from 1, 3 and 4 the jumps to `deny` land on 6.
const FILTER: [libc::sock_filter; 7] = [
    // 0: A = arch
    stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, OFFSET_ARCH),
    // 1: x86_64 goes on, any other architecture to deny
    jump(
        libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
        AUDIT_ARCH_X86_64,
        0,
        4,
    ),
    // 2: A = nr
    stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, OFFSET_NR),
    // 3: an x32 number to deny
    jump(
        libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
        X32_SYSCALL_BIT,
        2,
        0,
    ),
    // 4: newer than mlock2 to deny
    jump(
        libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K,
        LAST_CALL_OF_4_4,
        1,
        0,
    ),
    // 5: allow
    stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    // 6: deny: the call fails with ENOSYS, as on a kernel without it
    stmt(
        libc::BPF_RET | libc::BPF_K,
        libc::SECCOMP_RET_ERRNO | (libc::ENOSYS as u32 & libc::SECCOMP_RET_DATA),
    ),
];

/// Puts the kernel floor on the calling thread: from now on every system
/// call newer than Linux 4.4 it or anything it starts makes fails with
/// ENOSYS. It cannot be undone. Sets `PR_SET_NO_NEW_PRIVS` first (the
/// kernel requires it of a process without CAP_SYS_ADMIN; a set-uid
/// program started later then gains no privilege). Only system calls and
/// no allocation: safe in a forked child before exec
/// ([`CommandExt::pre_exec`]).
pub fn install_kernel_floor() -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: FILTER.len() as u16,
        filter: FILTER.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with integer arguments; it changes only this thread's
    // flags.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `prog` points at FILTER, a static array of `len` valid
    // instructions; the kernel copies it during the call and keeps no
    // pointer to it.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `cmd` start its program under the kernel floor (installed in the
/// child between fork and exec); `cmd`.
pub fn under_kernel_floor(cmd: &mut Command) -> &mut Command {
    // SAFETY: runs in the forked child before exec; install_kernel_floor
    // makes only prctl calls (async-signal-safe) and does not allocate.
    unsafe { cmd.pre_exec(install_kernel_floor) }
}

/// True when [`KERNEL_FLOOR_ENV`] asks for the floor (`4.4`), false when
/// it is unset or empty. Panics on any other value, naming it and the
/// accepted one (tests only: a misspelt request must not pass silently
/// without the filter).
pub fn kernel_floor_requested() -> bool {
    match std::env::var(KERNEL_FLOOR_ENV) {
        Err(std::env::VarError::NotPresent) => false,
        Ok(v) if v.is_empty() => false,
        Ok(v) if v == FLOOR_4_4 => true,
        Ok(v) => panic!(
            "{KERNEL_FLOOR_ENV}={v:?} is not a kernel floor the kit knows: \
             set it to {FLOOR_4_4:?} (Linux 4.4, the robot's kernel) or unset it"
        ),
        Err(e) => {
            panic!("{KERNEL_FLOOR_ENV} is not text ({e}): set it to {FLOOR_4_4:?} or unset it")
        }
    }
}

/// Puts `cmd` under the floor when [`kernel_floor_requested`]; the kit's
/// spawning helpers call it on every program they start.
pub(crate) fn as_requested(cmd: &mut Command) -> &mut Command {
    if kernel_floor_requested() {
        under_kernel_floor(cmd);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the filter program in a tiny interpreter for one (arch, nr):
    /// the action it returns. Tests the jump offsets without a kernel.
    fn run(arch: u32, nr: u32) -> u32 {
        let mut pc = 0;
        let mut a = 0u32;
        loop {
            let ins = FILTER[pc];
            let code = ins.code as u32;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    a = match ins.k {
                        OFFSET_NR => nr,
                        OFFSET_ARCH => arch,
                        k => panic!("load of offset {k}"),
                    };
                    pc += 1;
                }
                c if c == libc::BPF_RET | libc::BPF_K => return ins.k,
                c if c & 0x07 == libc::BPF_JMP => {
                    let taken = match c & 0xf0 {
                        op if op == libc::BPF_JEQ => a == ins.k,
                        op if op == libc::BPF_JGE => a >= ins.k,
                        op if op == libc::BPF_JGT => a > ins.k,
                        op => panic!("jump op {op:#x}"),
                    };
                    pc += 1 + if taken { ins.jt } else { ins.jf } as usize;
                }
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    const DENY: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;

    #[test]
    fn the_filter_allows_4_4_calls_and_denies_newer_ones_x32_and_other_arches() {
        let x86 = AUDIT_ARCH_X86_64;
        for (arch, nr, want) in [
            (x86, 0, libc::SECCOMP_RET_ALLOW),   // read
            (x86, 56, libc::SECCOMP_RET_ALLOW),  // clone
            (x86, 318, libc::SECCOMP_RET_ALLOW), // getrandom (3.17)
            (x86, 316, libc::SECCOMP_RET_ALLOW), // renameat2 (3.15)
            (x86, 325, libc::SECCOMP_RET_ALLOW), // mlock2, last of 4.4
            (x86, 326, DENY),                    // copy_file_range (4.5)
            (x86, 332, DENY),                    // statx
            (x86, 424, DENY),                    // pidfd_send_signal
            (x86, 434, DENY),                    // pidfd_open
            (x86, 435, DENY),                    // clone3
            (x86, 436, DENY),                    // close_range
            (x86, X32_SYSCALL_BIT, DENY),        // x32 read
            (x86, u32::MAX, DENY),
            (0x4000_0003, 0, DENY), // AUDIT_ARCH_I386, read
        ] {
            assert_eq!(run(arch, nr), want, "arch {arch:#x} nr {nr}");
        }
        assert_eq!(libc::SYS_mlock2 as u32, LAST_CALL_OF_4_4);
    }
}
