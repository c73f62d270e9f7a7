//! TODO: usb link.
