//! A root caller's workspace and read-write mounts as idmapped mounts, on docker and podman.
//!
//! A root caller's container runs as nobody (65534), so without help nobody could write only
//! what is writable by others. The daemon resolves bind sources by path in the host's mount
//! namespace, so the CLI (root, talking to a local daemon) attaches an **idmapped copy** of each
//! such directory (`reaper::idmap::Staged`: cloned from a descriptor opened without following
//! links, root's files shown as nobody's, nobody's writes stored as root's) in a private
//! directory of its cache, `<cache>/idmap/<container name>/<n>`, and binds that instead. Existing files
//! stay writable and no permission or ACL of the caller changes; the copy is detached when the
//! run ends. Where idmapped mounts are not possible (an old kernel, a filesystem without them,
//! a remote or rootless daemon, a non-root caller) the directories are lent with an ACL
//! instead (`crate::workspace`). A killed CLI's copies go with a later sweep ([`sweep`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;

use crate::plan::{ContainerPlan, Source};

/// Leftover copies younger than this are left alone: their run may still be creating its
/// container.
const LEFTOVER_AGE: Duration = Duration::from_secs(120);

/// The staged copies of one run, detached (and their directory removed) on drop.
#[derive(Debug)]
pub(crate) struct Stages {
    dir: PathBuf,
    /// (original directory, its staged copy).
    staged: Vec<(PathBuf, reaper::idmap::Staged)>,
}

fn root(cache_dir: &Path) -> PathBuf {
    cache_dir.join("idmap")
}

impl Stages {
    /// Stages `dirs` for container `name`; `None` when idmapped mounts cannot be used here
    /// (the caller lends the directories with an ACL then).
    pub(crate) fn stage(cache_dir: &Path, name: &str, dirs: &[PathBuf]) -> Option<Stages> {
        if !dirs.iter().all(|d| reaper::idmap::supported(d)) {
            return None;
        }
        reaper::PrivateDir::open(&root(cache_dir)).ok()?;
        let dir = root(cache_dir).join(name);
        std::fs::create_dir(&dir).ok()?;
        let mut stages = Stages { dir, staged: Vec::new() };
        for (n, original) in dirs.iter().enumerate() {
            let source = engine_detect::open_nofollow(original).ok()?;
            let at = stages.dir.join(n.to_string());
            let staged = reaper::idmap::Staged::attach(std::os::fd::AsFd::as_fd(&source), &at);
            stages.staged.push((original.clone(), staged.ok()?));
        }
        Some(stages)
    }

    /// Leaves the copies attached (a session's, for as long as its container lives; the sweep
    /// detaches them afterwards).
    pub(crate) fn keep(mut self) {
        for (_, staged) in self.staged.drain(..) {
            staged.keep();
        }
    }

    /// Binds the staged copies in `plan` instead of the originals (read-write host binds).
    pub(crate) fn apply(&self, plan: &mut ContainerPlan) {
        let pairs: Vec<(PathBuf, PathBuf)> =
            self.staged.iter().map(|(o, s)| (o.clone(), s.path().to_owned())).collect();
        restage(plan, &pairs);
    }
}

impl Drop for Stages {
    fn drop(&mut self) {
        if !self.staged.is_empty() {
            self.staged.clear();
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// Pure: each read-write host bind of `plan` whose source is an original in `pairs` gets its
/// staged copy as source; the target (the path the script sees) stays.
pub(crate) fn restage(plan: &mut ContainerPlan, pairs: &[(PathBuf, PathBuf)]) {
    for mount in plan.mounts.iter_mut().filter(|m| m.writable) {
        if let Source::Host(path) = &mount.source
            && let Some((_, staged)) = pairs.iter().find(|(o, _)| o == path)
        {
            mount.source = Source::Host(staged.clone());
        }
    }
}

/// Detaches the copies kept for container `name` (a stopped session's).
pub(crate) fn release(cache_dir: &Path, name: &str) {
    let dir = root(cache_dir).join(name);
    if let Ok(copies) = std::fs::read_dir(&dir) {
        for copy in copies.flatten() {
            reaper::idmap::unstage(&copy.path());
        }
    }
    let _ = std::fs::remove_dir(&dir);
}

/// Detaches the copies of runs whose container is gone (a killed CLI's), older than
/// [`LEFTOVER_AGE`]. Best effort; root only (nobody else can have made any).
pub(crate) async fn sweep(docker: &Docker, cache_dir: &Path) {
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root(cache_dir)) else { return };
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else { continue };
        let young = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_none_or(|age| age < LEFTOVER_AGE);
        if !name.starts_with("python-sandbox-") {
            continue;
        }
        let gone = matches!(
            docker
                .inspect_container(
                    &name,
                    None::<bollard::query_parameters::InspectContainerOptions>
                )
                .await,
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })
        );
        if young || !gone || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        release(cache_dir, &name);
    }
}
