//! A robot program using the runtime as a library, as hulk does.
//!
//! ```sh
//! nao-rs-sim --socket /tmp/sim.sock --versions 10 &
//! NAO_RS_DEATHSWITCH=/tmp/ds cargo run -p nao-runtime --example robot_program -- sim:/tmp/sim.sock
//! ```
//!
//! It starts the runtime, prints the robot's identity at once, nods the head
//! for 3 s at low stiffness, trips the switch through the API (as a program
//! does on a fall) and stops. Every start is limp until a person's wake: a
//! fresh page starts tripped, so re-arm it with
//! `NAO_RS_DEATHSWITCH=/tmp/ds naoctl rearm`, then wake it with
//! `NAO_RS_DEATHSWITCH=/tmp/ds nao-rs wake` (the program serves the wake
//! socket next to the page) to see the head move.

use std::sync::Arc;

use nao_runtime::{wake, Config, Runtime, Switch};
use nao_wire::link::sim::SimLink;
use nao_wire::{Command, Joint};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sim:/tmp/sim.sock".into());
    let link = SimLink::from_link_arg(&arg).ok_or("give the link as sim:PATH")?;
    let page_path = deathswitch::default_path();
    let page = deathswitch::Page::open(&page_path)?;
    // The wake socket next to the page, bound before the runtime starts.
    let wake_socket = wake::WakeListener::bind(&wake::socket_path(&page_path))?;
    let board: Arc<dyn Switch> = Arc::new(page);
    let config = Config {
        cycle_priority: None,
        udp_port: None,
        ..Config::default()
    };

    // The identity comes back at once; the motor board handshake goes on.
    let (runtime, mut io) = Runtime::start(link, board, config)?;
    println!(
        "robot {} (chest board {:?})",
        runtime.identity().body_id(),
        runtime.identity().chest_version
    );
    let _wake = wake_socket.start(
        runtime.handle().wake_signal().clone(),
        runtime.logger().clone(),
    )?;

    let mut command = Command::default();
    // HeadPitch, the only stiff joint.
    command.stiffness[Joint::HeadPitch] = 0.3;
    while let Some(s) = io.next_sensors(1_000_000_000) {
        // Full-precision time since start, u64 ns.
        let t = s.t_ns as f64 * 1e-9;
        command.position[Joint::HeadPitch] = (0.2 * (t * 3.0).sin()) as f32;
        if io.push_command(command).is_err() {
            // A full ring hands the command back; the next cycle's follows.
        }
        if s.cycle % 50 == 0 {
            println!(
                "cycle {:>4} t {:>6.3} s  head pitch {:+.3} rad  switch {:?}  battery {} per mille",
                s.cycle,
                t,
                s.position[Joint::HeadPitch],
                s.switch,
                s.battery.charge
            );
        }
        if t > 3.0 {
            io.handle().trip(); // reason `api`; nothing re-arms it but a person
            break;
        }
    }
    let (_, summary) = runtime.stop();
    println!(
        "stopped after {} cycles, max lateness {} us",
        summary.cycles,
        summary.max_lateness_ns / 1000
    );
    Ok(())
}
