//! Test helpers: a beacon with every field used, and the receiving end of
//! a stop.

use std::net::UdpSocket;

use crate::format::{
    Beacon, ChestButtonMode, Guard, Hottest, Motion, PageHealth, SwitchPosition, JOINTS,
};

/// A beacon with every field used, in range: the example of `docs/app.md`
/// "The beacon datagram" (648 bytes encoded).
pub fn sample() -> Beacon {
    Beacon {
        seq: 41,
        name: "nao22".into(),
        body_id: "P0000074A05S94700082".into(),
        switch: SwitchPosition::Armed,
        reason: None,
        since: Some(1_764_750_000),
        trip_count: 3,
        wake_generation: Some(3),
        nonce: 0x1f2e_3d4c_5b6a_7988,
        page: PageHealth::Ok,
        heartbeat_age_ms: Some(4),
        guard: Guard {
            pid: Some(611),
            alive: true,
            holding: false,
        },
        motion: Motion::Awake,
        flags: vec!["controller-lost".into()],
        max_stiffness: Some(0.8),
        lateness_ms: Some(0.12),
        battery: Some(0.87),
        hottest: Some(Hottest {
            joint: "LKneePitch".into(),
            degc: 52,
        }),
        stiffness: Some([0.8; JOINTS]),
        temperature: Some([40; JOINTS]),
        net_wake: true,
        chest_button: Some(ChestButtonMode::Hold { ms: 1000 }),
    }
}

/// Receives `n` datagrams on `rx` (within its read timeout each) and
/// asserts that every one is the stop, `NAO-RS STOP`.
pub fn expect_stops(rx: &UdpSocket, n: usize) {
    let mut buf = [0u8; 64];
    for i in 1..=n {
        let (len, from) = rx
            .recv_from(&mut buf)
            .unwrap_or_else(|e| panic!("stop {i} of {n} never came: {e}"));
        assert_eq!(
            &buf[..len],
            b"NAO-RS STOP",
            "datagram {i} of {n} from {from}"
        );
    }
}
