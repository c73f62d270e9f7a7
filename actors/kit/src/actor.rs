//! Actors: named threads with a SCHED_FIFO priority and a CPU, both set from
//! inside the thread and read back.
//!
//! Without the permission to use SCHED_FIFO (no `CAP_SYS_NICE` and an
//! `RLIMIT_RTPRIO` below the priority) the actor warns once per process,
//! naming what is missing, and runs on at the normal policy.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Where and how an actor should run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorSpec {
    /// The thread's name (at most 15 bytes are shown by the kernel).
    pub name: String,
    /// SCHED_FIFO priority 1..=99, or `None` to keep the normal policy.
    pub priority: Option<u8>,
    /// The CPU to pin to, or `None` to keep the inherited affinity.
    pub cpu: Option<usize>,
}

/// The stack of every thread the kit makes (actors and [`thread`]): 256 KiB,
/// not std's 2 MiB. Under `mlockall(MCL_CURRENT | MCL_FUTURE)` (the runtime and
/// the guard lock their memory) every byte of every thread's stack is
/// resident, and a killed runtime's exit unlocks and frees all of it before
/// the kernel closes its descriptors and lets the chest board go to the
/// guard (docs/runtime.md, "Start").
pub const STACK_BYTES: usize = 256 << 10;

/// The builder of every thread of nao-rs's processes that is no actor (no
/// priority, no CPU): named `name`, with a stack of [`STACK_BYTES`]. A
/// thread that needs more sets `stack_size` on it again.
pub fn thread(name: &str) -> std::thread::Builder {
    std::thread::Builder::new()
        .name(name.to_string())
        .stack_size(STACK_BYTES)
}

impl ActorSpec {
    /// An actor with a name, no real-time priority and no pinning.
    pub fn new(name: &str) -> Self {
        ActorSpec {
            name: name.to_string(),
            priority: None,
            cpu: None,
        }
    }

    /// The same actor at SCHED_FIFO `priority`.
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// The same actor pinned to `cpu`.
    pub fn cpu(mut self, cpu: usize) -> Self {
        self.cpu = Some(cpu);
        self
    }
}

/// What the actor got, read back from the kernel inside the thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The SCHED_FIFO priority in force, `None` when the thread runs at the
    /// normal policy.
    pub fifo_priority: Option<u8>,
    /// The CPUs the thread may run on (read back with `sched_getaffinity`).
    pub cpus: Vec<usize>,
    /// Why the requested priority or CPU could not be set; empty when all is
    /// as asked.
    pub problems: Vec<String>,
}

impl Placement {
    /// True when the priority and the CPU are both as `spec` asked.
    #[cfg(test)]
    pub(crate) fn is_as_asked(&self, spec: &ActorSpec) -> bool {
        let prio_ok = spec.priority.is_none() || self.fifo_priority == spec.priority;
        let cpu_ok = match spec.cpu {
            None => true,
            Some(c) => self.cpus == [c],
        };
        prio_ok && cpu_ok
    }
}

static WARNED_PRIORITY: AtomicBool = AtomicBool::new(false);
static WARNED_CPU: AtomicBool = AtomicBool::new(false);

/// The message for a failed SCHED_FIFO request: names the capability and the
/// rtprio limit in force.
pub(crate) fn priority_problem(priority: u8, error: &str) -> String {
    let limit = rtprio_limit();
    let limit_text = match limit {
        Some(l) => format!("{l}"),
        None => "unknown".to_string(),
    };
    format!(
        "cannot set SCHED_FIFO priority {priority} ({error}): the process lacks CAP_SYS_NICE \
         and its RLIMIT_RTPRIO is {limit_text}; running at the normal policy. Fix: run as a \
         member of group hal with `LimitRTPRIO=95` (the systemd unit), \
         `ulimit -r 95`, or `setcap cap_sys_nice+ep` on the binary"
    )
}

/// The soft `RLIMIT_RTPRIO` of this process.
pub(crate) fn rtprio_limit() -> Option<u64> {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_RTPRIO)
        .ok()
        .map(|(soft, _hard)| soft)
}

/// Applies `spec` to the calling thread and reads back what the kernel
/// granted. Problems are returned, and the first of each kind in the
/// process is also printed once on stderr.
pub(crate) fn place_current_thread(spec: &ActorSpec) -> Placement {
    let mut problems = Vec::new();
    if let Some(cpu) = spec.cpu {
        let ids = core_affinity::get_core_ids().unwrap_or_default();
        match ids.into_iter().find(|c| c.id == cpu) {
            Some(id) => {
                if !core_affinity::set_for_current(id) {
                    problems.push(format!("cannot pin actor {} to CPU {cpu}", spec.name));
                }
            }
            None => problems.push(format!(
                "actor {}: CPU {cpu} is not available to this process; running unpinned",
                spec.name
            )),
        }
        if !problems.is_empty() && !WARNED_CPU.swap(true, Ordering::Relaxed) {
            eprintln!("nao-rs: warning: {}", problems[0]);
        }
    }
    if let Some(priority) = spec.priority {
        use thread_priority::{
            RealtimeThreadSchedulePolicy, ThreadPriority, ThreadPriorityValue, ThreadSchedulePolicy,
        };
        let result = ThreadPriorityValue::try_from(priority)
            .map_err(|e| format!("priority out of range: {e}"))
            .and_then(|value| {
                thread_priority::set_thread_priority_and_policy(
                    thread_priority::thread_native_id(),
                    ThreadPriority::Crossplatform(value),
                    ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo),
                )
                .map_err(|e| format!("{e:?}"))
            });
        if let Err(e) = result {
            let text = priority_problem(priority, &e);
            if !WARNED_PRIORITY.swap(true, Ordering::Relaxed) {
                eprintln!("nao-rs: warning: actor {}: {text}", spec.name);
            }
            problems.push(text);
        }
    }
    Placement {
        fifo_priority: current_fifo_priority(),
        cpus: current_cpus(),
        problems,
    }
}

/// The calling thread's SCHED_FIFO priority, `None` at any other policy.
pub(crate) fn current_fifo_priority() -> Option<u8> {
    let mut policy: libc::c_int = 0;
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pthread_self() is always a valid thread handle for the calling
    // thread; both out-pointers point to live locals of the right type.
    let rc = unsafe { libc::pthread_getschedparam(libc::pthread_self(), &mut policy, &mut param) };
    if rc == 0 && policy == libc::SCHED_FIFO {
        u8::try_from(param.sched_priority).ok()
    } else {
        None
    }
}

/// The CPUs the calling thread may run on.
pub(crate) fn current_cpus() -> Vec<usize> {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count())
            .filter(|&i| set.is_set(i).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// A running actor: its thread and what it got.
#[derive(Debug)]
pub struct Actor<T> {
    handle: JoinHandle<T>,
    placement: Placement,
}

impl<T> Actor<T> {
    /// What the actor got from the kernel (priority and CPUs, read back).
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Waits for the actor's function to return.
    ///
    /// # Errors
    ///
    /// The function panicked: `Err` carries the panic's payload.
    pub fn join(self) -> std::thread::Result<T> {
        self.handle.join()
    }
}

/// Starts an actor: a thread named `spec.name` that first places itself
/// (priority, CPU), reports the placement back, then runs `body`.
///
/// Returns once the placement is known, so the caller sees it at once.
///
/// # Errors
///
/// The thread could not be made (`std::thread::Builder::spawn`), or it
/// ended before it reported its placement.
pub fn spawn<T, F>(spec: ActorSpec, body: F) -> io::Result<Actor<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let thread_spec = spec.clone();
    let handle = thread(&spec.name).spawn(move || {
        let placement = place_current_thread(&thread_spec);
        let _ = tx.send(placement);
        body()
    })?;
    let placement = rx.recv().map_err(|_| {
        io::Error::other(format!("actor {} ended before it placed itself", spec.name))
    })?;
    Ok(Actor { handle, placement })
}

/// [`spawn`] for a body that must not die silently: a panic in `body` is
/// caught and `on_panic` runs on the actor's thread (the runtime trips the
/// switch with `fault` there). Returns `None` from the body after a panic.
///
/// # Errors
///
/// As [`spawn`].
pub fn spawn_guarded<T, F, P>(spec: ActorSpec, body: F, on_panic: P) -> io::Result<Actor<Option<T>>>
where
    F: FnOnce() -> T + Send + 'static,
    P: FnOnce() + Send + 'static,
    T: Send + 'static,
{
    spawn(spec, move || {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
            Ok(v) => Some(v),
            Err(_) => {
                on_panic();
                None
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actor_without_priority_keeps_the_normal_policy() {
        let actor = spawn(ActorSpec::new("plain"), current_fifo_priority).unwrap();
        assert_eq!(actor.placement().fifo_priority, None);
        assert!(actor.placement().problems.is_empty());
        assert_eq!(actor.join().unwrap(), None);
    }

    #[test]
    fn actor_gets_sched_fifo_or_warns_naming_cap_sys_nice() {
        let spec = ActorSpec::new("fifo").priority(5);
        let actor = spawn(spec.clone(), current_fifo_priority).unwrap();
        let p = actor.placement().clone();
        let inside = actor.join().unwrap();
        match p.fifo_priority {
            Some(5) => assert!(p.problems.is_empty()),
            None => {
                assert_eq!(p.problems.len(), 1);
                assert!(p.problems[0].contains("CAP_SYS_NICE"), "{}", p.problems[0]);
                assert!(p.problems[0].contains("RLIMIT_RTPRIO"), "{}", p.problems[0]);
            }
            other => panic!("unexpected priority {other:?}"),
        }
        // The thread itself reads the same as the placement it reported.
        assert_eq!(inside, p.fifo_priority);
    }

    #[test]
    fn actor_pins_itself_to_its_cpu_and_reads_it_back() {
        let cpus = current_cpus();
        let cpu = *cpus.last().expect("some CPU");
        let spec = ActorSpec::new("pinned").cpu(cpu);
        let actor = spawn(spec.clone(), current_cpus).unwrap();
        assert!(
            actor.placement().is_as_asked(&spec),
            "{:?}",
            actor.placement()
        );
        assert_eq!(actor.join().unwrap(), vec![cpu]);
    }

    #[test]
    fn actor_on_a_missing_cpu_runs_on_and_says_why() {
        let spec = ActorSpec::new("nocpu").cpu(100_000);
        let actor = spawn(spec, || 7).unwrap();
        assert!(actor.placement().problems[0].contains("CPU 100000"));
        assert_eq!(actor.join().unwrap(), 7);
    }

    #[test]
    fn panic_in_a_guarded_actor_runs_on_panic() {
        let hit = std::sync::Arc::new(AtomicBool::new(false));
        let h = hit.clone();
        let actor = spawn_guarded(
            ActorSpec::new("panics"),
            || -> u8 { panic!("test panic") },
            move || h.store(true, Ordering::SeqCst),
        )
        .unwrap();
        assert_eq!(actor.join().unwrap(), None);
        assert!(hit.load(Ordering::SeqCst));
    }

    #[test]
    fn actor_thread_has_its_name() {
        let actor = spawn(ActorSpec::new("named-actor"), || {
            std::thread::current().name().map(String::from)
        })
        .unwrap();
        assert_eq!(actor.join().unwrap().as_deref(), Some("named-actor"));
    }
}
