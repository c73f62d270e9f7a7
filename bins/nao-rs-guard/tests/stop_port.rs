//! The UDP stop port against the robot's own processes (docs/runtime.md,
//! "The UDP stop"): where the one socket comes from (systemd's LISTEN_FDS,
//! else the hand-over socket file next to the page, else a bind), that a
//! socket handed over is checked, that a port no process of ours reads
//! trips `stop-port-unread`, and that no error makes the listener spin.
//! Each from second processes (the guard, `nao-rs run`), judged by the page
//! and the virtual robot's trace.

mod common;

use std::net::{TcpListener, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{wait_for, GuardRig, Proc, Rig, Runtime};
use deathswitch::stop::udp::handover_path;
use deathswitch::{Page, Reason};
use nix::sys::signal::Signal;
use testkit::{free_udp_port, UnixServer};

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The virtual robot and an armed page.
fn rig() -> (Rig, Page) {
    let rig = Rig::start();
    let page = Page::open(rig.page_path()).unwrap();
    page.rearm(); // the test is the person at the robot
    (rig, page)
}

/// `nao-rs run --controller stand --priority 0 --udp-port PORT` as `name`.
fn runtime(name: &str, port: u16) -> Runtime {
    Runtime::new(name).priority(0).udp_port(port)
}

fn send_stop(port: u16) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.send_to(b"NAO-RS STOP", ("127.0.0.1", port)).unwrap();
}

/// The judge: the page is tripped with `reason`, and every frame the
/// virtual robot got more than 30 ms (the frame in flight, then the next
/// cycle's check) after the trip is all-off; at least 20 of them.
fn assert_tripped_and_all_off(rig: &Rig, page: &Page, reason: Reason) {
    let snap = wait_for("the trip", Duration::from_secs(5), || {
        let s = page.snapshot();
        s.reason.map(|_| s)
    });
    assert_eq!(snap.reason, Some(reason), "{snap:?}");
    let t = snap.tripped_at_ns + 30_000_000;
    let after = wait_for("20 frames after the trip", Duration::from_secs(10), || {
        let f: Vec<_> = rig.frames().into_iter().filter(|l| l.t_ns > t).collect();
        (f.len() >= 20).then_some(f)
    });
    let stiff = after.iter().filter(|l| !l.all_off).count();
    assert_eq!(stiff, 0, "{stiff} stiff frames after the trip");
}

/// Serves `fd` on the listener `l` to every asker until dropped, as a
/// holder hands the socket over (one byte with the fd, SCM_RIGHTS): the
/// bogus holder.
fn bogus_server(l: UnixListener, fd: OwnedFd) -> UnixServer {
    UnixServer::start(l, move |c: &UnixStream| {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
        let fds = [fd.as_raw_fd()];
        let iov = [std::io::IoSlice::new(b"S")];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        let _ = sendmsg::<()>(c.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None);
    })
}

/// A UDP socket bound to 0.0.0.0:`port` in a new network namespace (made
/// by unshare(CLONE_NEWNET) on a thread of its own, as `unshare -n` does;
/// only loopback exists there, and no packet is sent). None without the
/// privilege.
fn udp_in_another_netns(port: u16) -> Option<OwnedFd> {
    std::thread::spawn(move || {
        // SAFETY: unshare moves only this thread into a new namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return None;
        }
        UdpSocket::bind(("0.0.0.0", port)).ok().map(OwnedFd::from)
    })
    .join()
    .unwrap()
}

/// Squatters on an abstract name (`@nao-rs-udp-stop-PORT`, serving a
/// TCP socket) and a stale socket file on the hand-over path change
/// nothing: the guard and the runtime share the port, no
/// `stop-port-unread`, and a stop trips `udp`.
#[test]
fn stop_port_squatters_on_an_abstract_name_and_a_stale_file_change_nothing() {
    use std::os::linux::net::SocketAddrExt;
    let (rig, page) = rig();
    let port = free_udp_port();
    let name = std::os::unix::net::SocketAddr::from_abstract_name(
        format!("nao-rs-udp-stop-{port}").as_bytes(),
    )
    .unwrap();
    let tcp = TcpListener::bind("0.0.0.0:0").unwrap();
    let squat = UnixListener::bind_addr(&name).expect("bind the squatter's name");
    let _squatter = bogus_server(squat, OwnedFd::from(tcp));
    // A stale hand-over file: bound, its listener gone.
    drop(UnixListener::bind(handover_path(rig.page_path(), port)).unwrap());
    let _g = rig.start_guard(port);
    rig.wait_log(
        "guard",
        "UDP stop listening, bound by this process",
        Duration::from_secs(5),
    );
    let _rt = rig.start_runtime(&runtime("rt", port));
    rig.wait_log(
        "rt",
        "UDP stop listening on the socket handed over",
        Duration::from_secs(15),
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(page.snapshot().armed, "tripped: {:?}", page.snapshot());
    send_stop(port);
    assert_tripped_and_all_off(&rig, &page, Reason::Udp);
    assert!(!rig.log("rt").contains("refused"), "{}", rig.log("rt"));
}

/// A bogus socket served on the hand-over file (a TCP socket; a UDP
/// socket on 127.0.0.2; with root, a UDP socket on the port in another
/// network namespace) is refused by the runtime, which says what was
/// wrong, binds the port itself and serves the file in the bogus one's
/// place; the guard then shares its socket, nothing trips
/// `stop-port-unread`, and a stop lands.
#[test]
fn stop_port_bogus_sockets_on_the_handover_file_are_refused_and_the_stop_lands() {
    let port = free_udp_port();
    let mut cases: Vec<(&str, OwnedFd, &str)> = vec![
        (
            "tcp",
            OwnedFd::from(TcpListener::bind("0.0.0.0:0").unwrap()),
            "not a datagram socket",
        ),
        (
            "udp 127.0.0.2",
            OwnedFd::from(UdpSocket::bind("127.0.0.2:0").unwrap()),
            "not the wildcard address",
        ),
    ];
    match udp_in_another_netns(port) {
        Some(fd) => cases.push(("udp in another netns", fd, "in another network namespace")),
        None => println!(
            "SKIPPED the network namespace case: unshare(CLONE_NEWNET) needs root (CI is root)"
        ),
    }
    for (what, fd, why) in cases {
        let (rig, page) = rig();
        let file = handover_path(rig.page_path(), port);
        let _ = std::fs::remove_file(&file);
        let bogus = bogus_server(UnixListener::bind(&file).unwrap(), fd);
        let _rt = rig.start_runtime(&runtime("rt", port));
        rig.wait_log("rt", why, Duration::from_secs(15));
        rig.wait_log("rt", "bound by this process", Duration::from_secs(2));
        let _g = rig.start_guard(port);
        rig.wait_log(
            "guard",
            "listening on the socket handed over",
            Duration::from_secs(5),
        );
        drop(bogus);
        std::thread::sleep(Duration::from_millis(1200));
        assert!(
            page.snapshot().armed,
            "{what}: tripped: {:?}",
            page.snapshot()
        );
        send_stop(port);
        assert_tripped_and_all_off(&rig, &page, Reason::Udp);
        println!("{what}: refused ({why}), the stop landed");
    }
}

/// `nobody` holds the port first: neither the guard nor the runtime can
/// read it, so the switch is tripped `stop-port-unread` (with the
/// `udp-port-not-owned` flag), and a re-arm does not stick while it lasts.
/// The squatter's socket is made and bound by a thread running as nobody
/// (setresuid on that thread only), on a free high port.
#[test]
fn stop_port_held_by_nobody_trips_stop_port_unread_and_a_rearm_does_not_stick() {
    use deathswitch::flags::SafetyFlags;
    if !is_root() {
        println!("SKIPPED: switching a thread to nobody needs root (CI is root)");
        return;
    }
    let port = free_udp_port();
    let squat = std::thread::spawn(move || {
        // SAFETY: raw syscalls change this thread's ids only (glibc's
        // wrappers would change every thread's).
        unsafe {
            libc::syscall(libc::SYS_setresgid, 65534, 65534, 65534);
            libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534);
        }
        UdpSocket::bind(("0.0.0.0", port)).unwrap()
    })
    .join()
    .unwrap();
    let (rig, page) = rig();
    let started = Instant::now();
    let _g = rig.start_guard(port);
    let _rt = rig.start_runtime(&runtime("rt", port));
    wait_for("the trip", Duration::from_secs(5), || {
        (!page.snapshot().armed).then_some(())
    });
    println!("tripped {:?} after the guard's spawn", started.elapsed());
    assert_tripped_and_all_off(&rig, &page, Reason::StopPortUnread);
    wait_for("udp-port-not-owned", Duration::from_secs(20), || {
        SafetyFlags::from_bits_truncate(page.snapshot().safety_flags)
            .contains(SafetyFlags::UDP_PORT_NOT_OWNED)
            .then_some(())
    });
    rig.wait_log("rt", "UDP stop port unread", Duration::from_secs(5));
    rig.wait_log("guard", "UDP stop port unread", Duration::from_secs(5));
    // A re-arm while nobody holds the port: tripped again within a retry.
    page.rearm();
    let again = Instant::now();
    wait_for("the trip again", Duration::from_secs(2), || {
        (page.snapshot().reason == Some(Reason::StopPortUnread)).then_some(())
    });
    println!("re-armed: tripped again after {:?}", again.elapsed());
    drop(squat);
}

/// `cmd` as systemd starts a service with `Sockets=`: `sock` at fd 3,
/// `LISTEN_FDS=1`, `LISTEN_FDNAMES=nao-rs-stop`, `LISTEN_PID` its own pid
/// (set by `sh` before it execs the program, as systemd sets it after fork).
fn socket_activated(cmd: &Command, sock: &UdpSocket, log: &Path) -> Command {
    let mut c = Command::new("sh");
    c.stderr(std::fs::File::create(log).unwrap());
    c.arg("-c")
        .arg("export LISTEN_PID=$$; exec \"$0\" \"$@\"")
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .env("LISTEN_FDS", "1")
        .env("LISTEN_FDNAMES", "nao-rs-stop");
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    let fd = sock.as_raw_fd();
    // SAFETY: dup2 only, between fork and exec; the new fd 3 has no CLOEXEC.
    unsafe {
        c.pre_exec(move || {
            if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

/// The flags of `pid`'s fd 3 (octal, from /proc/PID/fdinfo/3).
fn fd3_flags(pid: u32) -> u32 {
    let t = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/3")).unwrap_or_default();
    t.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        .unwrap_or(0)
}

/// The socket systemd holds (LISTEN_FDS): the guard and the runtime both
/// read it (each says so, fd 3 marked close-on-exec), and a stop sent while
/// the guard is stopped and the runtime dead queues in it and trips the
/// switch as soon as the restarted runtime reads.
#[test]
fn stop_port_from_listen_fds_is_read_by_both_and_a_stop_queued_while_neither_reads_lands() {
    let (rig, page) = rig();
    let port = free_udp_port();
    // What systemd does at boot: bind the port, hold it.
    let held = UdpSocket::bind(("0.0.0.0", port)).unwrap();
    let g = Proc::spawn(
        "nao-rs-guard",
        &mut socket_activated(&rig.guard_command(port), &held, &rig.log_path("guard")),
    );
    rig.wait_log(
        "guard",
        "UDP stop listening on systemd's socket",
        Duration::from_secs(5),
    );
    let mut rt = Proc::spawn(
        "nao-rs run",
        &mut socket_activated(
            &rig.runtime_command(&runtime("rt", port)),
            &held,
            &rig.log_path("rt"),
        ),
    );
    rig.wait_log(
        "rt",
        "UDP stop listening on systemd's socket",
        Duration::from_secs(15),
    );
    for (who, pid) in [("guard", g.pid()), ("runtime", rt.pid())] {
        assert_ne!(
            fd3_flags(pid) & libc::O_CLOEXEC as u32,
            0,
            "{who}'s fd 3 is not close-on-exec"
        );
    }
    assert!(!rig.log("rt").contains("bound by this process"));
    // Neither reads: the guard stopped, the runtime killed.
    g.signal(Signal::SIGSTOP);
    rt.signal(Signal::SIGKILL);
    rt.wait_exit(Duration::from_secs(5))
        .expect("the runtime ends");
    send_stop(port);
    std::thread::sleep(Duration::from_millis(300));
    assert_ne!(
        page.snapshot().reason,
        Some(Reason::Udp),
        "read by no one yet"
    );
    // The restart (systemd's Restart=always) gets the same socket.
    let restarted = Instant::now();
    let _rt2 = Proc::spawn(
        "nao-rs run",
        &mut socket_activated(
            &rig.runtime_command(&runtime("rt2", port)),
            &held,
            &rig.log_path("rt2"),
        ),
    );
    wait_for("the queued stop", Duration::from_secs(15), || {
        (page.snapshot().reason == Some(Reason::Udp)).then_some(())
    });
    println!(
        "the queued stop tripped {:?} after the restart",
        restarted.elapsed()
    );
    assert!(rig
        .log("rt2")
        .contains("UDP stop listening on systemd's socket"));
    g.signal(Signal::SIGCONT);
}

/// The CPU time (clock ticks, user and system) of the thread of process
/// `pid` named `name` (`/proc/PID/task/*/comm`).
fn thread_cpu(pid: u32, name: &str) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    let task = tasks
        .filter_map(Result::ok)
        .map(|t| t.path())
        .find(|t| std::fs::read_to_string(t.join("comm")).is_ok_and(|c| c.trim_end() == name))
        .unwrap_or_else(|| panic!("no thread {name} in process {pid}"));
    let s = std::fs::read_to_string(task.join("stat")).unwrap();
    let f: Vec<u64> = s
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // utime, stime: fields 14 and 15 (after "pid (comm) state").
    f[10] + f[11]
}

/// Case 7's UDP part: at a file limit where `accept` on the hand-over
/// socket fails (EMFILE, the connection stays queued, poll wakes at once)
/// the listener backs off and logs once instead of spinning at real-time
/// priority. Judged by the listener thread's CPU time (`nao-rs-udp` of
/// `nao-rs run --controller none`; its cycle thread runs on beside it).
#[test]
fn stop_port_listener_backs_off_instead_of_spinning_when_accept_fails() {
    let (rig, page) = rig();
    let page_path = rig.page_path();
    let port = free_udp_port();
    let mut p = rig.start_runtime(&Runtime::new("rt").controller("none").udp_port(port));
    let path = handover_path(page_path, port);
    wait_for("the hand-over file", Duration::from_secs(5), || {
        path.exists().then_some(())
    });
    std::thread::sleep(Duration::from_millis(300));
    // No fd left: the limit at the lowest fd number it does not use.
    let pid = p.pid();
    let used: Vec<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let free = (0..).find(|n| !used.contains(n)).unwrap();
    let lim = libc::rlimit {
        rlim_cur: free,
        rlim_max: free.max(64),
    };
    // SAFETY: prlimit on our child with a valid rlimit; no old value read.
    let r = unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    // Connections it cannot accept.
    let conns: Vec<_> = (0..4)
        .filter_map(|_| std::os::unix::net::UnixStream::connect(&path).ok())
        .collect();
    assert!(!conns.is_empty());
    let cpu = || thread_cpu(pid, "nao-rs-udp");
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    let c0 = cpu();
    std::thread::sleep(Duration::from_secs(2));
    let used = (cpu() - c0) as f64 / ticks as f64;
    assert!(p.running(), "the listener died");
    let log = rig.log("rt");
    println!("CPU {used:.3} s in 2 s with accept failing");
    assert!(used < 0.2, "spinning: {used:.3} s CPU in 2 s:\n{log}");
    // It was failing: the listener said it backs off.
    rig.wait_log("rt", "backing off", Duration::from_secs(2));
    // And the stop still lands.
    page.rearm();
    send_stop(port);
    wait_for("the stop", Duration::from_secs(2), || {
        (page.snapshot().reason == Some(Reason::Udp)).then_some(())
    });
    drop(conns);
}

/// systemd's own tool passes the socket as a service manager does
/// (`systemd-socket-activate -d -l PORT --fdname=nao-rs-stop`: a `[::]`
/// dual-stack socket with SO_REUSEADDR set, LISTEN_* in the environment):
/// the guard takes it, passes the check, clears SO_REUSEADDR, and a stop
/// trips. Skipped where the tool is not installed.
#[test]
fn stop_port_from_systemd_socket_activate_is_taken_by_the_guard() {
    let tool = "systemd-socket-activate";
    if Command::new(tool).arg("--version").output().is_err() {
        println!("SKIPPED: {tool} is not installed here (it comes with systemd)");
        return;
    }
    let (rig, page) = rig();
    let port = free_udp_port();
    let g = rig.guard_command(port);
    let mut c = Command::new(tool);
    c.args(["-d", "-l", &port.to_string(), "--fdname=nao-rs-stop"])
        .arg(g.get_program())
        .args(g.get_args())
        .env("NAO_RS_DEATHSWITCH", rig.page_path())
        .stderr(std::fs::File::create(rig.log_path("guard")).unwrap());
    let _g = Proc::spawn(tool, &mut c);
    // In datagram mode the tool starts the program on the first datagram.
    wait_for("the socket", Duration::from_secs(5), || {
        UdpSocket::bind(("0.0.0.0", port)).is_err().then_some(())
    });
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.send_to(b"hello", ("127.0.0.1", port)).unwrap();
    rig.wait_log(
        "guard",
        "UDP stop listening on systemd's socket",
        Duration::from_secs(5),
    );
    assert!(page.snapshot().armed, "{:?}", page.snapshot());
    send_stop(port);
    wait_for("the stop", Duration::from_secs(2), || {
        (page.snapshot().reason == Some(Reason::Udp)).then_some(())
    });
}
