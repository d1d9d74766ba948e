//! Storage benchmark (placeholder).
fn main() {}
