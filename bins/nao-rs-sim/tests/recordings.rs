//! The simulator answers the worked examples in `recordings/` like the
//! recordings show: the control answers byte for byte, and every frame's
//! answer with the same seq and the same messages (address, command,
//! length; status and configuration payloads byte for byte). Measured
//! values (positions, currents, noise) differ: the body is simulated.

use std::path::PathBuf;

use nao_rs_sim::device::{Conn, Device};
use nao_rs_sim::settings::BoardSettings;
use nao_wire::link::Call;
use nao_wire::protocol::frame::Frame;
use nao_wire::protocol::tables::AnswerKind;
use nao_wire::recording::{self, Item, Recorded};

/// The sync byte of an answer (`docs/protocol.md` section 5).
const SYNC_ANSWER: u8 = 0x5a;

fn recording(name: &str) -> PathBuf {
    testkit::workspace_root().join("recordings").join(name)
}

type Msg = (u8, u8, Vec<u8>);

fn messages(answer: &[u8]) -> (u16, Vec<Msg>) {
    let f = Frame::parse(answer, SYNC_ANSWER).expect("a valid answer");
    (
        f.seq,
        f.messages()
            .map(|m| (m.address, m.command, m.payload.to_vec()))
            .collect(),
    )
}

/// Payloads compared byte for byte; the rest by length only.
fn exact(cmd: u8) -> bool {
    matches!(
        AnswerKind::try_from(cmd),
        Ok(AnswerKind::Status | AnswerKind::Config | AnswerKind::EepromRead)
    )
}

fn check(name: &str, settings: BoardSettings) {
    let lines = recording::read_file(&recording(name)).expect("recording parses");
    let (cfg, prefs, _) = settings.build().unwrap();
    let mut dev = Device::new(cfg, prefs);
    let mut conn = Conn::new(1, 1);
    let mut out = Vec::new();
    let mut now = 0u64;
    let mut frames = 0;
    let mut request = |call: Call<'_>, now: u64, out: &mut Vec<u8>| {
        let (reply, _) = dev.call(&mut conn, &call, now, out);
        reply.map_err(|(e, why)| format!("{e}: {why}"))
    };
    let open = Call::Open {
        vendor: 0xffff,
        product: 0x0006,
    };
    request(open, 0, &mut out).expect("the simulator opens");
    for line in &lines {
        let at = format!("{name} line {}", line.number);
        // The recorded call as the host made it.
        let (call, host) = match &line.item {
            Item::Cycle { t_ms, .. } => {
                now = t_ms * 1_000_000;
                continue;
            }
            Item::Call(c @ Recorded::ControlIn { setup, length, .. }) => (
                c,
                Call::ControlIn {
                    setup: *setup,
                    length: *length,
                },
            ),
            Item::Call(c @ Recorded::ControlOut { setup, data }) => (
                c,
                Call::ControlOut {
                    setup: *setup,
                    data,
                },
            ),
            Item::Call(c @ Recorded::BulkOut { endpoint, data }) => (
                c,
                Call::BulkOut {
                    endpoint: *endpoint,
                    data,
                },
            ),
            Item::Call(
                c @ Recorded::BulkIn {
                    endpoint,
                    length,
                    answer: Ok(_),
                },
            ) => (
                c,
                Call::BulkIn {
                    endpoint: *endpoint,
                    length: *length,
                },
            ),
            _ => continue,
        };
        let reply = request(host, now, &mut out);
        assert!(reply.is_ok(), "{at}: the simulator answers: {reply:?}");
        match call {
            Recorded::ControlIn { answer, .. } => {
                assert_eq!(&out[..], &answer[..], "{at}: control_in answer");
            }
            Recorded::BulkOut { .. } => frames += 1,
            Recorded::BulkIn {
                answer: Ok(recorded),
                ..
            } => {
                let (seq, ours) = messages(&out);
                let (rseq, theirs) = messages(recorded);
                assert_eq!(seq, rseq, "{at}: seq");
                let shape = |m: &[Msg]| -> Vec<(u8, u8, usize)> {
                    m.iter().map(|(a, c, p)| (*a, *c, p.len())).collect()
                };
                assert_eq!(shape(&ours), shape(&theirs), "{at}: the answer's messages");
                for (o, t) in ours.iter().zip(&theirs) {
                    if exact(o.1) {
                        assert_eq!(o, t, "{at}: payload of {:#04x} {:#04x}", o.0, o.1);
                    }
                }
            }
            _ => {}
        }
    }
    assert!(frames > 100, "{name}: {frames} frames checked");
}

#[test]
fn simulator_answers_startup_v10_like_the_recording() {
    check("startup-v10.rec", BoardSettings::default());
}

#[test]
fn simulator_answers_startup_v11_like_the_recording() {
    check(
        "startup-v11.rec",
        BoardSettings {
            versions: Some("11".into()),
            late: vec!["0x13=2".into(), "0x1e=2".into()],
            ..BoardSettings::default()
        },
    );
}
