//! What every spawn of the process shares with the network's: one lock, and the drop to the
//! sandbox's host user.

/// Serializes spawns so the inheritable status-pipe end of one sandbox's start never leaks
/// into another started concurrently from this process.
static SPAWN_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Held around every spawn that has descriptors inheritable (a bwrap start) and every other
/// spawn of the process (pasta, the route helper, a keeper, host tools), so none forks while a
/// bwrap start has its pipes inheritable: a stray copy of the status pipe's write end in a
/// long-lived process (pasta's daemon) would keep its reader waiting forever. One lock for
/// every crate that spawns: a lock of each crate's own would not keep the others out.
pub fn spawn_guard() -> std::sync::MutexGuard<'static, ()> {
    SPAWN_LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Clears supplementary groups and sets gid, then uid (which drops every capability), for the
/// calling thread only. Raw syscalls: safe in a forked child before `exec`.
pub fn drop_to(uid: u32, gid: u32) -> std::io::Result<()> {
    rustix::thread::set_thread_groups(&[])?;
    let gid = rustix::process::Gid::from_raw(gid);
    rustix::thread::set_thread_res_gid(gid, gid, gid)?;
    let uid = rustix::process::Uid::from_raw(uid);
    rustix::thread::set_thread_res_uid(uid, uid, uid)?;
    Ok(())
}
