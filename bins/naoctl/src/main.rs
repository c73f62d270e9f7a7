//! The operator's tool: status, stop, rearm.

fn main() {}
