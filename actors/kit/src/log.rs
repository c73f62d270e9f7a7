//! Logging without logging on a real-time thread.
//!
//! A real-time actor never formats or writes a log line: it pushes a small
//! `Copy` event (a fixed text, a number, a time) into its own preallocated `rtrb` ring ([`EventSink`],
//! never blocks, never allocates; a full ring counts the event as dropped).
//! The rings stay `rtrb` for that: one wait-free single-producer ring per
//! real-time thread, where a shared channel would make the threads contend.
//! The logging actor ([`Logbook::spawn`]) drains every ring every 50 ms and
//! writes through `slog`; it is told of new rings and of its stop by a
//! `crossbeam-channel` (from any thread, never on a real-time path). Repeated events are counted, not repeated
//! (the coalescer): the first of a kind is logged at once, the repeats within
//! its window are summed into one line at the end of the window. The window
//! is 1 s and doubles (up to 64 s) while the repeats go on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use slog::{error, info, warn, Logger};

use crate::actor::{spawn, Actor, ActorSpec};
use crate::clock::monotonic_ns;

/// How bad an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Normal operation (a state change, a start).
    Info,
    /// Something degraded but handled.
    Warning,
    /// Something failed.
    Error,
}

/// One event from a real-time actor: a fixed text and one number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    /// How bad.
    pub(crate) level: Level,
    /// What happened; also the key under which repeats are counted.
    pub(crate) what: &'static str,
    /// A number that goes with it (a cycle, a count, an error code).
    pub(crate) value: i64,
    /// When, monotonic ns.
    pub(crate) t_ns: u64,
}

/// The real-time side: pushes events into a preallocated ring.
#[derive(Debug)]
pub struct EventSink {
    producer: rtrb::Producer<Event>,
    dropped: Arc<AtomicU64>,
}

impl EventSink {
    /// Queues `event`; never blocks or allocates. A full ring drops it and
    /// counts the drop (the logging actor reports drops).
    fn push(&mut self, event: Event) {
        if self.producer.push(event).is_err() {
            // Relaxed: a statistic, read by the logging actor only.
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Queues an event of `level` about `what` with `value`, stamped now.
    pub fn emit(&mut self, level: Level, what: &'static str, value: i64) {
        self.push(Event {
            level,
            what,
            value,
            t_ns: monotonic_ns(),
        });
    }
}

/// One line the coalescer wants written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Report {
    /// The source (the sink's index in the logbook).
    pub(crate) source: usize,
    /// The event's level.
    pub(crate) level: Level,
    /// The event's text.
    pub(crate) what: &'static str,
    /// The first value (a first occurrence) or the last value (a summary).
    pub(crate) value: i64,
    /// 0 for a first occurrence; else how many repeats the summary covers.
    pub(crate) repeats: u64,
    /// The summary's window, ns (0 for a first occurrence).
    pub(crate) window_ns: u64,
}

const FIRST_WINDOW_NS: u64 = 1_000_000_000;
/// How often the logging actor drains the rings.
const DRAIN_PERIOD: Duration = Duration::from_millis(50);
const MAX_WINDOW_NS: u64 = 64_000_000_000;
const SLOTS: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Slot {
    source: usize,
    level: Level,
    what: &'static str,
    window_start_ns: u64,
    window_ns: u64,
    repeats: u64,
    last_value: i64,
}

/// Counts repeated events (pure; time passed in). Keyed by source and text.
#[derive(Debug, Clone)]
pub(crate) struct Coalescer {
    slots: Vec<Slot>,
}

impl Default for Coalescer {
    fn default() -> Self {
        Coalescer {
            slots: Vec::with_capacity(SLOTS),
        }
    }
}

impl Coalescer {
    /// An empty coalescer.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Takes one event from `source`; returns the line to write at once
    /// (the first of its kind in a window), or `None` when it is counted.
    pub(crate) fn on_event(&mut self, source: usize, e: &Event) -> Option<Report> {
        if let Some(slot) = self
            .slots
            .iter_mut()
            .find(|s| s.source == source && s.what == e.what)
        {
            slot.repeats += 1;
            slot.last_value = e.value;
            return None;
        }
        if self.slots.len() < SLOTS {
            self.slots.push(Slot {
                source,
                level: e.level,
                what: e.what,
                window_start_ns: e.t_ns,
                window_ns: FIRST_WINDOW_NS,
                repeats: 0,
                last_value: e.value,
            });
        }
        Some(Report {
            source,
            level: e.level,
            what: e.what,
            value: e.value,
            repeats: 0,
            window_ns: 0,
        })
    }

    /// Closes the windows that ended by `now_ns`, calling `out` with one
    /// summary line for each that had repeats. A window with repeats opens
    /// a window twice as long; one without frees its slot.
    pub(crate) fn flush(&mut self, now_ns: u64, mut out: impl FnMut(Report)) {
        self.slots.retain_mut(|s| {
            if now_ns < s.window_start_ns.saturating_add(s.window_ns) {
                return true;
            }
            if s.repeats == 0 {
                return false;
            }
            out(Report {
                source: s.source,
                level: s.level,
                what: s.what,
                value: s.last_value,
                repeats: s.repeats,
                window_ns: now_ns - s.window_start_ns,
            });
            s.repeats = 0;
            s.window_start_ns = now_ns;
            s.window_ns = (s.window_ns * 2).min(MAX_WINDOW_NS);
            true
        });
    }

    /// Writes every pending summary now (at shutdown).
    pub(crate) fn flush_all(&mut self, now_ns: u64, out: impl FnMut(Report)) {
        for s in &mut self.slots {
            s.window_ns = 0;
        }
        self.flush(now_ns, out);
    }
}

struct Source {
    name: String,
    consumer: rtrb::Consumer<Event>,
    dropped: Arc<AtomicU64>,
    dropped_reported: u64,
}

/// What the logging actor is told.
enum Control {
    /// A new ring to drain.
    Source(Source),
    /// Drain a last time and end.
    Stop,
}

/// The logging side: hands each ring's consumer to the logging actor,
/// which writes to a `slog` logger.
#[derive(Clone)]
pub struct Logbook {
    logger: Logger,
    control: Sender<Control>,
    inbox: Receiver<Control>,
}

impl Logbook {
    /// A logbook writing to `logger`.
    pub fn new(logger: Logger) -> Self {
        let (control, inbox) = crossbeam_channel::unbounded();
        Logbook {
            logger,
            control,
            inbox,
        }
    }

    /// The logger, for threads that are not real-time (start-up, shutdown).
    pub fn logger(&self) -> &Logger {
        &self.logger
    }

    /// A new ring of `capacity` events for the actor `name`. Call at start-up
    /// (it allocates), not in a cycle.
    pub fn sink(&self, name: &str, capacity: usize) -> EventSink {
        let (producer, consumer) = rtrb::RingBuffer::new(capacity.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        // Never fails: `self` holds a receiver.
        let _ = self.control.send(Control::Source(Source {
            name: name.to_string(),
            consumer,
            dropped: dropped.clone(),
            dropped_reported: 0,
        }));
        EventSink { producer, dropped }
    }

    /// Starts the logging actor (normal priority): drains every 50 ms until
    /// the returned handle is stopped, then drains a last time.
    ///
    /// # Errors
    ///
    /// The logging actor's thread could not be started.
    pub fn spawn(&self) -> std::io::Result<LogActor> {
        let logger = self.logger.clone();
        let inbox = self.inbox.clone();
        let actor = spawn(ActorSpec::new("nao-rs-log"), move || {
            let mut sources: Vec<Source> = Vec::new();
            let mut co = Coalescer::new();
            loop {
                drain(&logger, &mut sources, &mut co, monotonic_ns());
                // 50 ms, or at once on a new ring or the stop. A stop comes
                // after every ring made before it (one channel, in order).
                match inbox.recv_timeout(DRAIN_PERIOD) {
                    Ok(Control::Source(s)) => sources.push(s),
                    Ok(Control::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                    Err(RecvTimeoutError::Timeout) => {}
                }
            }
            drain(&logger, &mut sources, &mut co, monotonic_ns());
            co.flush_all(monotonic_ns(), |r| {
                write(&logger, name(&sources, r.source), &r)
            });
        })?;
        Ok(LogActor {
            control: self.control.clone(),
            actor: Some(actor),
        })
    }
}

/// The name of ring `i`.
fn name(sources: &[Source], i: usize) -> &str {
    sources.get(i).map_or("?", |s| s.name.as_str())
}

/// Drains every ring once through `coalescer`, writing what it says.
fn drain(logger: &Logger, sources: &mut [Source], coalescer: &mut Coalescer, now_ns: u64) {
    for (i, src) in sources.iter_mut().enumerate() {
        while let Ok(e) = src.consumer.pop() {
            if let Some(r) = coalescer.on_event(i, &e) {
                write(logger, &src.name, &r);
            }
        }
        // Relaxed: a statistic.
        let dropped = src.dropped.load(Ordering::Relaxed);
        if dropped > src.dropped_reported {
            warn!(logger, "log ring full: events dropped";
                  "actor" => &src.name, "dropped" => dropped - src.dropped_reported);
            src.dropped_reported = dropped;
        }
    }
    coalescer.flush(now_ns, |r| write(logger, name(sources, r.source), &r));
}

fn write(logger: &Logger, source: &str, r: &Report) {
    if r.repeats == 0 {
        match r.level {
            Level::Info => info!(logger, "{}", r.what; "actor" => source, "value" => r.value),
            Level::Warning => warn!(logger, "{}", r.what; "actor" => source, "value" => r.value),
            Level::Error => error!(logger, "{}", r.what; "actor" => source, "value" => r.value),
        }
    } else {
        let ms = r.window_ns / 1_000_000;
        match r.level {
            Level::Info => info!(logger, "{} (repeated)", r.what;
                "actor" => source, "repeats" => r.repeats, "in_ms" => ms, "last_value" => r.value),
            Level::Warning => warn!(logger, "{} (repeated)", r.what;
                "actor" => source, "repeats" => r.repeats, "in_ms" => ms, "last_value" => r.value),
            Level::Error => error!(logger, "{} (repeated)", r.what;
                "actor" => source, "repeats" => r.repeats, "in_ms" => ms, "last_value" => r.value),
        }
    }
}

/// The running logging actor. Stops (with a last drain) on drop.
pub struct LogActor {
    control: Sender<Control>,
    actor: Option<Actor<()>>,
}

impl LogActor {
    /// Stops the actor after a last drain and waits for it.
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(a) = self.actor.take() {
            let _ = self.control.send(Control::Stop);
            let _ = a.join();
        }
    }
}

impl Drop for LogActor {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// A logger writing plain lines to stderr (for `nao-rs run` and tools).
pub fn stderr_logger() -> Logger {
    use slog::Drain;
    let decorator = slog_term::PlainSyncDecorator::new(std::io::stderr());
    let drain = slog_term::FullFormat::new(decorator).build().fuse();
    Logger::root(drain, slog::o!())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(what: &'static str, value: i64, t_ns: u64) -> Event {
        Event {
            level: Level::Warning,
            what,
            value,
            t_ns,
        }
    }

    #[test]
    fn repeated_events_are_counted_not_repeated() {
        let mut c = Coalescer::new();
        assert!(c.on_event(0, &ev("invalid answer", 1, 0)).is_some());
        for i in 0..99 {
            assert!(c
                .on_event(0, &ev("invalid answer", 2 + i, 1_000 + i as u64))
                .is_none());
        }
        let mut out = Vec::new();
        c.flush(500_000_000, |r| out.push(r));
        assert!(out.is_empty(), "window still open");
        c.flush(1_000_000_000, |r| out.push(r));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].repeats, 99);
        assert_eq!(out[0].value, 100);
    }

    #[test]
    fn repeat_window_doubles_while_repeats_go_on() {
        let mut c = Coalescer::new();
        c.on_event(0, &ev("x", 0, 0));
        c.on_event(0, &ev("x", 0, 1));
        let mut out = Vec::new();
        c.flush(1_000_000_000, |r| out.push(r));
        assert_eq!(out.len(), 1);
        c.on_event(0, &ev("x", 0, 1_500_000_000));
        c.flush(2_500_000_000, |r| out.push(r));
        assert_eq!(out.len(), 1, "second window is 2 s");
        c.flush(3_000_000_000, |r| out.push(r));
        assert_eq!(out.len(), 2);
        // A window without repeats frees the slot: the next one logs at once.
        c.flush(10_000_000_000, |r| out.push(r));
        assert!(c.on_event(0, &ev("x", 0, 10_000_000_001)).is_some());
    }

    #[test]
    fn different_events_are_each_logged() {
        let mut c = Coalescer::new();
        assert!(c.on_event(0, &ev("a", 0, 0)).is_some());
        assert!(c.on_event(0, &ev("b", 0, 0)).is_some());
        assert!(c.on_event(1, &ev("a", 0, 0)).is_some());
    }

    #[test]
    fn full_event_ring_drops_and_counts() {
        let book = Logbook::new(Logger::root(slog::Discard, slog::o!()));
        let mut sink = book.sink("rt", 2);
        for i in 0..5 {
            sink.emit(Level::Info, "e", i);
        }
        assert_eq!(sink.dropped.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn log_actor_drains_events_into_slog() {
        use std::io::Write;
        use std::sync::Mutex;
        #[derive(Clone)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        use slog::Drain;
        let buf = Buf(Arc::new(Mutex::new(Vec::new())));
        let decorator = slog_term::PlainSyncDecorator::new(buf.clone());
        let drain = slog_term::FullFormat::new(decorator).build().fuse();
        let book = Logbook::new(Logger::root(drain, slog::o!()));
        let mut sink = book.sink("cycle", 16);
        let actor = book.spawn().unwrap();
        for _ in 0..10 {
            sink.emit(Level::Warning, "stall", 7);
        }
        actor.stop();
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.matches("stall").count(), 2, "{text}");
        assert!(text.contains("repeats: 9"), "{text}");
    }
}
