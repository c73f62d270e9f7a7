//! `nao-rs-app`: the operator's app (`docs/app.md`). Listens for the
//! robots' beacons and serves the page: every robot's switch at a glance,
//! STOP one or all (space), WAKE after a person's re-arm.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use nao_rs_app::AppOptions;

/// The operator's app: every robot's death switch at a glance, STOP one or
/// all, WAKE after a person's re-arm. Open the page it prints.
#[derive(Parser, Debug)]
#[command(name = "nao-rs-app", version, about)]
struct Cli {
    /// The page's address; keep it on loopback (anyone who reaches the page
    /// can stop and wake robots).
    #[arg(long, default_value = "127.0.0.1:8077")]
    listen: SocketAddr,
    /// The UDP port beacons arrive on.
    #[arg(long, default_value_t = nao_rs_beacon::format::PORT)]
    beacon_port: u16,
    /// The address beacons are received on (an interface's address to
    /// hear only that network).
    #[arg(long, default_value = "0.0.0.0")]
    beacon_bind: IpAddr,
    /// The team key file (mode 0600, 32..=1024 bytes), the same file as
    /// /etc/nao-rs/team.key on the robots. Without it: no network wake.
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// The robots' UDP stop port.
    #[arg(long, default_value_t = nao_rs_beacon::STOP_PORT)]
    stop_port: u16,
    /// The robots' network wake port.
    #[arg(long, default_value_t = nao_rs_beacon::auth::PORT)]
    wake_port: u16,
    /// Another address STOP ALL sends to (ADDRESS or ADDRESS:PORT; the
    /// stop port by default), e.g. a robot whose beacon is off. Repeat it.
    #[arg(long, value_name = "ADDRESS")]
    target: Vec<String>,
    /// STOP ALL sends to the robots heard and --target only, not to the
    /// subnet broadcast of every interface.
    #[arg(long)]
    no_broadcast: bool,
    /// Send stops and wakes to loopback addresses only (tests).
    #[arg(long, hide = true)]
    loopback_only: bool,
}

fn target(s: &str, port: u16) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (s, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.find(SocketAddr::is_ipv4))
        .ok_or_else(|| {
            format!("--target {s:?} is not an address: give an IP address, IP:PORT or a host name")
        })
}

fn config(c: Cli) -> Result<AppOptions, String> {
    let targets = c
        .target
        .iter()
        .map(|t| target(t, c.stop_port))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(AppOptions {
        listen: c.listen,
        beacon: SocketAddr::new(c.beacon_bind, c.beacon_port),
        key: c.key,
        stop_port: c.stop_port,
        wake_port: c.wake_port,
        targets,
        broadcast: !c.no_broadcast,
        loopback_only: c.loopback_only,
    })
}

fn main() -> ExitCode {
    let r = config(Cli::parse()).and_then(nao_rs_app::server::run);
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            nao_rs_app::server::say(true, format_args!("{e}"));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_take_an_address_with_or_without_port() {
        assert_eq!(
            target("10.0.0.5", 7701).unwrap(),
            "10.0.0.5:7701".parse().unwrap()
        );
        assert_eq!(
            target("10.0.0.5:9", 7701).unwrap(),
            "10.0.0.5:9".parse().unwrap()
        );
        let e = target("no such host .invalid", 7701).unwrap_err();
        assert!(e.contains("no such host .invalid"), "{e}");
    }

    #[test]
    fn defaults_are_loopback_page_and_the_three_ports() {
        let c = config(Cli::parse_from(["nao-rs-app"])).unwrap();
        assert_eq!(c.listen, "127.0.0.1:8077".parse().unwrap());
        assert_eq!(c.beacon.port(), 7702);
        assert_eq!((c.stop_port, c.wake_port), (7701, 7703));
        assert!(c.broadcast && !c.loopback_only && c.key.is_none());
        let c = config(Cli::parse_from([
            "nao-rs-app",
            "--no-broadcast",
            "--target",
            "127.0.0.2",
        ]))
        .unwrap();
        assert!(!c.broadcast);
        assert_eq!(c.targets, ["127.0.0.2:7701".parse().unwrap()]);
    }
}
