//! The protocol core: no I/O, time passed in.
