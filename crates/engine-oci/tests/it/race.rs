//! A mount source swapped for a symlink to a secret while runs start (issue 9, item 1): a host
//! thread exchanges `./data` and a link to a fake `.ssh` in a loop (`renameat2(RENAME_EXCHANGE)`).
//! The daemon resolves the path itself, so each run either gets the real `./data` (checked
//! through the container's `/proc/<pid>/root` before the script starts) or is refused; the
//! key is never read.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sandbox_core::{Captured, Mount, MountMode, Output, RunIo, Stdin};

use crate::support::{engines, name, spec, workspace};

const RUNS: usize = 30;

#[test]
fn a_mount_swapped_for_a_link_to_a_secret_is_never_followed() {
    for engine in engines() {
        let (_dir, ws) = workspace("");
        let home = tempfile::tempdir().expect("fake home");
        let data = ws.join("data");
        let secret = home.path().join(".ssh");
        std::fs::create_dir_all(&secret).expect("fake .ssh");
        std::fs::write(secret.join("id_rsa"), "PRIVATE KEY").expect("key");
        std::fs::create_dir(&data).expect("data");
        std::fs::write(data.join("ok.txt"), "inside").expect("ok.txt");
        std::os::unix::fs::symlink(&secret, ws.join("link")).expect("link");
        let script = format!(
            "import os\nfor n in ('ok.txt', 'id_rsa'):\n    try:\n        print(open(os.path.join({:?}, n)).read())\n    except OSError as e:\n        print(type(e).__name__)\n",
            data.display().to_string()
        );
        std::fs::write(ws.join("main.py"), script).expect("script");
        let mut spec = spec(&ws);
        spec.mounts = vec![Mount { path: data.clone(), mode: MountMode::ReadOnly }];
        let env = engine.prepare(&spec, &mut |_| {}).expect("prepare");

        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, ws) = (Arc::clone(&stop), ws.clone());
            std::thread::spawn(move || {
                let dir =
                    rustix::fs::open(&ws, rustix::fs::OFlags::PATH, rustix::fs::Mode::empty())
                        .expect("open workspace");
                let flags = rustix::fs::RenameFlags::EXCHANGE;
                while !stop.load(Ordering::Relaxed) {
                    rustix::fs::renameat_with(&dir, "data", &dir, "link", flags).expect("exchange");
                    // Slower than the CPU allows, so some runs get past the checks.
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            })
        };
        let (mut ran, mut refused) = (0, 0);
        for _ in 0..RUNS {
            let mut captured = Captured::default();
            let io = RunIo {
                stdin: Stdin::Null,
                output: Output::Sink(&mut captured),
                status: None,
                published: None,
                started: None,
            };
            match engine.run_prepared(&spec, &env, io) {
                Ok(_) => {
                    ran += 1;
                    let out = captured.stdout_lossy();
                    assert!(
                        !out.contains("PRIVATE KEY"),
                        "{}: the secret was read: {out}",
                        name(&engine)
                    );
                }
                Err(e) => {
                    refused += 1;
                    println!(
                        "{}: refused: {}",
                        name(&engine),
                        e.to_string().lines().next().unwrap_or_default()
                    );
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().expect("swapper");
        println!("{}: {ran} ran, {refused} refused", name(&engine));
    }
}
