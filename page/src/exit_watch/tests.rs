use super::*;
use std::sync::Mutex;
use std::time::Duration;

/// The tests that fork or hold ends a fork would copy run one at a time:
/// a child forked by one test holds a copy of every descriptor of the
/// test process, another test's ends among them.
static FORKS: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    FORKS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A child process (fork) that connects to `path` itself (so only it holds
/// that end) and waits to be killed. The address is built before the
/// fork; the child makes only system calls.
fn child_connecting(path: &Path) -> libc::pid_t {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, b) in addr.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
        *d = *b as libc::c_char;
    }
    // SAFETY: the child calls only signal, socket, connect and pause (all
    // async-signal-safe) on memory made before the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: as above (signal is async-signal-safe too).
        unsafe {
            // The test process's handlers (Rust's for SIGSEGV) go: each
            // signal ends the child as it would end a runtime.
            libc::signal(libc::SIGSEGV, libc::SIG_DFL);
            libc::signal(libc::SIGABRT, libc::SIG_DFL);
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            libc::connect(
                fd,
                (&addr as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            );
            loop {
                libc::pause();
            }
        }
    }
    pid
}

/// A child process (fork) that runs `f` on a raw fd and then waits to be
/// killed. Only async-signal-safe calls in the child.
fn child_with(fd: Option<i32>, f: fn(i32)) -> libc::pid_t {
    // SAFETY: the child calls only async-signal-safe functions (send,
    // pause, _exit) through `f` and below.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        if let Some(fd) = fd {
            f(fd);
        }
        loop {
            // SAFETY: pause only waits for a signal.
            unsafe { libc::pause() };
        }
    }
    pid
}

fn kill_and_reap(pid: libc::pid_t) {
    // SAFETY: kill and waitpid of our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
}

fn accept_one(l: &Listener) -> Conn {
    for _ in 0..200 {
        if let Some(c) = l.accept().unwrap() {
            return c;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("no connection");
}

fn answer_raw(fd: i32) {
    // SAFETY: send of one byte we own.
    unsafe { libc::send(fd, (&ANSWER as *const u8).cast(), 1, libc::MSG_NOSIGNAL) };
}

#[test]
fn exit_watch_socket_file_has_mode_0660_next_to_the_page_and_goes_with_the_guard() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("deathswitch");
    assert_eq!(path(&page), dir.path().join("deathswitch.exit.sock"));
    // A stale file (a guard that died) is replaced.
    std::fs::write(path(&page), b"stale").unwrap();
    let l = Listener::bind(&page).unwrap();
    let md = std::fs::symlink_metadata(l.path()).unwrap();
    assert_eq!(md.permissions().mode() & 0o7777, 0o660);
    assert!(l.accept().unwrap().is_none(), "nobody waits: no block");
    drop(l);
    assert!(!path(&page).exists(), "removed with the guard");
}

#[test]
fn exit_watch_connection_of_a_killed_process_closes_at_once_for_any_signal() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("deathswitch");
    let l = Listener::bind(&page).unwrap();
    for sig in [libc::SIGKILL, libc::SIGSEGV, libc::SIGABRT] {
        let child = child_connecting(&path(&page));
        let conn = accept_one(&l);
        assert_eq!(conn.peer_pid(), child as u32, "SO_PEERCRED");
        assert!(!conn.closed(), "held by the child");
        // SAFETY: a plain kill(2) of our own child.
        unsafe { libc::kill(child, sig) };
        assert!(conn.wait_closed(2000), "signal {sig}");
        assert!(conn.closed(), "stays closed");
        kill_and_reap(child);
    }
}

#[test]
fn exit_watch_answer_is_stamped_with_the_sender_and_a_stale_one_is_emptied_by_the_prompt() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("deathswitch");
    let l = Listener::bind(&page).unwrap();
    let s = UnixStream::connect(path(&page)).unwrap();
    let conn = accept_one(&l);
    assert_eq!(conn.peer_pid(), std::process::id(), "SO_PEERCRED");
    // An answer sent before the prompt (a process that connected, answered
    // and handed its end on) is emptied by the prompt: never heard.
    answer_raw(s.as_raw_fd());
    assert!(conn.prompt());
    assert_eq!(conn.hear(), Heard::Nothing);
    // The answer of a child that shares the end names the child, not the
    // process that connected.
    let child = child_with(Some(s.as_raw_fd()), answer_raw);
    let mut heard = Heard::Nothing;
    for _ in 0..200 {
        heard = conn.hear();
        if heard != Heard::Nothing {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(heard, Heard::Answer { pid: child as u32 });
    kill_and_reap(child);
    // Our own answer names us.
    answer_raw(s.as_raw_fd());
    assert_eq!(
        conn.hear(),
        Heard::Answer {
            pid: std::process::id()
        }
    );
    // Other bytes are noise; they leave no readable connection behind.
    (&s).write_all_bytes(b"xyz");
    assert!(!conn.closed());
    assert!(!MonotonicClock.wait_readable_until_ns(crate::monotonic_ns() + 1_000_000, conn.fd()));
    drop(s);
    assert!(conn.closed());
}

trait WriteAll {
    fn write_all_bytes(self, b: &[u8]);
}
impl WriteAll for &UnixStream {
    fn write_all_bytes(mut self, b: &[u8]) {
        use std::io::Write;
        self.write_all(b).unwrap();
    }
}

#[test]
fn exit_watch_runtime_side_answers_and_reconnects_after_a_guard_restart() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("deathswitch");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let (p2, s2) = (page.clone(), stop.clone());
    // No guard yet: the runtime's side retries.
    let t = std::thread::spawn(move || keep_connected(&p2, &s2));
    std::thread::sleep(Duration::from_millis(120));
    for _restart in 0..2 {
        let l = Listener::bind(&page).unwrap();
        let conn = accept_one(&l);
        assert!(conn.prompt());
        let mut heard = Heard::Nothing;
        for _ in 0..200 {
            heard = conn.hear();
            if heard != Heard::Nothing {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            heard,
            Heard::Answer {
                pid: std::process::id()
            }
        );
        assert!(!conn.closed());
        // The guard goes (restart): the runtime connects to the next one.
        drop(conn);
        drop(l);
    }
    // Stopping the runtime's side closes its end.
    let l = Listener::bind(&page).unwrap();
    let conn = accept_one(&l);
    stop.store(true, Ordering::Release);
    t.join().unwrap();
    assert!(conn.wait_closed(1000));
}
