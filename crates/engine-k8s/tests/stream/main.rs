//! Files streamed, measured: a 100 MB `write_file` and a `put` of a 100 MB host file through
//! `PodSandbox` on the stand-in kubelet and the real agent, with the growth of this process's
//! peak RSS (`VmHWM`) checked. A second whole copy of the contents (the request's own stdin
//! buffer, or a whole archive in memory) would add 100 MB; frames straight from the caller's
//! slice and a tar made on the fly add a few. Its own test binary: nothing else runs beside
//! it to move the peak.

#![allow(clippy::print_stdout)]

#[path = "../exec/agent.rs"]
mod agent;
#[allow(dead_code)] // what it records is for the exec tier's checks
#[path = "../exec/kubelet.rs"]
mod kubelet;

use engine_k8s::channel::Protocol;
use engine_k8s::{Attached, PodSandbox};
use sandbox_core::{PutSource, Sandbox as _};

const SIZE: usize = 100 << 20;
/// Well under one more copy of the contents.
const GROWTH_LIMIT: u64 = 24 << 20;

/// Starts a new peak: `5` to `clear_refs` sets `VmHWM` to the current RSS (Linux 4.0 and up).
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
}

/// This process's peak resident set since [`reset_peak`], in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mb_write_and_put_stream_without_a_second_copy() {
    let Some(agent) = agent::Agent::start() else { return };
    let kubelet = kubelet::Kubelet::start(&[Protocol::V4]).await;
    let workdir = agent.dir.join("ws");
    std::fs::create_dir_all(&workdir).expect("workdir");
    let sandbox = PodSandbox::attach(
        agent.exec(&kubelet),
        Attached {
            id: "big".to_owned(),
            workdir: workdir.display().to_string(),
            ..Attached::default()
        },
    );
    // Touched, so the caller's own copy is in the baseline.
    let contents: Vec<u8> = (0..SIZE).map(|i| (i % 251) as u8).collect();
    let warm = workdir.join("warm.bin");
    sandbox.write_file(&warm.display().to_string(), b"warm").await.expect("warm up");

    reset_peak();
    let before = peak_rss();
    let target = workdir.join("big.bin");
    sandbox.write_file(&target.display().to_string(), &contents).await.expect("write 100 MB");
    let after_write = peak_rss();
    let written = std::fs::read(&target).expect("read back");
    assert!(written == contents, "the written file differs ({} bytes)", written.len());
    drop(written);
    let write_growth = after_write.saturating_sub(before);

    // The host file for `put`: on disk, its bytes not held here.
    let host = agent.dir.join("host-big.bin");
    std::fs::rename(&target, &host).expect("move");
    let dest = workdir.join("put");
    reset_peak();
    let before_put = peak_rss();
    sandbox
        .put(&PutSource::HostPath(host.clone()), &dest.display().to_string())
        .await
        .expect("put 100 MB");
    let put_growth = peak_rss().saturating_sub(before_put);
    let unpacked = std::fs::read(dest.join("host-big.bin")).expect("unpacked");
    assert!(unpacked == contents, "the unpacked file differs ({} bytes)", unpacked.len());
    println!(
        "peak RSS growth: write_file 100 MB {} KiB, put of a 100 MB host file {} KiB",
        write_growth >> 10,
        put_growth >> 10
    );
    assert!(write_growth < GROWTH_LIMIT, "write_file grew the peak RSS by {write_growth} bytes");
    assert!(put_growth < GROWTH_LIMIT, "put grew the peak RSS by {put_growth} bytes");
}
