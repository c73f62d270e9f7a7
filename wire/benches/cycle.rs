//! The cost of one cycle (safety step, joint values, building the frame,
//! validating and handing over an answer) and the replay speed.
//!
//! `cargo bench -p nao-wire --bench cycle` prints a table. Goals: under 20 us
//! a cycle, over 50,000 replayed cycles a second.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nao_wire::protocol::cycle::{Cycle, CycleInput, ReadResult};
use nao_wire::protocol::frame::{Frame, FrameWriter, SYNC_FRAME};
use nao_wire::protocol::gate::Verdict;
use nao_wire::protocol::tables::*;
use nao_wire::recording;
use nao_wire::replay::replay_lines;
use nao_wire::{Command, JOINTS};

/// A full answer to `frame` (every device, configuration version 10).
fn answer_to(frame: &[u8], out: &mut [u8; 512]) -> usize {
    let f = Frame::parse(frame, SYNC_FRAME).expect("valid frame");
    let mut w = FrameWriter::answer(out, f.seq).expect("buffer");
    for m in f.messages() {
        match BoardCommand::try_from(m.command) {
            Ok(BoardCommand::Read) => {
                let len = read_answer_len(m.address).expect("device");
                let p = w
                    .reserve(m.address, u8::from(AnswerKind::Read), len)
                    .expect("fits");
                if let Some(DeviceKind::JointBoard(b)) = device_kind(m.address) {
                    for i in 0..JOINT_BOARDS[b].joints.len() {
                        p[6 * i..6 * i + 2].copy_from_slice(&2100u16.to_le_bytes());
                        p[6 * i + 4] = 35;
                    }
                }
                if device_kind(m.address) == Some(DeviceKind::Chest) {
                    p[1] = CLIENT_CONNECTED;
                }
            }
            Ok(BoardCommand::ConfigRequest) => {
                let p = w
                    .reserve(m.address, u8::from(AnswerKind::Config), CONFIG_LEN)
                    .expect("fits");
                p[0] = 10;
            }
            _ => {}
        }
    }
    w.finish()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    // ---- one cycle
    const CYCLES: u64 = 20_000;
    let mut cycle = Cycle::new([2048; JOINTS], &[10]);
    let cmd = Command {
        stiffness: [0.8; JOINTS],
        position: [0.3; JOINTS],
        ..Command::default()
    };
    let mut answer = [0u8; 512];
    let mut answer_len = 0usize;
    let mut times = Vec::with_capacity(CYCLES as usize);
    for k in 0..CYCLES {
        let input = CycleInput {
            command: Some(&cmd),
            verdict: &Verdict::AWAKE,
        };
        let t0 = Instant::now();
        let frame_len = cycle.build(&input, k * 12_000_000).len();
        if cycle.client_state_request().is_some() {
            cycle.client_state_result(true);
        }
        let read = if cycle.reads_previous() {
            ReadResult::Answer(&answer[..answer_len])
        } else {
            ReadResult::Skipped
        };
        let out = cycle.complete(read, Ok(()));
        let dt = t0.elapsed();
        assert!(out.failure.is_none(), "cycle {k}: {:?}", out.failure);
        times.push(dt);
        // The board's answer to this frame, outside the measurement.
        let frame = cycle.frame();
        assert_eq!(frame.len(), frame_len);
        answer_len = answer_to(frame, &mut answer);
    }
    times.sort();
    let median = percentile(&times, 0.5);
    let p99 = percentile(&times, 0.99);
    let max = *times.last().expect("samples");

    // ---- replay
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../recordings");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("recordings/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rec"))
        .collect();
    files.sort();
    let parsed: Vec<_> = files
        .iter()
        .map(|p| recording::read_file(p).expect("recording parses"))
        .collect();
    const ROUNDS: usize = 30;
    // Rates per round (cycles/s): the median and the best round, since the
    // 2 cores are shared with other work.
    let mut replay_rates = Vec::with_capacity(ROUNDS);
    let mut file_rates = Vec::with_capacity(ROUNDS);
    let mut parse_rates = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let copies: Vec<_> = parsed.clone();
        let t0 = Instant::now();
        let mut cycles = 0u64;
        for (p, lines) in files.iter().zip(copies) {
            cycles += replay_lines(lines, p).expect("replay passes").cycles;
        }
        replay_rates.push(cycles as f64 / t0.elapsed().as_secs_f64());

        let t0 = Instant::now();
        for p in &files {
            let _ = nao_wire::replay::replay_file(p).expect("replay passes");
        }
        file_rates.push(cycles as f64 / t0.elapsed().as_secs_f64());

        let t0 = Instant::now();
        let mut n = 0usize;
        for p in &files {
            n += recording::read_file(p).expect("recording parses").len();
        }
        assert!(n > 0);
        parse_rates.push(cycles as f64 / t0.elapsed().as_secs_f64());
    }

    println!(
        "nao-wire cycle bench ({CYCLES} cycles; replay of {} files, {ROUNDS} rounds)",
        files.len()
    );
    println!("| measure                                    | value        | goal      |");
    println!("|--------------------------------------------|--------------|-----------|");
    let row = |name: &str, value: String, goal: &str| {
        println!("| {name:<42} | {value:>12} | {goal:<9} |")
    };
    row(
        "one cycle, median (build, answer, safety)",
        format!("{:.2} us", us(median)),
        "< 20 us",
    );
    row(
        "one cycle, 99th percentile",
        format!("{:.2} us", us(p99)),
        "",
    );
    row("one cycle, max", format!("{:.2} us", us(max)), "");
    let (m, b) = median_best(&mut replay_rates);
    row(
        "replay of parsed lines, median round",
        format!("{m:.0} /s"),
        "> 50000/s",
    );
    row(
        "replay of parsed lines, best round",
        format!("{b:.0} /s"),
        "",
    );
    let (m, b) = median_best(&mut file_rates);
    row(
        "replay_file (read, parse, replay), median",
        format!("{m:.0} /s"),
        "",
    );
    row("replay_file, best round", format!("{b:.0} /s"), "");
    let (m, b) = median_best(&mut parse_rates);
    row(
        "reading and parsing alone, median",
        format!("{m:.0} /s"),
        "",
    );
    row(
        "reading and parsing alone, best round",
        format!("{b:.0} /s"),
        "",
    );
}

fn median_best(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[v.len() - 1])
}
