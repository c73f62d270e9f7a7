//! The real USB link on a machine without a chest board: clear errors, no
//! panic (passes with or without /dev/bus/usb). Needs the `usb` feature.
#![cfg(feature = "usb")]

use nao_wire::link::usb::UsbLink;
use nao_wire::link::{Link, PRODUCT_ID, VENDOR_ID};
use nao_wire::LinkError;

#[test]
fn usb_open_without_a_board_is_no_device() {
    let mut link = UsbLink::new();
    assert_eq!(link.open(VENDOR_ID, PRODUCT_ID), Err(LinkError::NoDevice));
    let msg = link.detail().expect("a message").to_string();
    assert!(
        msg.starts_with("no chest board (USB ffff:0006) found: "),
        "{msg}"
    );
    // Nothing was left open: the next call finds no device either.
    assert_eq!(link.claim_interface(0), Err(LinkError::NoDevice));
}

#[test]
fn usb_calls_on_a_closed_link_are_no_device() {
    let mut link = UsbLink::new();
    let mut buf = [0u8; 512];
    assert_eq!(link.bulk_in(0x81, &mut buf), Err(LinkError::NoDevice));
    assert_eq!(link.bulk_out(0x02, &[0xa5]), Err(LinkError::NoDevice));
    assert_eq!(
        link.control_out(0x40, 0x05, 0x24, 0, &[]),
        Err(LinkError::NoDevice)
    );
    assert_eq!(
        link.control_in(0xc0, 0x02, 0, 0, &mut buf[..4]),
        Err(LinkError::NoDevice)
    );
    assert_eq!(link.set_configuration(1), Err(LinkError::NoDevice));
    assert_eq!(link.claim_interface(0), Err(LinkError::NoDevice));
    link.close();
    link.close();
}

#[test]
fn usb_control_in_with_a_wrong_direction_is_refused() {
    let mut link = UsbLink::new();
    let mut buf = [0u8; 4];
    assert!(matches!(
        link.control_in(0x40, 0x02, 0, 0, &mut buf),
        Err(LinkError::Other)
    ));
    assert!(matches!(
        link.control_out(0xc0, 0x01, 0, 0, &[]),
        Err(LinkError::Other)
    ));
}
