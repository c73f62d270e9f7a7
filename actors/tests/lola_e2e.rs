//! End to end: a LoLA client drives the virtual robot (a real `nao-rs-sim`
//! process) through the runtime and the LoLA socket, then the switch trips,
//! is re-armed (the robot stays limp), the robot is woken, and the client
//! goes silent (the controller-lost ramp lowers the stiffness).

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{config, decode, quiet, start, Answer, Frame, Rig, FRAME_LEN, SENSOR_KEYS};
use deathswitch::MemorySwitch;
use nao_runtime::lola::{serve_runtime, LolaConfig};
use nao_runtime::{NoHook, Reason, Switch};
use nao_wire::JOINTS;

fn connect(path: &Path) -> UnixStream {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match UnixStream::connect(path) {
            Ok(s) => {
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                return s;
            }
            Err(e) if Instant::now() < until => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("LoLA socket {} never came up: {e}", path.display()),
        }
    }
}

fn read_frame(s: &mut UnixStream) -> Frame {
    let mut buf = [0u8; FRAME_LEN];
    s.read_exact(&mut buf).expect("a frame within 2 s");
    let f = decode(&buf);
    assert_eq!(f.keys, SENSOR_KEYS);
    f
}

/// Reads frames and answers each, until `done` holds; panics after `max`.
fn drive(
    s: &mut UnixStream,
    max: usize,
    answer: &dyn Fn(&Frame) -> Option<Answer>,
    done: &dyn Fn(&Frame) -> bool,
) -> Frame {
    for _ in 0..max {
        let f = read_frame(s);
        if done(&f) {
            return f;
        }
        if let Some(a) = answer(&f) {
            s.write_all(&a.encode()).unwrap();
        }
    }
    panic!("condition not met in {max} frames");
}

const HEAD_YAW: f32 = 0.3;

fn head_yaw_stiff(f: &Frame) -> Option<Answer> {
    let mut position: [f32; JOINTS] = std::array::from_fn(|j| f.position[j]);
    position[0] = HEAD_YAW;
    Some(Answer::new(position, [0.5; JOINTS]))
}

#[test]
fn lola_client_drives_the_virtual_robot_and_rearm_without_wake_stays_limp() {
    let rig = Rig::start();
    let board = Arc::new(MemorySwitch::armed());
    let (rt, io) = start(&rig, &board, config(), NoHook);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("robocup");
    let mut lola = LolaConfig::from_identity(rt.identity(), Some("P0000073A07S8AF00019"), quiet());
    lola.socket = path.clone();
    let handle = rt.handle();
    // Every start is limp: the test is the person who wakes it.
    handle.wake().unwrap();
    let server = std::thread::spawn(move || serve_runtime(io, lola));
    let mut s = connect(&path);

    // Drive HeadYaw to 0.3 rad at stiffness 0.5.
    drive(&mut s, 2000, &head_yaw_stiff, &|f| {
        (f.position[0] - HEAD_YAW).abs() < 0.02 && f.stiffness[0] == 0.5
    });

    // Trip: the frames go all-off whatever the client sends.
    board.trip(Reason::Udp);
    drive(&mut s, 100, &head_yaw_stiff, &|f| {
        f.stiffness.iter().all(|&x| x == 0.0)
    });

    // Re-arm without wake: limp for as long as we look.
    board.rearm();
    for _ in 0..100 {
        let f = drive(&mut s, 1, &|_| None, &|_| true);
        assert!(
            f.stiffness.iter().all(|&x| x == 0.0),
            "re-armed, not woken: {:?}",
            f.stiffness
        );
        s.write_all(&head_yaw_stiff(&f).unwrap().encode()).unwrap();
    }

    // Wake: the client's stiffness comes back.
    handle.wake().unwrap();
    drive(&mut s, 100, &head_yaw_stiff, &|f| f.stiffness[0] == 0.5);

    // Silence: after 25 cycles the controller-lost ramp lowers it.
    drive(&mut s, 200, &|_| None, &|f| {
        f.stiffness[0] > 0.0 && f.stiffness[0] < 0.45
    });

    let (_, summary) = rt.stop();
    assert!(!summary.panicked);
    server.join().unwrap().unwrap();
    assert!(
        !path.exists(),
        "the socket file is removed when the runtime stops"
    );
}
