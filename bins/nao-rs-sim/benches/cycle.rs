//! The cost of one cycle as the runtime runs it ([`Step::run`]: the switch's
//! read, the gate, safety, joint values, building the frame, validating
//! and handing over the answer, the heartbeat) and the replay speed
//! ([`replay_file`], what `nao-rs replay` runs).
//!
//! The board is the virtual robot (`nao-rs-sim`'s device) in this process:
//! during the measured step the link only copies bytes (the frame is kept,
//! the answer was made before); the virtual robot answers each frame
//! between two steps, outside the measurement.
//!
//! It lives with the virtual robot, above wire (wire depends on nothing of
//! the programs). `cargo bench -p nao-rs-sim --bench cycle` prints a table. Goals: under 20 us
//! a cycle, over 50,000 replayed cycles a second.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use deathswitch::{MemorySwitch, Switch as _};
use nao_rs_sim::device::{Device, InProcessLink};
use nao_rs_sim::settings::BoardSettings;
use nao_wire::link::{Call, Link, LinkError};
use nao_wire::protocol::gate::WakeLatch;
use nao_wire::protocol::startup::Startup;
use nao_wire::recording;
use nao_wire::replay::replay_file;
use nao_wire::step::{Step, StepInput};
use nao_wire::{Command, JOINTS};

/// The bulk endpoints and the bulk IN buffer's length (`docs/protocol.md`
/// section 1).
const EP_OUT: u8 = 0x02;
const EP_IN: u8 = 0x81;
const BULK_IN_LEN: usize = 512;

/// The virtual robot in this process. Until [`Board::defer`] every call
/// goes to its device; from then on the step's frame is only kept and its
/// bulk read is handed the answer [`Board::answer`] made before.
struct Board {
    robot: InProcessLink,
    deferred: bool,
    frame: Vec<u8>,
    answer: [u8; BULK_IN_LEN],
    answer_len: usize,
}

impl Board {
    fn new() -> Board {
        let (cfg, prefs, _) = BoardSettings::default().build().expect("default settings");
        Board {
            robot: InProcessLink::new(Device::new(cfg, prefs)),
            deferred: false,
            frame: Vec::with_capacity(BULK_IN_LEN),
            answer: [0; BULK_IN_LEN],
            answer_len: 0,
        }
    }

    fn defer(&mut self) {
        self.deferred = true;
    }

    /// The device's answer to the kept frame at `now_ns`, for the next
    /// step's read (outside the measurement).
    fn answer(&mut self, now_ns: u64) {
        self.robot.now_ns = now_ns;
        let written = self.robot.bulk_out(EP_OUT, &self.frame);
        assert_eq!(written, Ok(self.frame.len()));
        let read = self.robot.bulk_in(EP_IN, &mut self.answer);
        self.answer_len = read.expect("the virtual robot answers every frame");
    }
}

impl Link for Board {
    fn call(&mut self, call: Call<'_>, answer: &mut [u8]) -> Result<usize, LinkError> {
        match call {
            Call::BulkOut { data, .. } if self.deferred => {
                self.frame.clear();
                self.frame.extend_from_slice(data);
                Ok(data.len())
            }
            Call::BulkIn { .. } if self.deferred => {
                let n = self.answer_len.min(answer.len());
                answer[..n].copy_from_slice(&self.answer[..n]);
                Ok(n)
            }
            _ => self.robot.call(call, answer),
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    // ---- one cycle: the runtime's step, woken, with a stiff command
    const CYCLES: u64 = 20_000;
    const PERIOD_NS: u64 = 12_000_000;
    let mut board = Board::new();
    let identity = Startup::run(&mut board).expect("start-up against the virtual robot");
    board.defer();
    let switch = MemorySwitch::armed();
    let mut step = Step::new(&identity, &[10], &switch.read(), WakeLatch::On);
    let cmd = Command {
        stiffness: [0.8; JOINTS],
        position: [0.3; JOINTS],
        ..Command::default()
    };
    let mut times = Vec::with_capacity(CYCLES as usize);
    let mut stiff_frames = 0u64;
    for k in 0..CYCLES {
        let now_ns = k * PERIOD_NS;
        let input = StepInput {
            command: Some(&cmd),
            // A person's wake before the first frame, as on the robot.
            wake: (k == 0).then(|| switch.snapshot().trip_count),
            now_ns,
            ..StepInput::default()
        };
        let t0 = Instant::now();
        let out = step.run(&switch, &mut board, &input, |_, _| {});
        let dt = t0.elapsed();
        assert!(
            out.cycle.failure.is_none(),
            "cycle {k}: {:?}",
            out.cycle.failure
        );
        assert_eq!(out.answer_trip, None, "cycle {k}");
        stiff_frames += u64::from(!out.cycle.all_off);
        times.push(dt);
        // The board's answer to this frame, outside the measurement.
        board.answer(now_ns);
    }
    assert!(
        stiff_frames > CYCLES / 2,
        "the woken step sends the stiff command: {stiff_frames} stiff frames"
    );
    times.sort();
    let median = percentile(&times, 0.5);
    let p99 = percentile(&times, 0.99);
    let max = *times.last().expect("samples");

    // ---- replay
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../recordings");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("recordings/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rec"))
        .collect();
    files.sort();
    const ROUNDS: usize = 30;
    // Rates per round (cycles/s): the median and the best round, since the
    // 2 cores are shared with other work.
    let mut file_rates = Vec::with_capacity(ROUNDS);
    let mut parse_rates = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let t0 = Instant::now();
        let mut cycles = 0u64;
        for p in &files {
            cycles += replay_file(p).expect("replay passes").cycles;
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
        "nao-wire cycle bench ({CYCLES} steps; replay of {} files, {ROUNDS} rounds)",
        files.len()
    );
    println!("| measure                                    | value        | goal      |");
    println!("|--------------------------------------------|--------------|-----------|");
    let row = |name: &str, value: String, goal: &str| {
        println!("| {name:<42} | {value:>12} | {goal:<9} |")
    };
    row(
        "one step (Step::run), median",
        format!("{:.2} us", us(median)),
        "< 20 us",
    );
    row(
        "one step, 99th percentile",
        format!("{:.2} us", us(p99)),
        "",
    );
    row("one step, max", format!("{:.2} us", us(max)), "");
    let (m, b) = median_best(&mut file_rates);
    row(
        "replay_file (read, parse, replay), median",
        format!("{m:.0} /s"),
        "> 50000/s",
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
