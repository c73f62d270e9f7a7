//! The guard: takes the chest board over when the runtime hangs, crashes or does not obey a trip.

fn main() {}
