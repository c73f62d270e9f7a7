//! The replay driver: runs the runtime start-up and cycle code over a recording.
