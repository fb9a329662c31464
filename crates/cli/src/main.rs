//! `python-sandbox`: the command line entry point.

fn main() {}
