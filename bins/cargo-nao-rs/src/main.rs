//! `cargo nao-rs stop ADDRESS`: the UDP stop from a developer's computer.
//!
//! Sends the stop datagram (`NAO-RS STOP`, `docs/page.md`) ten times,
//! 5 ms apart, to ADDRESS on port 7701 (`--port`). One arriving is enough.
//! `--broadcast` sends to the broadcast address given, or without one to
//! the subnet broadcast address of every IPv4 interface that is up (never
//! 255.255.255.255, which leaves only through the default route),
//! stopping every robot on those subnets at once; it works on a machine
//! without a default route.
//!
//! `cargo nao-rs deploy ROBOT...` installs nao-rs on robots over ssh and
//! `--uninstall` undoes it (module `deploy`, docs/deploy.md).
//!
//! Run as `cargo nao-rs stop ...`, cargo passes `nao-rs` as the first
//! argument; run directly as `cargo-nao-rs stop ...` it is absent. Both work.

use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod deploy;
use deathswitch::stop::PORT as DEFAULT_PORT;

/// nao-rs tools for a developer's computer.
#[derive(Parser, Debug)]
#[command(name = "cargo nao-rs", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Trip the death switch of the robot at ADDRESS over UDP.
    Stop(StopArgs),
    /// Install nao-rs on robots over ssh (and --uninstall it): docs/deploy.md.
    Deploy(deploy::DeployArgs),
}

#[derive(clap::Args, Debug)]
struct StopArgs {
    /// The robot's address (IP or host name); with --broadcast, a broadcast
    /// address (default: every interface's subnet broadcast address).
    address: Option<String>,
    /// The UDP stop port.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Send to a broadcast address: every robot on the subnet stops.
    #[arg(long)]
    broadcast: bool,
    /// How many datagrams to send.
    #[arg(long, default_value_t = 10)]
    count: u32,
    /// Milliseconds between two datagrams.
    #[arg(long, default_value_t = 5)]
    interval_ms: u64,
}

/// The arguments without the `nao-rs` that cargo inserts as the first one.
fn strip_cargo_arg(mut args: Vec<String>) -> Vec<String> {
    if args.get(1).map(String::as_str) == Some("nao-rs") {
        args.remove(1);
    }
    args
}

/// Where the stop goes: the address given, or with `--broadcast` and no
/// address every interface's subnet broadcast.
fn targets(a: &StopArgs) -> Result<Vec<SocketAddr>, String> {
    if a.address.is_none() && a.broadcast {
        let all = nao_rs_beacon::broadcast_addresses()?;
        if all.is_empty() {
            return Err(
                "no network interface that is up can broadcast (only loopback, \
                 or every interface down): connect to the robots' network, or name a \
                 robot's address"
                    .into(),
            );
        }
        return Ok(all
            .into_iter()
            .map(|b| SocketAddr::from((b, a.port)))
            .collect());
    }
    resolve(a).map(|t| vec![t])
}

fn resolve(a: &StopArgs) -> Result<SocketAddr, String> {
    let host = match &a.address {
        Some(h) => h.clone(),
        None => {
            return Err(
                "no ADDRESS given: name the robot (`cargo nao-rs stop 10.0.24.22`) \
                        or use --broadcast"
                    .into(),
            )
        }
    };
    let mut addrs = (host.as_str(), a.port).to_socket_addrs().map_err(|e| {
        format!("cannot resolve robot address {host:?}: {e}; give an IP address or a host name")
    })?;
    addrs
        .find(|s| s.is_ipv4())
        .or_else(|| {
            (host.as_str(), a.port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut i| i.next())
        })
        .ok_or_else(|| format!("robot address {host:?} resolves to no address"))
}

/// Sends the stop `count` times to every target
/// (`nao_rs_beacon::send_stop`, as the app's STOP does); returns how many
/// datagrams the kernel took.
fn stop(a: StopArgs) -> Result<u32, String> {
    let all = targets(&a)?;
    let local = if all[0].is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let sock = UdpSocket::bind(local).map_err(|e| format!("cannot open a UDP socket: {e}"))?;
    if a.broadcast {
        sock.set_broadcast(true)
            .map_err(|e| format!("cannot enable broadcast on the UDP socket: {e}"))?;
    }
    let r = nao_rs_beacon::send_stop(&sock, &all, a.count, Duration::from_millis(a.interval_ms));
    if let Some((t, e)) = &r.last_error {
        eprintln!("cargo nao-rs stop: sending to {t} failed: {e}");
    }
    if r.sent == 0 {
        let e = r.last_error.map(|(_, e)| e).unwrap_or_default();
        let hint = if a.broadcast {
            ""
        } else {
            " (for a broadcast address add --broadcast)"
        };
        return Err(format!("sending the stop to {} failed: {e}{hint}", all[0]));
    }
    Ok(r.sent)
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(strip_cargo_arg(std::env::args().collect()));
    match cli.command {
        Cmd::Deploy(a) => {
            if deploy::run(&a) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Cmd::Stop(a) => {
            let count = a.count;
            let port = a.port;
            let addr = a
                .address
                .clone()
                .unwrap_or_else(|| "every subnet's broadcast address".into());
            match stop(a) {
                Ok(n) => {
                    println!("sent NAO-RS STOP {n} times ({count} rounds) to {addr} port {port}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("cargo nao-rs stop: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn cargo_passes_nao_rs_as_first_argument() {
        assert_eq!(
            strip_cargo_arg(v(&["cargo-nao-rs", "nao-rs", "stop", "x"])),
            v(&["cargo-nao-rs", "stop", "x"])
        );
        assert_eq!(
            strip_cargo_arg(v(&["cargo-nao-rs", "stop", "x"])),
            v(&["cargo-nao-rs", "stop", "x"])
        );
    }

    #[test]
    fn cargo_nao_rs_stop_sends_ten_datagrams() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let port = rx.local_addr().unwrap().port();
        let n = stop(StopArgs {
            address: Some("127.0.0.1".into()),
            port,
            broadcast: false,
            count: 10,
            interval_ms: 5,
        })
        .unwrap();
        assert_eq!(n, 10);
        nao_rs_beacon::testing::expect_stops(&rx, 10);
    }

    #[test]
    fn stop_without_address_names_the_fix() {
        let e = stop(StopArgs {
            address: None,
            port: 1,
            broadcast: false,
            count: 1,
            interval_ms: 0,
        })
        .unwrap_err();
        assert!(e.contains("--broadcast"), "{e}");
    }

    #[test]
    fn unresolvable_address_is_named() {
        let e = stop(StopArgs {
            address: Some("no such host .invalid".into()),
            port: 1,
            broadcast: false,
            count: 1,
            interval_ms: 0,
        })
        .unwrap_err();
        assert!(e.contains("no such host .invalid"), "{e}");
    }
}
