//! SPDK store benchmark (in progress).
fn main() {}
