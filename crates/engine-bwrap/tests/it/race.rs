//! A mount source swapped for a symlink to a secret while runs start (issue 9, item 1): a host
//! thread exchanges `./data` and a link to the fake home's `.ssh` in a loop
//! (`renameat2(RENAME_EXCHANGE)`). Each run either mounts the real `./data` or is refused; the
//! key is never read.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sandbox_core::{Captured, Engine, MountMode, Output, RunIo, Stdin};

use crate::support::{fixture, mount};

/// Pause between two swaps.
const SWAP_PAUSE_US: u64 = 500;

/// Runs per test; `RACE_RUNS` raises it for a longer hunt.
fn runs() -> usize {
    std::env::var("RACE_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(60)
}

#[test]
fn a_mount_swapped_for_a_link_to_a_secret_is_never_followed() {
    let Some(fx) = fixture() else { return };
    let ws = fx.workspace.path().canonicalize().expect("canonical workspace");
    let data = ws.join("data");
    std::fs::create_dir(&data).expect("data");
    std::fs::write(data.join("ok.txt"), "inside").expect("ok.txt");
    std::os::unix::fs::symlink(fx.home.path().join(".ssh"), ws.join("link")).expect("link");
    let script = format!(
        "import os\nfor name in ('ok.txt', 'id_rsa'):\n    try:\n        print(open(os.path.join({:?}, name)).read())\n    except OSError as e:\n        print(type(e).__name__)\n",
        data.display().to_string()
    );
    let mut spec = fx.spec(&script);
    spec.workspace = ws.clone();
    spec.mounts = vec![mount(&data, MountMode::ReadOnly)];
    fx.prepare(&spec);

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, ws) = (Arc::clone(&stop), ws.clone());
        std::thread::spawn(move || {
            let dir = rustix::fs::open(&ws, rustix::fs::OFlags::PATH, rustix::fs::Mode::empty())
                .expect("open workspace");
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let flags = rustix::fs::RenameFlags::EXCHANGE;
                rustix::fs::renameat_with(&dir, "data", &dir, "link", flags).expect("exchange");
                swaps += 1;
                // About the time from the check to the mount: the swap lands in between often.
                std::thread::sleep(std::time::Duration::from_micros(SWAP_PAUSE_US));
            }
            swaps
        })
    };
    let (mut ran, mut refused) = (0, 0);
    for _ in 0..runs() {
        let mut captured = Captured::default();
        let io = RunIo {
            stdin: Stdin::Null,
            output: Output::Sink(&mut captured),
            status: None,
            published: None,
            started: None,
        };
        match fx.engine.run(&spec, io) {
            Ok(_) => {
                ran += 1;
                let out = captured.stdout_lossy();
                assert!(!out.contains("PRIVATE KEY"), "the swapped-in secret was read: {out}");
            }
            Err(e) => {
                refused += 1;
                println!("refused: {e}");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    println!("{ran} ran, {refused} refused, {swaps} swaps");
}
