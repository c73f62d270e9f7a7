//! `--link usb|sim:PATH`: the chest board or the virtual robot.

use nao_wire::link::sim::{sim_path, SimLink};
use nao_wire::link::usb::UsbLink;
use nao_wire::Link;

/// The link a `--link` value names. Errors name the value and the fix.
pub fn from_arg(arg: &str) -> Result<Box<dyn Link>, String> {
    if arg == "usb" {
        return Ok(Box::new(UsbLink::new()));
    }
    match sim_path(arg) {
        Some(path) => Ok(Box::new(SimLink::new(path))),
        None => Err(format!(
            "--link {arg:?}: unknown link; use `usb` (the chest board) or `sim:PATH` (the virtual robot's socket, e.g. sim:/tmp/nao-rs-sim.sock)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_arg_usb_and_sim_and_errors() {
        assert!(from_arg("usb").is_ok());
        assert!(from_arg("sim:/tmp/x.sock").is_ok());
        for bad in ["", "sim:", "USB", "tcp:1"] {
            let e = from_arg(bad).err().expect(bad);
            assert!(
                e.contains("sim:PATH") && e.contains(&format!("{bad:?}")),
                "{e}"
            );
        }
    }
}
