//! The virtual robot: a chest board and every board behind it, over a Unix socket.

fn main() {}
