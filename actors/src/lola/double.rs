//! A test double of [`Body`]: sensors are queued by the test, pushed
//! commands are recorded.

use std::collections::VecDeque;
use std::time::Duration;

use nao_wire::Command;

use super::Body;
use crate::SensorFrame;

/// A [`Body`] driven by hand.
#[derive(Debug, Clone, Default)]
pub(crate) struct FakeBody {
    /// Sensors still to hand out, one per [`Body::next_sensors`] call.
    pub(crate) queue: VecDeque<SensorFrame>,
    /// Every command pushed, in order.
    pub(crate) pushed: Vec<Command>,
    /// When set, [`Body::push`] hands every command back (a full ring).
    pub(crate) ring_full: bool,
}

impl FakeBody {
    /// A body with no sensors queued.
    pub(crate) fn new() -> Self {
        FakeBody::default()
    }

    /// Queues one cycle's sensors.
    pub(crate) fn queue(&mut self, s: SensorFrame) {
        self.queue.push_back(s);
    }
}

impl Body for FakeBody {
    /// Hands out the next queued sensors, or waits `timeout` and returns
    /// `None` when the queue is empty.
    fn next_sensors(&mut self, timeout: Duration) -> Option<SensorFrame> {
        let s = self.queue.pop_front();
        if s.is_none() {
            std::thread::sleep(timeout);
        }
        s
    }

    fn push(&mut self, cmd: Command) -> Result<(), Command> {
        if self.ring_full {
            return Err(cmd);
        }
        self.pushed.push(cmd);
        Ok(())
    }
}
