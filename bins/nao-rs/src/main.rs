//! The nao-rs runtime host: run, demo, replay, record.

fn main() {}
