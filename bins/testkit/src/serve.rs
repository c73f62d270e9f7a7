//! [`UnixServer`]: a Unix socket listener answering every connection on a
//! thread of its own until dropped (a squatter, a bogus peer).

use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Accepts on a listener every 2 ms and calls its `answer` with each
/// connection, until dropped (then its thread is joined).
pub struct UnixServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl UnixServer {
    /// Serves `listener` (made non-blocking here) with `answer`.
    pub fn start(
        listener: UnixListener,
        mut answer: impl FnMut(&UnixStream) + Send + 'static,
    ) -> UnixServer {
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            // SeqCst: a flag read once per round; no data rides on it.
            while !s.load(Ordering::SeqCst) {
                if let Ok((c, _)) = listener.accept() {
                    answer(&c);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        UnixServer {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for UnixServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
