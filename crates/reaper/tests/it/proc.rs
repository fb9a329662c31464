//! Liveness against this machine's real /proc: no fake where the real thing runs here.

use std::process::Command;

use reaper::{Liveness, Owner, OwnerLiveness, ProcLiveness, labels_for_run};

#[test]
fn this_process_is_alive_and_labels_cleanly() {
    let me = Owner::current(None).expect("read /proc/self");
    assert_eq!(me.pid, std::process::id());
    assert!(me.user.starts_with("uid-"), "{}", me.user);
    let checker = ProcLiveness::new().expect("read /proc");
    assert_eq!(checker.liveness(&me), Liveness::Alive);
    labels_for_run("ps-self", &me, 0, None).expect("the current owner makes valid labels");
    assert_eq!(Owner::current(Some("Alice Smith")).unwrap().user, "Alice-Smith");
}

#[test]
fn an_exited_child_is_dead_and_a_restarted_pid_is_reused() {
    let checker = ProcLiveness::new().unwrap();
    let me = Owner::current(None).unwrap();
    let mut child = Command::new("sleep").arg("30").spawn().expect("spawn sleep");
    let pid = child.id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, start_time) = reaper::parse_stat(&stat).unwrap();
    let owner = Owner { pid, start_time, ..me.clone() };
    assert_eq!(checker.liveness(&owner), Liveness::Alive);
    // Same pid, another start time: what a reused pid looks like.
    assert_eq!(
        checker.liveness(&Owner { start_time: start_time + 1, ..owner.clone() }),
        Liveness::Reused
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(checker.liveness(&owner), Liveness::Dead);
}

#[test]
fn owners_from_another_namespace_or_boot_are_unknown() {
    let checker = ProcLiveness::new().unwrap();
    let me = Owner::current(None).unwrap();
    let in_container = Owner { pid_ns: me.pid_ns + 1, ..me.clone() };
    assert_eq!(checker.liveness(&in_container), Liveness::Unknown);
    let other_boot = Owner { boot_id: "00000000-0000-0000-0000-000000000000".into(), ..me };
    assert_eq!(checker.liveness(&other_boot), Liveness::Unknown);
}

/// Here, not among the crate's unit tests: a fork there while `ports` drops a listener holds
/// the port open until the exec, and that test finds it still in use.
#[test]
fn a_child_told_to_exit_is_reaped_as_it_ends_and_one_that_does_not_is_left() {
    // Reaped by the code under test, not by `Child::wait`.
    #[allow(clippy::zombie_processes)]
    let quick = std::process::Command::new("sleep").arg("0.05").spawn().unwrap();
    let pid = i32::try_from(quick.id()).unwrap();
    let began = std::time::Instant::now();
    reaper::reap_child(pid, std::time::Duration::from_secs(5));
    assert!(began.elapsed() < std::time::Duration::from_secs(3), "{:?}", began.elapsed());
    let gone = rustix::process::waitpid(
        rustix::process::Pid::from_raw(pid),
        rustix::process::WaitOptions::NOHANG,
    );
    assert_eq!(gone.err(), Some(rustix::io::Errno::CHILD), "reaped already");

    let mut slow = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let began = std::time::Instant::now();
    reaper::reap_child(i32::try_from(slow.id()).unwrap(), std::time::Duration::from_millis(100));
    let waited = began.elapsed();
    assert!(waited >= std::time::Duration::from_millis(100), "{waited:?}");
    assert!(waited < std::time::Duration::from_secs(5), "{waited:?}");
    slow.kill().unwrap();
    slow.wait().unwrap();
}
