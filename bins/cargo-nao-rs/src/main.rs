//! `cargo nao-rs stop ADDRESS`: the UDP stop from a developer's computer.

fn main() {}
