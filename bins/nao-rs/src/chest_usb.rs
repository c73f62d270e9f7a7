//! The chest board as the kernel enumerated it: one sysfs reader for
//! `nao-rs capture` (which bus to watch) and `nao-rs doctor` (is it there,
//! who holds its node). The ids are the wire's (`nao_wire::link`).

use std::path::Path;

use nao_wire::link::{PRODUCT_ID, VENDOR_ID};

/// Where the kernel lists USB devices.
pub const SYSFS_DEVICES: &str = "/sys/bus/usb/devices";

/// One enumerated chest board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsbDevice {
    /// Its sysfs directory, as on the robot (`/sys/bus/usb/devices/1-1`).
    pub sysfs: String,
    /// `idVendor`, as the file says (hex).
    pub vendor: String,
    /// `idProduct`, as the file says (hex).
    pub product: String,
    /// `busnum` (0 when unreadable).
    pub bus: u16,
    /// `devnum` (0 when unreadable).
    pub dev: u16,
}

impl UsbDevice {
    /// Its device node.
    pub fn node(&self) -> String {
        format!("/dev/bus/usb/{:03}/{:03}", self.bus, self.dev)
    }
}

/// Whether sysfs's `idVendor` and `idProduct` texts name the chest board.
pub fn is_chest(vendor: &str, product: &str) -> bool {
    let hex = |s: &str| u16::from_str_radix(s.trim(), 16).ok();
    hex(vendor) == Some(VENDOR_ID) && hex(product) == Some(PRODUCT_ID)
}

/// `ffff:0006`, for messages.
pub fn ids() -> String {
    format!("{VENDOR_ID:04x}:{PRODUCT_ID:04x}")
}

/// The chest boards listed in `dir` (the robot's [`SYSFS_DEVICES`], or a
/// test's tree standing in for it), sorted by their sysfs name.
pub fn chest_boards(dir: &Path) -> Result<Vec<UsbDevice>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut found = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        let attr = |a: &str| {
            std::fs::read_to_string(p.join(a))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let (vendor, product) = (attr("idVendor"), attr("idProduct"));
        if !is_chest(&vendor, &product) {
            continue;
        }
        found.push(UsbDevice {
            sysfs: format!("{SYSFS_DEVICES}/{}", e.file_name().to_string_lossy()),
            vendor,
            product,
            bus: attr("busnum").parse().unwrap_or(0),
            dev: attr("devnum").parse().unwrap_or(0),
        });
    }
    found.sort_by(|a, b| a.sysfs.cmp(&b.sysfs));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chest_usb_finds_the_board_among_sysfs_devices() {
        let dir = tempfile::tempdir().unwrap();
        for (name, v, p, bus, dev) in [
            ("usb1", "1d6b\n", "0002\n", "1\n", "1\n"),
            ("1-1", "ffff\n", "0006\n", "1\n", "4\n"),
            ("1-2", "FFFF", "0007", "1", "5"),
        ] {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).unwrap();
            for (f, t) in [
                ("idVendor", v),
                ("idProduct", p),
                ("busnum", bus),
                ("devnum", dev),
            ] {
                std::fs::write(d.join(f), t).unwrap();
            }
        }
        let boards = chest_boards(dir.path()).unwrap();
        assert_eq!(boards.len(), 1, "{boards:?}");
        assert_eq!((boards[0].bus, boards[0].dev), (1, 4));
        assert_eq!(boards[0].node(), "/dev/bus/usb/001/004");
        assert_eq!(boards[0].sysfs, "/sys/bus/usb/devices/1-1");
        assert!(is_chest("FFFF", " 0006 "));
        assert!(!is_chest("ffff", "x"));
        let missing = chest_boards(&dir.path().join("none")).unwrap_err();
        assert!(missing.contains("none"), "{missing}");
    }
}
