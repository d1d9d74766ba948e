//! The `moldau` binary.
fn main() {}
