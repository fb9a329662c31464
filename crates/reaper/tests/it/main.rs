//! The reaper's one integration-test binary: label schema, policy scenarios, properties, and liveness
//! against this machine's real /proc.

mod acl;
mod cap;
mod envs;
mod hostfs;
mod idmap;
mod labels;
mod policy;
mod proc;
mod props;
mod support;
