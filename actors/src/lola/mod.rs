//! The LoLA-compatible socket.
