//! Detects which isolation engine (bwrap, docker, podman) works on this machine
