//! No trip goes unseen: whether a frame counts as tripped.
//!
//! A frame counts as tripped when the switch is tripped or the page lost as
//! the frame is built, and also when a trip happened since the last frame
//! was built, even if a re-arm came before this frame:
//!
//! - the switch's trip count (armed -> tripped transitions) differs from the
//!   count read for the last frame built (a trip and a re-arm between two
//!   frames);
//! - or a trip was raised by an answer handed over since the last frame was
//!   built (before the runtime has tripped the page, or with a re-arm after).
//!
//! What a latch holds is cleared by a frame having been built, never by a
//! later look at the switch: [`TripLatch::frame`] decides the frame and
//! records it in one step.

/// The trip state between two frames. Pure; no time, no I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TripLatch {
    /// The switch's trip count read for the last frame built (`None`: no
    /// frame built and no count given yet; the first frame then sets it).
    seen_count: Option<u64>,
    /// An answer raised a trip since the last frame was built.
    answer_trip: bool,
}

/// What the switch says as a frame is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SwitchView {
    /// The switch is tripped.
    pub tripped: bool,
    /// The page is lost.
    pub page_lost: bool,
    /// The switch's trip count (armed -> tripped transitions so far).
    pub trip_count: u64,
}

impl TripLatch {
    /// No frame built yet; the first frame's count is the baseline (a trip
    /// before it is seen through `tripped`).
    pub const fn new() -> Self {
        TripLatch {
            seen_count: None,
            answer_trip: false,
        }
    }

    /// No frame built yet, the switch's count `count` as the cycle starts: a
    /// trip (and re-arm) before the first frame makes it tripped.
    pub const fn with_count(count: u64) -> Self {
        TripLatch {
            seen_count: Some(count),
            answer_trip: false,
        }
    }

    /// An answer handed over raised a trip: the next frame is tripped.
    pub fn answer_tripped(&mut self) {
        self.answer_trip = true;
    }

    /// Whether the frame built now counts as tripped, without recording it.
    pub fn would_trip(&self, switch: SwitchView) -> bool {
        switch.tripped
            || switch.page_lost
            || self.answer_trip
            || self.seen_count.is_some_and(|c| c != switch.trip_count)
    }

    /// A frame is built with the switch as `switch`: returns whether it
    /// counts as tripped, and clears what was latched (the frame carries it).
    pub fn frame(&mut self, switch: SwitchView) -> bool {
        let tripped = self.would_trip(switch);
        self.seen_count = Some(switch.trip_count);
        self.answer_trip = false;
        tripped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sw(tripped: bool, page_lost: bool, trip_count: u64) -> SwitchView {
        SwitchView {
            tripped,
            page_lost,
            trip_count,
        }
    }

    #[test]
    fn trip_latch_table() {
        // (seen count, answer trip, switch, frame tripped)
        let rows: &[(Option<u64>, bool, SwitchView, bool)] = &[
            (Some(1), false, sw(false, false, 1), false),
            (Some(1), false, sw(true, false, 1), true),
            (Some(1), false, sw(false, true, 1), true),
            // a trip and a re-arm between two frames
            (Some(1), false, sw(false, false, 2), true),
            (Some(1), false, sw(false, false, 7), true),
            // an answer trip, re-armed before the next frame
            (Some(1), true, sw(false, false, 1), true),
            (Some(1), true, sw(false, false, 2), true),
            (Some(1), true, sw(true, false, 2), true),
            // no frame yet: the first frame sets the baseline
            (None, false, sw(false, false, 5), false),
            (None, false, sw(true, false, 5), true),
            (None, true, sw(false, false, 5), true),
        ];
        for &(seen, answer, s, want) in rows {
            let mut l = TripLatch {
                seen_count: seen,
                answer_trip: answer,
            };
            assert_eq!(l.would_trip(s), want, "{seen:?} {answer} {s:?}");
            assert_eq!(l.frame(s), want, "{seen:?} {answer} {s:?}");
            // The frame carried it: the next frame follows the switch.
            assert!(
                !l.frame(sw(false, false, s.trip_count)),
                "after {seen:?} {answer} {s:?}"
            );
        }
    }

    #[test]
    fn latch_is_cleared_by_a_frame_not_by_a_look_at_the_switch() {
        let mut l = TripLatch::with_count(1);
        l.answer_tripped();
        // Looking does not clear it, whatever the switch says.
        assert!(l.would_trip(sw(true, false, 2)));
        assert!(l.would_trip(sw(false, false, 2)));
        assert!(l.would_trip(sw(false, false, 2)));
        // The runtime tripped the page and a person re-armed it before the
        // frame: the frame is tripped, the one after is not.
        assert!(l.frame(sw(false, false, 2)));
        assert!(!l.frame(sw(false, false, 2)));
    }

    #[test]
    fn with_count_sees_a_trip_and_rearm_before_the_first_frame() {
        assert!(TripLatch::with_count(0).frame(sw(false, false, 1)));
        assert!(!TripLatch::with_count(0).frame(sw(false, false, 0)));
        assert!(!TripLatch::new().frame(sw(false, false, 1)));
    }
}
