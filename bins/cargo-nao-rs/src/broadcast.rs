//! Where `--broadcast` sends the stop: the subnet broadcast address of every
//! IPv4 interface that is up and not loopback. Never `255.255.255.255`: the
//! limited broadcast leaves only through the default route (with none,
//! sending fails with ENETUNREACH, and with one it may leave through the
//! wrong interface), while a subnet broadcast goes out of its own
//! interface, wifi and wired alike.

use std::net::Ipv4Addr;

/// One IPv4 address of an interface, as `getifaddrs` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iface {
    /// The interface is up.
    pub up: bool,
    /// A loopback interface.
    pub loopback: bool,
    /// The interface can broadcast.
    pub broadcast: bool,
    /// Its address.
    pub addr: Ipv4Addr,
    /// Its netmask.
    pub netmask: Ipv4Addr,
    /// The broadcast address the kernel reports, if any.
    pub broadcast_addr: Option<Ipv4Addr>,
}

/// The subnet broadcast addresses to send to, each once, in the order
/// given. Pure: the interfaces are passed in. A /31 or /32 has no
/// broadcast address (RFC 3021) and is skipped.
pub fn subnet_broadcasts(ifaces: &[Iface]) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    for i in ifaces {
        if !i.up || i.loopback || !i.broadcast {
            continue;
        }
        let mask = u32::from(i.netmask);
        if mask.leading_ones() >= 31 {
            continue;
        }
        let b = i
            .broadcast_addr
            .filter(|b| !b.is_unspecified() && !b.is_broadcast())
            .unwrap_or_else(|| Ipv4Addr::from(u32::from(i.addr) | !mask));
        if !b.is_broadcast() && !out.contains(&b) {
            out.push(b);
        }
    }
    out
}

/// This machine's IPv4 interfaces (`getifaddrs`).
pub fn interfaces() -> Result<Vec<Iface>, String> {
    use nix::net::if_::InterfaceFlags as F;
    let all = nix::ifaddrs::getifaddrs()
        .map_err(|e| format!("cannot list the network interfaces (getifaddrs): {e}"))?;
    let v4 = |a: Option<nix::sys::socket::SockaddrStorage>| {
        a.and_then(|s| s.as_sockaddr_in().map(|s| s.ip()))
    };
    Ok(all
        .filter_map(|i| {
            Some(Iface {
                up: i.flags.contains(F::IFF_UP),
                loopback: i.flags.contains(F::IFF_LOOPBACK),
                broadcast: i.flags.contains(F::IFF_BROADCAST),
                addr: v4(i.address)?,
                netmask: v4(i.netmask)?,
                broadcast_addr: v4(i.broadcast),
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(addr: [u8; 4], prefix: u32) -> Iface {
        Iface {
            up: true,
            loopback: false,
            broadcast: true,
            addr: addr.into(),
            netmask: Ipv4Addr::from(u32::MAX.checked_shl(32 - prefix).unwrap_or(0)),
            broadcast_addr: None,
        }
    }

    #[test]
    fn broadcast_goes_to_every_subnet_and_never_to_the_limited_address() {
        let wired = iface([10, 0, 24, 5], 16);
        let wifi = Iface {
            broadcast_addr: Some([10, 1, 255, 255].into()),
            ..iface([10, 1, 24, 5], 16)
        };
        let lo = Iface {
            loopback: true,
            ..iface([127, 0, 0, 1], 8)
        };
        let down = Iface {
            up: false,
            ..iface([192, 168, 1, 2], 24)
        };
        let p2p = iface([172, 16, 0, 1], 31);
        let no_bcast = Iface {
            broadcast: false,
            ..iface([172, 17, 0, 1], 24)
        };
        let limited = Iface {
            broadcast_addr: Some(Ipv4Addr::BROADCAST),
            ..iface([10, 2, 0, 1], 24)
        };
        let got = subnet_broadcasts(&[wired, wifi, lo, down, p2p, no_bcast, limited, wired]);
        let want: Vec<Ipv4Addr> = vec![
            [10, 0, 255, 255].into(),
            [10, 1, 255, 255].into(),
            [10, 2, 0, 255].into(),
        ];
        assert_eq!(got, want);
        assert!(subnet_broadcasts(&[lo, down]).is_empty());
    }
}
