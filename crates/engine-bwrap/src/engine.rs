//! [`BwrapEngine`]: configuration, the prepare phase (uv installs into a keyed environment
//! inside its own sandbox) and the run phase (the environment's interpreter runs the script
//! directly, no uv).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandbox_core::{Engine, Net, Output, RunIo, RunOutcome, RunSpec, Stdin};

use crate::cache::CacheLayout;
use crate::envs::Lease;
use crate::error::{Error, Result};
use crate::fsutil;
use crate::host::HostFacts;
use crate::key::{Marker, env_key};
use crate::launcher::{BwrapLauncher, Launcher};
use crate::lockfile;
use crate::paths;
use crate::plan::{self, PrepareLayout, RunLayout};
use crate::process::{self, Outputs, Signals};
use crate::tools::ToolCache;
use crate::uv::{self, UvLocation};

/// What the prepare does not compile to bytecode: packages' own test suites (`numpy/*/tests/`:
/// 250 of numpy's 487 modules, 0.8 of its 1.1 s of compiling), which a script does not import.
/// A module of such a directory that is imported still works: Python compiles it in memory.
const NOT_COMPILED: &str = "/tests?/";

/// How to build a [`BwrapEngine`]. No `Default`: [`BwrapConfig::from_env`] is the usual start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BwrapConfig {
    /// python-sandbox's cache root (`$XDG_CACHE_HOME/python-sandbox`); this engine uses its
    /// `bwrap/` subdirectory for uv, its cache, environments and locks.
    pub cache_dir: PathBuf,
    /// The caller's home: hidden in the sandbox (an empty tmpfs takes its place).
    pub home: PathBuf,
    /// `PATH` to find `bwrap`, `uv` and Pythons on (the host's).
    pub path: Option<OsString>,
    /// Use this bwrap instead of the one on `path`.
    pub bwrap: Option<PathBuf>,
    /// Use this uv instead of the one on `path` (or the pinned download).
    pub uv: Option<PathBuf>,
    /// Interpreter request for `uv python find` (e.g. `3.12` or a path); default:
    /// the script's `requires-python`. Part of the environment key.
    pub python: Option<String>,
    /// While a script runs, turn SIGINT/SIGTERM/SIGHUP into "kill the whole sandbox". The CLI
    /// wants this; library users that manage signals themselves do not. Installing the
    /// handlers replaces the process's default disposition for those signals for good.
    pub handle_signals: bool,
    /// Where session records live (`$XDG_RUNTIME_DIR/python-sandbox`, else
    /// `<cache_dir>/bwrap/run`), private to the caller.
    pub runtime_dir: PathBuf,
    /// Net-on runs without pasta may get the built-in relay (full TCP/UDP, where the engine
    /// supports it and a tun device can be opened); off, they get the built-in HTTP(S) proxy.
    pub builtin_relay: bool,
    /// Whether net-on sandboxes may reach private ranges (the user's LAN; the host's own
    /// addresses never): off unless the user config says `[net] lan = true`.
    pub lan: sandbox_core::Lan,
    /// The cache's size cap (`[cache] max-size`): a prepare that builds a new environment
    /// prunes to it at most once a day, and `reap` does on demand.
    pub cache_max_bytes: u64,
}

impl BwrapConfig {
    /// Cache dir from `XDG_CACHE_HOME` or `~/.cache`, home from `HOME`, `PATH` from the
    /// environment, signals handled.
    pub fn from_env() -> Result<BwrapConfig> {
        // The real path: `..` or a link in HOME must not hide it from the checks.
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|h| h.canonicalize().unwrap_or(h))
            .ok_or(Error::NoHome)?;
        let cache_base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join(".cache"));
        let cache_dir = cache_base.join("python-sandbox");
        let runtime_dir = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|p| p.join("python-sandbox"))
            .unwrap_or_else(|| cache_dir.join("bwrap").join("run"));
        Ok(BwrapConfig {
            runtime_dir,
            cache_dir,
            home,
            path: std::env::var_os("PATH"),
            bwrap: None,
            uv: None,
            python: None,
            handle_signals: true,
            builtin_relay: true,
            lan: sandbox_core::Lan::Refused,
            cache_max_bytes: crate::envs::DEFAULT_CACHE_MAX_BYTES,
        })
    }
}

/// A prepared environment: what [`BwrapEngine::run_prepared`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedEnv {
    /// The environment key (hash of requires-python, dependencies, interpreter request, uv version).
    pub key: String,
    /// The virtual environment directory (read-only at run time).
    pub dir: PathBuf,
    /// The base interpreter (canonical).
    pub python: PathBuf,
    /// Its version, e.g. `3.11.7`.
    pub python_version: String,
    /// Interpreter prefixes mounted read-only at run time.
    pub prefixes: Vec<PathBuf>,
    /// The interpreter finds its library through an absolute run path into its host prefix,
    /// so a sandbox that shows the prefix elsewhere sets `LD_LIBRARY_PATH` (`plan::Relocation`).
    pub library_path: bool,
    /// The uv version that built it.
    pub uv_version: String,
    /// False when an existing environment was reused (the warm path).
    pub fresh: bool,
    /// The shared hold on the environment's lock that keeps the pruner away while it is used.
    pub(crate) lease: Lease,
}

/// Runs PEP 723 scripts in bubblewrap, or in the sandboxes of another [`Launcher`]
/// ([`BwrapEngine::with_launcher`]: the same pipeline, another wall builder). Cheap to
/// create: the warm path (environment exists) spawns nothing but the sandbox itself.
#[derive(Debug)]
pub struct BwrapEngine {
    config: BwrapConfig,
    layout: CacheLayout,
    launcher: Box<dyn Launcher>,
    /// pasta, which gives sandboxes with net on their outbound network ([`sandbox_net::UserNet`]), or why
    /// it cannot here (then they get the built-in proxy).
    pasta: std::result::Result<PathBuf, engine_detect::NoPasta>,
    host: HostFacts,
    tools: ToolCache,
}

impl std::fmt::Debug for ToolCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ToolCache")
    }
}

impl BwrapEngine {
    /// Finds bwrap (>= 0.8, version cached), gathers host facts, prepares the cache layout.
    /// Does not probe namespaces (use [`crate::probe`]) and does not fetch uv.
    pub fn new(config: BwrapConfig) -> Result<BwrapEngine> {
        let layout = Self::layout(&config)?;
        let tools = ToolCache::new(layout.tools_file());
        let bwrap = match &config.bwrap {
            Some(path) => path.clone(),
            None => {
                engine_detect::which("bwrap", config.path.as_deref()).ok_or(Error::BwrapNotFound)?
            }
        };
        crate::host::check_bwrap(&bwrap, &tools)?;
        let launcher = Box::new(BwrapLauncher::new(bwrap));
        Self::assemble(config, layout, tools, launcher)
    }

    /// The same pipeline with another launcher (engine-native's in-process sandbox): gathers
    /// host facts and prepares the cache layout, which both launchers share (one environment
    /// store: an environment prepared for one is warm for the other), and warm sessions
    /// (`session.rs`) whose sandboxes that launcher starts detached.
    pub fn with_launcher(config: BwrapConfig, launcher: Box<dyn Launcher>) -> Result<BwrapEngine> {
        let layout = Self::layout(&config)?;
        let tools = ToolCache::new(layout.tools_file());
        Self::assemble(config, layout, tools, launcher)
    }

    fn layout(config: &BwrapConfig) -> Result<CacheLayout> {
        if !config.home.is_absolute() {
            return Err(Error::NoHome);
        }
        if !config.cache_dir.is_absolute() {
            return Err(Error::NoCacheDir);
        }
        let layout = CacheLayout::new(&config.cache_dir);
        fsutil::create_dir_all(layout.root())?;
        if rustix::process::getuid().is_root() {
            // A root caller's sandboxes run as nobody and own the environments and caches
            // below; no other process running as nobody may reach them.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(layout.root(), std::fs::Permissions::from_mode(0o700))
                .map_err(Error::io(format!("restricting {}", layout.root().display())))?;
        }
        Ok(layout)
    }

    fn assemble(
        config: BwrapConfig,
        layout: CacheLayout,
        tools: ToolCache,
        launcher: Box<dyn Launcher>,
    ) -> Result<BwrapEngine> {
        let host = HostFacts::gather(&config.home, &layout.etc_dir())?;
        if host.run_as().is_some() {
            crate::stage::make_idmap_userns_meanwhile();
        }
        let pasta = engine_detect::pasta(config.path.as_deref());
        Ok(BwrapEngine { config, layout, launcher, pasta, host, tools })
    }

    /// The launcher's name: `bwrap`, or the other launcher's (`native`).
    pub fn launcher_name(&self) -> &'static str {
        self.launcher.name()
    }

    /// The engine's configuration.
    pub fn config(&self) -> &BwrapConfig {
        &self.config
    }

    fn uv_location(&self) -> Result<UvLocation> {
        uv::locate_uv(self.config.uv.as_deref(), self.config.path.as_deref(), &self.layout.uv_dir())
    }

    /// Returns the environment for `spec`, building it if needed. Warm path: key → marker →
    /// done, no uv and no bwrap spawned. Cold path: fetch uv if absent, find the interpreter
    /// on the host, write the environment's skeleton (written directly; `uv venv` for other
    /// interpreters), then resolve and `uv pip install` inside prepare sandboxes (network on,
    /// attached as they start; no workspace, no home; only the uv cache, python dir and this
    /// environment writable).
    /// Concurrent prepares of the same key serialize on a lock file, which the returned
    /// environment holds shared (and stamps as its last use) for as long as it lives, so a
    /// prune never deletes it under a run.
    pub fn prepare(&self, spec: &RunSpec, status: &mut dyn FnMut(&str)) -> Result<PreparedEnv> {
        let location = self.uv_location()?;
        let uv_version = location.version(&self.tools)?;
        let python_request = self.config.python.as_deref();
        let key = env_key(
            spec.requires_python.as_deref(),
            &spec.dependencies,
            python_request,
            &uv_version,
        );
        let envs = self.layout.envs_dir();
        let dir = envs.join(&key);
        let marker_path = envs.join(format!("{key}.json"));
        let lock_path = self.layout.locks_dir().join(format!("{key}.lock"));
        if !lock_path.parent().is_some_and(Path::is_dir) {
            fsutil::create_dir_all(&self.layout.locks_dir())?;
        }
        let lease = Lease::take(&lock_path, status)?;
        if let Some(env) = self.ready(&key, &dir, &marker_path, &lease) {
            return Ok(env);
        }
        drop(lease);
        let family =
            crate::key::family(spec.requires_python.as_deref(), python_request, &uv_version);
        if let Some(env) = self.satisfying(&family, &spec.dependencies) {
            return Ok(env);
        }
        fsutil::create_dir_all(&envs)?;
        // Build under the exclusive lock. Never *wait* for it: whoever builds keeps a shared
        // hold afterwards (for its run), so waiting for exclusive would wait for that run, and
        // forever when the builder is another thread of this process that outlives us. Wait for
        // a shared hold instead, which the builder grants once the environment is complete.
        let mut waited = false;
        let lease = loop {
            if let Some(lease) = Lease::try_exclusive(&lock_path)? {
                break lease;
            }
            if !waited {
                status("waiting for another python-sandbox preparing the same environment");
                waited = true;
            }
            let shared = Lease::take(&lock_path, &mut |_| {})?;
            if let Some(env) = self.ready(&key, &dir, &marker_path, &shared) {
                return Ok(env);
            }
            drop(shared);
            // A shared holder of an unfinished environment only looks and lets go.
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        if let Some(env) = self.ready(&key, &dir, &marker_path, &lease) {
            lease.share()?;
            return Ok(env);
        }

        let uv = uv::materialize(&location, &self.tools, status)?;
        let request = python_request.or(spec.requires_python.as_deref());
        fsutil::create_dir_all(&self.layout.uv_cache())?;
        fsutil::create_dir_all(&self.layout.python_dir())?;
        let interpreter = match self.find_interpreter(&uv.path, request, None) {
            // A version request nothing on this machine satisfies: let uv download a managed
            // Python into our cache, inside a prepare sandbox, then use that one.
            Err(Error::PythonNotFound { message: found, .. })
                if !request.is_some_and(|r| r.contains('/')) =>
            {
                status("no matching Python on this machine; installing one with uv");
                let python_dir = self.layout.python_dir();
                let mut install: Vec<OsString> = vec![uv.path.clone().into()];
                install.extend(["python".into(), "install".into(), "--no-config".into()]);
                install.extend(request.map(OsString::from));
                let downloads =
                    vec![("UV_PYTHON_DOWNLOADS".to_owned(), OsString::from("automatic"))];
                // uv alone (it checks what it downloads): the managed-Python dir is writable
                // here and only here.
                let step = Step {
                    dir: &python_dir,
                    ro: Vec::new(),
                    cache: Cache::Shared,
                    python_dir_rw: true,
                    net: true,
                    command: install,
                    extra_env: downloads,
                };
                self.run_prepare_step(&uv.path, Base::NONE, step, spec.tmpfs_size).map_err(
                    |e| match e {
                        Error::Prepare { stderr, .. } => Error::PythonNotFound {
                            request: request.unwrap_or("any python").to_owned(),
                            // What `uv python find` said too: a Python that is there but
                            // failed uv's query is told apart from none at all.
                            message: format!(
                                "none on this machine ({}), and uv could not install one: {stderr}",
                                found.trim()
                            ),
                        },
                        other => other,
                    },
                )?;
                self.find_interpreter(&uv.path, request, Some(&python_dir))?
            }
            other => other?,
        };

        // Leftovers of an interrupted or outdated build are replaced, never reused.
        let _ = std::fs::remove_file(&marker_path);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(Error::io(format!("removing {}", dir.display())))?;
        }
        fsutil::create_dir_all(&dir)?;

        status(&format!(
            "preparing python {} with {} dependenc{} (uv {})",
            interpreter.version,
            spec.dependencies.len(),
            if spec.dependencies.len() == 1 { "y" } else { "ies" },
            uv.version
        ));
        self.make_venv(&uv, &interpreter, &dir, spec.tmpfs_size)?;
        let identity = fsutil::identity(&interpreter.executable).unwrap_or_default();
        let installed = Installed { uv: &uv.path, uv_version: &uv.version, identity: &identity };
        let (lock, pins) = if spec.dependencies.is_empty() {
            (None, Vec::new())
        } else {
            let (lock, pins) =
                self.install_dependencies(installed, interpreter.base(), &dir, spec, status)?;
            (Some(lock), pins)
        };

        let mut marker = Marker::new(
            interpreter.executable.clone(),
            identity,
            interpreter.prefixes.clone(),
            interpreter.version.clone(),
            uv.version.clone(),
            spec.dependencies.clone(),
        );
        marker.library_path = interpreter.library_path;
        marker.lock.clone_from(&lock);
        marker.pins = pins;
        marker.family = Some(family);
        let bytes = serde_json::to_vec_pretty(&marker)
            .map_err(|e| Error::io("encoding the environment marker")(std::io::Error::other(e)))?;
        fsutil::write_atomic(&marker_path, &bytes)?;
        if let Some(lock) = &lock {
            // Best effort: without the entry a list that resolves alike installs anew.
            let entry = self.layout.by_lock(lock);
            if let Some(parent) = entry.parent()
                && fsutil::create_dir_all(parent).is_ok()
            {
                let _ = fsutil::write_atomic(&entry, key.as_bytes());
            }
        }
        lease.share()?;
        // The cache grew: keep it within its age and size (at most once a day).
        crate::envs::auto_prune(&self.config.cache_dir, self.config.cache_max_bytes);
        Ok(PreparedEnv {
            key,
            dir,
            python: interpreter.executable,
            python_version: interpreter.version,
            prefixes: interpreter.prefixes,
            library_path: interpreter.library_path,
            uv_version: uv.version,
            fresh: true,
            lease,
        })
    }

    /// The fresh environment `dir` of `interpreter`: written directly where its layout is
    /// known ([`crate::venv`]), else by `uv venv` in a prepare sandbox.
    fn make_venv(
        &self,
        uv: &uv::UvBinary,
        interpreter: &Interpreter,
        dir: &Path,
        tmpfs_size: u64,
    ) -> Result<()> {
        let relocation = self.relocation(Some(dir), interpreter.base(), None)?;
        let python = relocation.path(&interpreter.executable);
        let base = crate::venv::Base {
            python: &python,
            version: &interpreter.version,
            implementation: &interpreter.implementation,
            abiflags: &interpreter.abiflags,
        };
        if let Some(entries) = crate::venv::layout(base, &uv.version) {
            crate::venv::write(dir, &entries)
                .map_err(Error::io(format!("writing the environment {}", dir.display())))?;
            if let Some((uid, gid)) = self.host.run_as() {
                // As `uv venv` in the sandbox (nobody) left it: later steps write into it.
                fsutil::hand_over(dir, uid, gid)?;
            }
            return Ok(());
        }
        let mut venv: Vec<OsString> =
            vec![uv.path.clone().into(), "venv".into(), "--quiet".into(), "--no-config".into()];
        venv.extend(["--python".into(), interpreter.executable.clone().into(), dir.into()]);
        let step = Step::trusted(dir, venv);
        self.run_prepare_step(&uv.path, interpreter.base(), step, tmpfs_size)
    }

    fn ready(
        &self,
        key: &str,
        dir: &Path,
        marker_path: &Path,
        lease: &Lease,
    ) -> Option<PreparedEnv> {
        let marker = Marker::read(marker_path)?;
        if !marker.is_current() || std::fs::symlink_metadata(dir.join("bin/python")).is_err() {
            return None;
        }
        if let Some((uid, gid)) = self.host.run_as() {
            // Built by an older version as root: the sandbox (nobody) must be able to read it.
            fsutil::hand_over(dir, uid, gid).ok()?;
        }
        Some(PreparedEnv {
            key: key.to_owned(),
            dir: dir.to_owned(),
            python: marker.python,
            python_version: marker.python_version,
            prefixes: marker.prefixes,
            library_path: marker.library_path,
            uv_version: marker.uv_version,
            fresh: false,
            lease: lease.clone(),
        })
    }

    /// Installs the dependencies into the fresh venv `dir` so that no code of a package ever
    /// runs where the shared uv cache or the managed Pythons are writable (one bad build
    /// script would otherwise rewrite cached wheels or plant entries for every later
    /// environment on the machine):
    ///
    /// 1. **resolve** (`uv pip compile --generate-hashes`), the venv read-only, the result
    ///    into a scratch directory: first with `--no-build` and the shared cache (nothing but
    ///    uv runs); when that fails, with sdists built for their metadata in a private cache.
    ///    The result is untrusted and checked line by line (`lockfile`);
    /// 2. **install** the exact pins with `--no-build --require-hashes` and the shared cache,
    ///    hard-linked from it (`Cache::Linked`): uv alone, nothing of a package runs (no build,
    ///    no bytecode compile: that starts the venv's Python, whose `.pth` files are package
    ///    code);
    /// 3. only when that fails (a pin exists only as an sdist, or a URL without a hash):
    ///    **build** the same pins with a second private cache, thrown away afterwards;
    /// 4. **compile** the bytecode with `python -I -S -m compileall` (no site, so no `.pth`
    ///    runs), no cache, no network; test suites left out (see [`NOT_COMPILED`]).
    ///
    /// A list that resolves to the packages of a ready environment (same pins and hashes, same
    /// interpreter, same uv: `key::lock_key`) installs nothing: that environment's files are
    /// hard-linked instead, bytecode included. Returns the lock key and the pins.
    fn install_dependencies(
        &self,
        installed: Installed<'_>,
        base: Base<'_>,
        dir: &Path,
        spec: &RunSpec,
        status: &mut dyn FnMut(&str),
    ) -> Result<(String, Vec<String>)> {
        let uv = installed.uv;
        let scratch = Scratch::create(&self.layout.root().join("scratch"))?;
        let input = lockfile::requirements_in(&spec.dependencies)
            .map_err(|reason| Error::Prepare { code: 2, stderr: reason })?;
        let checked = scratch.dir("checked")?;
        std::fs::write(checked.join("requirements.in"), input)
            .map_err(Error::io("writing the requirements to resolve"))?;
        let io = scratch.dir("io")?;
        let python = dir.join("bin/python");
        let uv_pip = |verb: &str| -> Vec<OsString> {
            let mut argv: Vec<OsString> = vec![uv.into(), "pip".into(), verb.into()];
            argv.extend(["--quiet".into(), "--no-config".into(), "--python".into()]);
            argv.push(python.clone().into());
            argv
        };

        let mut resolve = uv_pip("compile");
        resolve.extend(["--generate-hashes".into(), "--no-header".into(), "--no-annotate".into()]);
        resolve.extend(["--output-file".into(), io.join("lock.txt").into()]);
        resolve.push(checked.join("requirements.in").into());
        status(&match spec.dependencies.len() {
            1 => "resolving 1 dependency".to_owned(),
            n => format!("resolving {n} dependencies"),
        });
        // Wheels only first: then no package code runs (no sdist is built for its metadata),
        // so the resolve may read and fill the shared cache: index pages and wheel metadata
        // already fetched are revalidated, not fetched again, and what it fetches the install
        // finds. uv picks the newest version that has a wheel for this interpreter.
        let mut wheels_only = resolve.clone();
        wheels_only.push("--no-build".into());
        let step = |cache: Cache, command: Vec<OsString>| Step {
            dir: &io,
            ro: vec![checked.clone(), dir.to_owned()],
            cache,
            python_dir_rw: false,
            net: true,
            command,
            extra_env: Vec::new(),
        };
        if self
            .run_prepare_step(uv, base, step(Cache::Shared, wheels_only), spec.tmpfs_size)
            .is_err()
        {
            // Some version needs a build (only an sdist, a git or path requirement), or the
            // list does not resolve at all: today's private path gives the answer, or the error.
            let _ = std::fs::remove_file(io.join("lock.txt"));
            let private = Cache::Private(scratch.dir("cache-resolve")?);
            self.run_prepare_step(uv, base, step(private, resolve), spec.tmpfs_size)?;
        }
        let lock = read_untrusted(&io.join("lock.txt"))?;
        let pinned = lockfile::parse(&lock).map_err(|e| Error::Prepare {
            code: 2,
            stderr: format!("the resolution is not a list of pinned requirements ({e})"),
        })?;
        let rendered = lockfile::render(&pinned);
        std::fs::write(checked.join("pinned.txt"), &rendered)
            .map_err(Error::io("writing the checked resolution"))?;
        let lock = crate::key::lock_key(&rendered, installed.identity, installed.uv_version);
        let pins: Vec<String> = pinned.iter().map(|p| p.requirement.clone()).collect();
        let packages = match pinned.len() {
            1 => "1 package".to_owned(),
            n => format!("{n} packages"),
        };
        if let Some((source, _hold)) = self.same_packages(&lock) {
            status(&format!("linking {packages} of an environment with the same versions"));
            std::fs::remove_dir_all(dir)
                .map_err(Error::io(format!("emptying {}", dir.display())))?;
            fsutil::create_dir_all(dir)?;
            fsutil::link_tree(&source, dir).map_err(Error::io(format!(
                "linking {} into {}",
                source.display(),
                dir.display()
            )))?;
            if let Some((uid, gid)) = self.host.run_as() {
                fsutil::hand_over(dir, uid, gid)?;
            }
            return Ok((lock, pins));
        }

        let mut install = uv_pip("install");
        install.extend(["--no-deps".into(), "-r".into(), checked.join("pinned.txt").into()]);
        let mut wheels_only = install.clone();
        wheels_only.extend(["--no-build".into(), "--require-hashes".into()]);
        let step = Step {
            ro: vec![checked.clone()],
            cache: Cache::Linked,
            ..Step::trusted(dir, wheels_only)
        };
        // One uv step downloads what its cache lacks and installs.
        status(&format!("downloading and installing {packages}"));
        if self.run_prepare_step(uv, base, step, spec.tmpfs_size).is_err() {
            status(&format!("building {packages} where only sources are published"));
            let step = Step {
                dir,
                ro: vec![checked.clone()],
                cache: Cache::Private(scratch.dir("cache-build")?),
                python_dir_rw: false,
                net: true,
                command: install,
                extra_env: Vec::new(),
            };
            self.run_prepare_step(uv, base, step, spec.tmpfs_size)?;
        }

        // Worker processes pay off for big trees only: for a few files their start costs
        // more than it saves (about 30 ms of a new `six`).
        let jobs = if sources_at_least(&dir.join("lib"), PARALLEL_COMPILE) { "0" } else { "1" };
        let compile: Vec<OsString> = vec![
            python.clone().into(),
            "-I".into(),
            "-S".into(),
            "-m".into(),
            "compileall".into(),
            "-q".into(),
            "-j".into(),
            jobs.into(),
            "-x".into(),
            NOT_COMPILED.into(),
            dir.join("lib").into(),
        ];
        let step = Step {
            dir,
            ro: Vec::new(),
            cache: Cache::None,
            python_dir_rw: false,
            net: false,
            command: compile,
            extra_env: Vec::new(),
        };
        // Bytecode is an optimization: files a package ships for other Python versions fail
        // to compile and are simply left to the interpreter.
        match self.run_prepare_step(uv, base, step, spec.tmpfs_size) {
            Err(Error::Prepare { .. }) | Ok(()) => Ok((lock, pins)),
            Err(e) => Err(e),
        }
    }

    /// A ready environment of `family` whose packages satisfy `dependencies` as they are (a
    /// list spelled anew, or a subset of what it has: `pep723_meta::satisfied_by`), held shared;
    /// the one with the fewest packages, so a script sees as few it did not ask for as can be.
    /// None when no list is given, or it needs a resolver (extras, markers, URLs).
    fn satisfying(&self, family: &str, dependencies: &[String]) -> Option<PreparedEnv> {
        if dependencies.is_empty() {
            return None;
        }
        let wanted = pep723_meta::Wanted::parse(dependencies)?;
        let envs = self.layout.envs_dir();
        let mut found: Vec<(usize, String)> = std::fs::read_dir(&envs)
            .ok()?
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                let key = name.strip_suffix(".json")?.to_owned();
                let marker = Marker::read(&envs.join(&name))?;
                let fits = marker.family.as_deref() == Some(family)
                    && wanted.satisfied_by(&marker.pins) == Some(true);
                fits.then_some((marker.pins.len(), key))
            })
            .collect();
        found.sort();
        found.into_iter().find_map(|(_, key)| {
            let lock = self.layout.locks_dir().join(format!("{key}.lock"));
            let hold = Lease::try_shared(&lock).ok()??;
            let marker_path = envs.join(format!("{key}.json"));
            // As quiet as a warm run: it is one.
            self.ready(&key, &envs.join(&key), &marker_path, &hold)
        })
    }

    /// The ready environment the lock index names for `lock`, held shared so it is not pruned
    /// while its files are linked; none when it is gone, changed, or being built or pruned.
    fn same_packages(&self, lock: &str) -> Option<(PathBuf, Lease)> {
        let key = std::fs::read_to_string(self.layout.by_lock(lock)).ok()?;
        let key = key.trim();
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let hold =
            Lease::try_shared(&self.layout.locks_dir().join(format!("{key}.lock"))).ok()??;
        let envs = self.layout.envs_dir();
        let marker = Marker::read(&envs.join(format!("{key}.json")))?;
        let dir = envs.join(key);
        let whole = std::fs::symlink_metadata(dir.join("bin/python")).is_ok();
        (marker.lock.as_deref() == Some(lock) && marker.is_current() && whole)
            .then_some((dir, hold))
    }

    fn run_prepare_step(
        &self,
        uv: &Path,
        base: Base<'_>,
        step: Step<'_>,
        tmpfs_size: u64,
    ) -> Result<()> {
        let cache = match &step.cache {
            Cache::Shared | Cache::Linked => Some(self.layout.uv_cache()),
            Cache::Private(dir) => Some(dir.clone()),
            Cache::None => None,
        };
        // A prune removes packages from the shared cache only while no step installs from it.
        let _store = match &step.cache {
            Cache::Shared | Cache::Linked => {
                fsutil::create_dir_all(&self.layout.locks_dir())?;
                crate::envs::lock_store(&self.layout.store_lock())?
            }
            Cache::Private(_) | Cache::None => None,
        };
        let mut links = Vec::new();
        let mut extra_env = step.extra_env;
        let (mut rw_dirs, moved) = if matches!(step.cache, Cache::Linked) {
            // The store is one mount holding the cache and the environment; the environment
            // is still seen at its own path, through a link.
            let moved = Moved::into_store(step.dir, &self.layout)?;
            links.push((PathBuf::from(plan::SANDBOX_ENV), moved.building.clone()));
            extra_env.push(("UV_LINK_MODE".to_owned(), OsString::from("hardlink")));
            (vec![self.layout.store()], Some(moved))
        } else {
            let mut rw: Vec<PathBuf> = cache.iter().cloned().collect();
            rw.push(step.dir.to_owned());
            (rw, None)
        };
        let mut ro_dirs = base.prefixes.to_vec();
        ro_dirs.extend(step.ro.iter().cloned());
        // The environment being built is seen where runs see it (its `pyvenv.cfg`, links and
        // entry points name that path).
        let envs = self.layout.envs_dir();
        let env = std::iter::once(step.dir)
            .chain(step.ro.iter().map(PathBuf::as_path))
            .find(|d| d.starts_with(&envs));
        let relocation = self.relocation(env, base, Some(uv))?;
        if step.python_dir_rw {
            rw_dirs.push(self.layout.python_dir());
        }
        if let Some((uid, gid)) = self.host.run_as() {
            // The prepare sandbox writes these as nobody; nothing else on the host can reach
            // them (the cache root is 0700, see `new`). In the store, only what uv writes: the
            // store itself stays the caller's, like every directory of the cache root.
            let written = match &moved {
                Some(moved) => vec![self.layout.uv_cache(), moved.building.clone()],
                None => rw_dirs.clone(),
            };
            for rw in &written {
                fsutil::hand_over(rw, uid, gid)?;
            }
        }
        let layout = PrepareLayout {
            uv: uv.to_owned(),
            ro_dirs,
            rw_dirs,
            // Nothing to cache in: uv is not run, and a stray one finds an empty tmpfs.
            uv_cache: cache.unwrap_or_else(|| PathBuf::from("/tmp/uv-cache")),
            python_install_dir: self.layout.python_dir(),
            chdir: step.dir.to_owned(),
            command: step.command,
            extra_env,
            tmpfs_size,
            net: step.net,
            relocation,
            links,
        };
        let plan = plan::prepare_plan(&self.host, &layout, None);
        let ran = self.run_prepare_plan(&plan);
        match moved {
            Some(moved) => moved.back().and(ran),
            None => ran,
        }
    }

    fn run_prepare_plan(&self, plan: &plan::Plan) -> Result<()> {
        let mut output = Vec::new();
        // uv reaches for the index as soon as it has read its arguments.
        let launch = process::Launch { net_early: plan.net, ..self.launch() };
        let finished = process::execute(
            launch,
            plan,
            &Stdin::Null,
            Outputs::Collect(&mut output),
            None,
            self.signals(false),
            None,
            None,
            None,
        )?;
        let text = String::from_utf8_lossy(&output).trim_end().to_owned();
        if !finished.started {
            let reason = match self.launcher.setup_failure(finished.setup_error) {
                Error::SandboxSetup { reason } => reason,
                other => other.to_string(),
            };
            return Err(Error::Prepare {
                code: finished.exit_code,
                stderr: format!("{text}\n{reason}"),
            });
        }
        if finished.exit_code != 0 {
            return Err(Error::Prepare { code: finished.exit_code, stderr: text });
        }
        Ok(())
    }

    /// The canonical, classified workspace and mounts of `spec`, and its `--env` values.
    pub(crate) fn resolve_for_session(&self, spec: &RunSpec) -> Result<Resolved> {
        let cache_root = self.layout.root();
        let home = &self.host.home;
        let workspace = paths::resolve_workspace(&spec.workspace, home, cache_root)?;
        let mounts = spec
            .mounts
            .iter()
            .map(|m| paths::resolve_mount(m, home, cache_root))
            .collect::<Result<Vec<_>>>()?;
        let user_env = spec
            .env
            .iter()
            .filter_map(|v| v.value.as_ref().map(|value| (v.name.clone(), value.clone())))
            .collect();
        Ok((workspace, mounts, user_env))
    }

    /// A root caller's sandbox runs as nobody: the directories it may write are mounted
    /// idmapped where the filesystem allows (root's files appear as the sandbox's, its writes
    /// land as root's: nothing to lend or give back, and files that already exist stay
    /// writable too, which an ACL on directories cannot give); else they are lent with one ACL
    /// entry, given back exactly as it was by the returned grant. Returns the idmapped
    /// directories for [`plan::Plan::idmapped`].
    pub(crate) fn lend_writable(
        &self,
        workspace: &Path,
        mounts: &[plan::Bind],
    ) -> Result<(Vec<PathBuf>, Option<reaper::acl::Grant>)> {
        let Some((uid, _)) = self.host.run_as() else { return Ok((Vec::new(), None)) };
        let writable = writable_dirs(workspace, mounts);
        if writable.iter().all(|d| crate::stage::idmap_supported(d)) {
            return Ok((writable, None));
        }
        let dirs: Vec<&Path> = writable.iter().map(PathBuf::as_path).collect();
        let state = reaper::acl::state_dir(&self.config.cache_dir);
        Ok((Vec::new(), Some(reaper::acl::Grant::take(&dirs, uid, &state)?)))
    }

    /// Makes the protected paths of the workspace and the read-write directory mounts
    /// read-only (`engine_detect::protect`): the placeholders to release (or hold) once the
    /// sandbox is gone, and every path to mount read-only over itself.
    pub(crate) fn protect(
        &self,
        workspace: &Path,
        mounts: &[plan::Bind],
    ) -> Result<(reaper::protect::Placeholders, Vec<PathBuf>)> {
        use engine_detect::protect::{protect, writable_trees};
        let mounts: Vec<(PathBuf, bool)> =
            mounts.iter().map(|m| (m.src.clone(), m.access == plan::Access::ReadWrite)).collect();
        let trees = writable_trees(workspace, &mounts, &self.host.home);
        // The cache root every engine shares, so runs of different engines in one workspace
        // share the protocol (as `reaper::acl`'s grants do).
        let state = reaper::protect::state_dir(&self.config.cache_dir);
        Ok(protect(&trees, &state)?)
    }

    /// Where a sandbox sees the environment `env`, the interpreter of `base` and `uv`
    /// (`plan::Relocation`), with the interpreter's own site-packages covered by an empty
    /// directory of the cache.
    pub(crate) fn relocation(
        &self,
        env: Option<&Path>,
        base: Base<'_>,
        uv: Option<&Path>,
    ) -> Result<plan::Relocation> {
        let empty = self.layout.root().join("empty");
        let mut masks = Vec::new();
        for prefix in base.prefixes {
            let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else { continue };
            for entry in entries.flatten() {
                let site = entry.path().join("site-packages");
                let versioned = entry.file_name().to_str().is_some_and(|n| n.starts_with("python"));
                if versioned && site.is_dir() {
                    masks.push((empty.clone(), site));
                }
            }
        }
        if !masks.is_empty() && !empty.is_dir() {
            fsutil::create_dir_all(&empty)?;
            // Shown in place of a site-packages: an empty directory the sandbox user may list.
            std::fs::set_permissions(&empty, std::os::unix::fs::PermissionsExt::from_mode(0o555))
                .map_err(Error::io(format!("making {} readable", empty.display())))?;
        }
        Ok(plan::Relocation::new(env, base.prefixes, uv, masks, base.library_path))
    }

    /// uv and the base environment (no dependencies) of a session: its interpreter is the
    /// session's, found or installed exactly as for a run.
    pub(crate) fn session_tools(
        &self,
        spec: &RunSpec,
        status: &mut dyn FnMut(&str),
    ) -> Result<(PathBuf, PreparedEnv)> {
        let base = self.prepare(spec, status)?;
        let location = self.uv_location()?;
        let uv = uv::materialize(&location, &self.tools, status)?;
        Ok((uv.path, base))
    }

    pub(crate) fn host(&self) -> &HostFacts {
        &self.host
    }

    /// Explains a failed setup (see [`Launcher::setup_failure`]).
    pub(crate) fn setup_failure(&self, detail: Option<String>) -> Error {
        self.launcher.setup_failure(detail)
    }

    /// Starts a session's sandbox (`plan.die_with_parent` off: it outlives this process), its
    /// stdio `/dev/null`; its network holding `listed` when given.
    pub(crate) fn start_detached(
        &self,
        plan: &plan::Plan,
        listed: Option<&sandbox_net::Listed>,
    ) -> Result<Box<dyn crate::Sandboxed>> {
        let null = || -> Result<std::os::fd::OwnedFd> {
            let file = std::fs::File::open("/dev/null").map_err(Error::io("opening /dev/null"))?;
            Ok(file.into())
        };
        let launch = process::Launch { listed, ..self.launch() };
        self.launcher.start(crate::launcher::Start {
            plan,
            host: launch.host,
            cache_root: launch.cache_root,
            pasta: launch.pasta(),
            relay: launch.relay,
            lan: launch.lan,
            listed,
            net_early: false,
            stdio: crate::SandboxStdio {
                stdin: Some(null()?),
                stdout: Some(null()?),
                stderr: Some(null()?),
            },
        })
    }

    fn launch(&self) -> process::Launch<'_> {
        process::Launch {
            launcher: &*self.launcher,
            host: &self.host,
            cache_root: self.layout.root(),
            pasta: self.pasta.as_deref(),
            relay: self.config.builtin_relay,
            lan: self.config.lan,
            listed: None,
            net_early: false,
        }
    }

    fn signals(&self, interactive: bool) -> Signals {
        if self.config.handle_signals { Signals::Handle { interactive } } else { Signals::Ignore }
    }

    /// Runs `uv python find` on the host (cwd and config neutral, so nothing in the workspace
    /// can steer it), then asks that interpreter for its real executable and prefixes.
    fn find_interpreter(
        &self,
        uv: &Path,
        request: Option<&str>,
        managed_dir: Option<&Path>,
    ) -> Result<Interpreter> {
        let request_text = request.unwrap_or("any python").to_owned();
        let not_found =
            |message: String| Error::PythonNotFound { request: request_text.clone(), message };
        let mut find = self.host_command(uv);
        find.env("PATH", discovery_path(self.config.path.as_deref()));
        find.args(["python", "find", "--no-project", "--no-config"]);
        find.env("UV_PYTHON_DOWNLOADS", "never");
        if let Some(dir) = managed_dir {
            find.env("UV_PYTHON_INSTALL_DIR", dir);
        }
        if let Some(request) = request {
            find.arg(request);
        }
        let found = capture(&mut find).map_err(|e| not_found(e.to_string()))?;
        let found = found.map_err(not_found)?;
        let python = PathBuf::from(found.trim());

        const QUERY: &str = "import sys\nprint(sys.executable)\nprint(sys.base_prefix)\nprint(sys.base_exec_prefix)\nprint('%d.%d.%d' % sys.version_info[:3])\nprint(sys.implementation.name)\nprint('abiflags=' + getattr(sys, 'abiflags', ''))";
        const LINES: usize = 6;
        // The answer depends on the binary alone: kept per identity of the file uv found
        // (path, size, mtime, inode), it saves starting Python on every new environment.
        let answers = self.layout.interpreters_dir();
        let answer = fsutil::identity(&python)
            .map(|id| answers.join(&fsutil::sha256_hex(id.as_bytes())[..32]));
        let cached = answer.as_deref().and_then(|path| std::fs::read_to_string(path).ok());
        let out = match cached {
            Some(out) if out.lines().count() == LINES => out,
            _ => {
                let mut query = self.host_command(&python);
                query.args(["-I", "-S", "-c", QUERY]);
                let out = capture(&mut query)
                    .map_err(|e| not_found(e.to_string()))?
                    .map_err(not_found)?;
                if let Some(path) = &answer
                    && out.lines().count() == LINES
                    && fsutil::create_dir_all(&answers).is_ok()
                {
                    // Best effort: without it the next prepare asks again.
                    let _ = fsutil::write_atomic(path, out.as_bytes());
                }
                out
            }
        };
        let lines: Vec<&str> = out.lines().collect();
        let [executable, prefix, exec_prefix, version, implementation, abiflags] = lines.as_slice()
        else {
            return Err(not_found(format!("unexpected answer from {}: {out:?}", python.display())));
        };
        let executable = std::fs::canonicalize(executable)
            .map_err(|_| not_found(format!("{executable} does not exist")))?;
        let mut prefixes: Vec<PathBuf> = Vec::new();
        for prefix in [prefix, exec_prefix] {
            let real = std::fs::canonicalize(prefix).unwrap_or_else(|_| PathBuf::from(prefix));
            let exposes = real.parent().is_none()
                || self.host.home.starts_with(&real)
                || self.layout.root().starts_with(&real);
            if exposes {
                return Err(Error::UnsafeInterpreterPrefix { python: executable, prefix: real });
            }
            if !prefixes.contains(&real) {
                prefixes.push(real);
            }
        }
        // The executable may be a symlink into another tree (e.g. a pyenv shim target).
        if let Some(bin_parent) = executable.parent().and_then(Path::parent)
            && !prefixes.iter().any(|p| executable.starts_with(p))
        {
            prefixes.push(bin_parent.to_owned());
        }
        let library_path = needs_library_path(&executable, &prefixes);
        Ok(Interpreter {
            executable,
            prefixes,
            version: (*version).to_owned(),
            implementation: (*implementation).to_owned(),
            abiflags: abiflags.strip_prefix("abiflags=").unwrap_or_default().to_owned(),
            library_path,
        })
    }

    fn host_command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        command.env_clear().current_dir(self.layout.root()).stdin(Stdio::null());
        if let Some(path) = &self.config.path {
            command.env("PATH", path);
        }
        command.env("HOME", &self.config.home);
        // uv run on the host (`uv python find`) keeps its cache in ours, never in `~/.cache/uv`.
        command.env("UV_CACHE_DIR", self.layout.uv_cache());
        command
    }

    /// Checks what `run` would refuse, and returns the warnings it would report.
    pub fn check(&self, spec: &RunSpec) -> Result<Vec<String>> {
        let warnings = Vec::new();
        if let Some(first) = spec.publish.first()
            && spec.net == Net::Off
        {
            return Err(Error::PublishWithoutNet { port: first.port });
        }
        sandbox_core::check_host_ports_free(&spec.publish, reaper::ports::in_use)?;
        // A cold prepare needs the network too; it fails with the same error when it starts.
        if spec.net == Net::On
            && let Err(no) = &self.pasta
        {
            if !self.launcher.builtin_net() {
                return Err(Error::PastaNotFound { why: no.why(), hint: no.hint() });
            }
            // The relay carries published ports in; the proxy cannot.
            let relay = self.config.builtin_relay && sandbox_net::relay_available();
            if !spec.publish.is_empty() && !relay {
                return Err(Error::needs_pasta("publishing a port", no));
            }
        }
        for var in &spec.env {
            let valid = !var.name.is_empty() && !var.name.contains(['=', '\0']);
            if !valid {
                return Err(Error::InvalidEnvName { name: var.name.clone() });
            }
            if var.value.is_none() {
                return Err(Error::EnvWithoutValue { name: var.name.clone() });
            }
        }
        limits_for(spec)?;
        Ok(warnings)
    }

    /// Runs `spec` in a prepared environment. Returns once the whole process tree is gone.
    /// A script that fails is not an error; a sandbox that cannot be set up is.
    pub fn run_prepared(
        &self,
        spec: &RunSpec,
        env: &PreparedEnv,
        io: RunIo<'_>,
    ) -> Result<RunOutcome> {
        let warnings = self.check(spec)?;
        // Before anything is lent: a limit that cannot be held stops the run here.
        let limits = limits_for(spec)?;
        let (workspace, mounts, user_env) = self.resolve_for_session(spec)?;
        let script = paths::resolve_script(&spec.script)?;
        // Keeping the caller's session (job control, window size) is only safe when the kernel
        // refuses TIOCSTI; otherwise the script could type commands into the caller's shell.
        let interactive = io.stdin == Stdin::Inherit
            && crate::host::stdin_is_tty()
            && crate::host::tiocsti_blocked();
        let (mut placeholders, protected) = self.protect(&workspace, &mounts)?;
        let layout = RunLayout {
            env_dir: env.dir.clone(),
            ro_dirs: env.prefixes.clone(),
            workspace,
            script,
            args: spec.args.clone(),
            mounts,
            protected,
            net: spec.net == Net::On,
            user_env,
            interactive,
            tmpfs_size: spec.tmpfs_size,
            publish: pick_host_ports(&spec.publish)?,
            relocation: self.relocation(
                Some(&env.dir),
                Base { prefixes: &env.prefixes, library_path: env.library_path },
                None,
            )?,
        };
        let writable = writable_dirs(&layout.workspace, &layout.mounts);
        let (idmapped, grant) = self.lend_writable(&layout.workspace, &layout.mounts)?;
        let grant = grant.map(|g| (self.host.run_as().map_or(0, |(uid, _)| uid), g));
        let mut plan = plan::run_plan(&self.host, &layout, None);
        plan.limits = limits;
        plan.idmapped = idmapped;
        let outputs = match io.output {
            Output::Inherit => Outputs::Inherit,
            Output::Sink(sink) => Outputs::Sink(sink),
            Output::Merged(sink) => Outputs::Merged(sink),
        };
        // The allowlist's hold, shared with the relay: what it refused goes in the outcome.
        let listed = spec.allow.clone().map(sandbox_net::Listed::new);
        let launch = process::Launch { listed: listed.as_ref(), ..self.launch() };
        let finished = process::execute(
            launch,
            &plan,
            &io.stdin,
            outputs,
            spec.timeout,
            self.signals(interactive),
            io.published,
            io.started,
            Some(&mut placeholders),
        );
        if let Some((uid, grant)) = grant {
            // What the sandbox created is the caller's, as with a non-root caller's run.
            for dir in &writable {
                reaper::acl::reclaim(dir, uid);
            }
            grant.release()?;
        }
        placeholders.release()?;
        let finished = finished?;
        if !finished.started && !finished.timed_out {
            return Err(self.launcher.setup_failure(finished.setup_error));
        }
        Ok(RunOutcome {
            exit_code: finished.exit_code,
            duration: finished.duration,
            timed_out: finished.timed_out,
            warnings,
            net_refused: listed.map(|l| l.refused()).unwrap_or_default(),
        })
    }
}

/// The host side of each published port: pasta takes no "any", so `0:PORT` gets a port picked
/// here (bound and released: racy, see `reaper::ports::Picker`; a port taken in between fails
/// pasta's bind, which `sandbox_net::UserNet` reports as the busy port it is).
pub(crate) fn pick_host_ports(
    publish: &[sandbox_core::Publish],
) -> Result<Vec<sandbox_core::PublishedPort>> {
    let mut picker = reaper::ports::Picker::default();
    Ok(sandbox_core::choose_host_ports(publish, |addr| picker.pick(addr))?)
}

/// A spec's canonical workspace, its classified mounts and its `--env` values.
pub(crate) type Resolved = (PathBuf, Vec<plan::Bind>, Vec<(String, String)>);

/// The workspace and the read-write directory mounts: what a sandbox may write.
fn writable_dirs(workspace: &Path, mounts: &[plan::Bind]) -> Vec<PathBuf> {
    std::iter::once(workspace.to_owned())
        .chain(
            mounts
                .iter()
                .filter(|m| m.access == plan::Access::ReadWrite && m.src.is_dir())
                .map(|m| m.src.clone()),
        )
        .collect()
}

impl Engine for BwrapEngine {
    type Error = Error;
    type Prepared = PreparedEnv;

    fn name(&self) -> &'static str {
        self.launcher.name()
    }

    fn capability(&self) -> sandbox_core::Capability {
        // What `crate::limits::decide` can hold here: a delegated cgroup v2, else rlimits.
        let limits = engine_detect::bwrap_limits().support;
        sandbox_core::Capability {
            sessions: true,
            host_mounts: true,
            publish: true,
            memory_limit: limits.memory.is_some(),
            cpu_limit: limits.cpus.is_some(),
            pids_limit: limits.pids.is_some(),
            pty: true,
            seccomp_wall: true,
            preview_urls: false,
        }
    }

    fn check(&self, spec: &RunSpec) -> Result<Vec<String>, Error> {
        BwrapEngine::check(self, spec)
    }

    fn prepare(&self, spec: &RunSpec, status: &mut dyn FnMut(&str)) -> Result<PreparedEnv, Error> {
        BwrapEngine::prepare(self, spec, status)
    }

    fn run_prepared(
        &self,
        spec: &RunSpec,
        prepared: &PreparedEnv,
        io: RunIo<'_>,
    ) -> Result<RunOutcome, Error> {
        BwrapEngine::run_prepared(self, spec, prepared, io)
    }
}

/// The chosen interpreter.
struct Interpreter {
    executable: PathBuf,
    prefixes: Vec<PathBuf>,
    version: String,
    /// `sys.implementation.name`.
    implementation: String,
    /// `sys.abiflags`.
    abiflags: String,
    /// See [`PreparedEnv::library_path`].
    library_path: bool,
}

impl Interpreter {
    fn base(&self) -> Base<'_> {
        Base { prefixes: &self.prefixes, library_path: self.library_path }
    }
}

/// What a sandbox must show of the base interpreter: its prefixes, and whether it needs its
/// library directory on the loader's path once they are relocated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Base<'a> {
    pub(crate) prefixes: &'a [PathBuf],
    pub(crate) library_path: bool,
}

impl Base<'_> {
    /// No interpreter (`uv python install`).
    const NONE: Base<'static> = Base { prefixes: &[], library_path: false };
}

/// Whether the executable at `python` names `<prefix>/lib` in its run path (read as bytes: an
/// absolute `RPATH`/`RUNPATH` is a string in its dynamic section; `$ORIGIN/../lib`, the
/// relocatable form, is not a match). Executables larger than 64 MiB (a static build, which
/// loads no library) are not read.
fn needs_library_path(python: &Path, prefixes: &[PathBuf]) -> bool {
    let small = std::fs::metadata(python).is_ok_and(|m| m.len() <= 64 << 20);
    let Some(bytes) = small.then(|| std::fs::read(python).ok()).flatten() else { return false };
    prefixes.iter().any(|prefix| {
        let lib = prefix.join("lib");
        let needle = lib.as_os_str().as_encoded_bytes();
        bytes.windows(needle.len()).any(|w| w == needle)
    })
}

/// Runs a host command; `Ok(Err(stderr))` when it ran and failed.
/// How this host holds the spec's limits and the defaults under bwrap, or the refusal.
pub(crate) fn limits_for(spec: &RunSpec) -> Result<crate::limits::SandboxLimits> {
    crate::limits::decide(&spec.limits, &engine_detect::bwrap_limits())
}

fn capture(command: &mut Command) -> std::io::Result<std::result::Result<String, String>> {
    let guard = sandbox_net::spawn_guard();
    let out = command.stdout(Stdio::piped()).stderr(Stdio::piped()).output();
    drop(guard);
    let out = out?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    Ok(if out.status.success() { Ok(stdout) } else { Err(stderr) })
}

/// uv and what a set of installed packages is tied to (`key::lock_key`).
#[derive(Clone, Copy)]
struct Installed<'a> {
    uv: &'a Path,
    uv_version: &'a str,
    identity: &'a str,
}

/// Which uv cache a prepare step gets (see `BwrapEngine::install_dependencies`).
enum Cache {
    /// The shared one: only for steps in which nothing but uv runs.
    Shared,
    /// The shared one, with the environment moved into the package store for the step, so uv
    /// hard-links files from its cache instead of copying them (`CacheLayout::store`). Only
    /// uv ever writes that cache, and it never rewrites a file in place: a linked file of an
    /// environment stays what uv checked.
    Linked,
    /// One of its own, removed with the prepare's scratch directory.
    Private(PathBuf),
    /// None at all.
    None,
}

/// An environment moved into the package store for one step (`Cache::Linked`), and moved back
/// when the step ends, however it ends. Only under the environment's exclusive lock.
struct Moved {
    home: PathBuf,
    building: PathBuf,
    back: bool,
}

impl Moved {
    fn into_store(dir: &Path, layout: &CacheLayout) -> Result<Moved> {
        let key = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let building = layout.building(key);
        // What an interrupted install of this key left (its lock is ours now).
        if std::fs::symlink_metadata(&building).is_ok() {
            std::fs::remove_dir_all(&building)
                .map_err(Error::io(format!("removing {}", building.display())))?;
        }
        if let Some(parent) = building.parent() {
            fsutil::create_dir_all(parent)?;
            // A root caller's step runs as nobody and must pass through both to reach what it
            // writes; listing them is not needed, and the cache root (0700) keeps out the rest.
            for dir in [parent, &layout.store()] {
                std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o711))
                    .map_err(Error::io(format!("opening {} to the prepare", dir.display())))?;
            }
        }
        std::fs::rename(dir, &building)
            .map_err(Error::io(format!("moving {} into the package store", dir.display())))?;
        Ok(Moved { home: dir.to_owned(), building, back: false })
    }

    fn back(mut self) -> Result<()> {
        self.back = true;
        std::fs::rename(&self.building, &self.home)
            .map_err(Error::io(format!("moving {} back", self.home.display())))
    }
}

impl Drop for Moved {
    fn drop(&mut self) {
        if !self.back {
            let _ = std::fs::rename(&self.building, &self.home);
        }
    }
}

/// One sandboxed prepare step: what it writes and runs.
struct Step<'a> {
    /// Writable, and its working directory.
    dir: &'a Path,
    /// More read-only directories.
    ro: Vec<PathBuf>,
    cache: Cache,
    /// The managed-Python directory writable (`uv python install` only).
    python_dir_rw: bool,
    net: bool,
    command: Vec<OsString>,
    extra_env: Vec<(String, OsString)>,
}

impl<'a> Step<'a> {
    /// A step in which only uv runs, writing `dir` and the shared cache.
    fn trusted(dir: &'a Path, command: Vec<OsString>) -> Step<'a> {
        Step {
            dir,
            ro: Vec::new(),
            cache: Cache::Shared,
            python_dir_rw: false,
            net: true,
            command,
            extra_env: Vec::new(),
        }
    }
}

/// How many Python sources make compiling them in worker processes worth their start.
const PARALLEL_COMPILE: usize = 200;

/// Whether the tree `dir` holds at least `n` `.py` files (never following a link).
fn sources_at_least(dir: &Path, n: usize) -> bool {
    let mut found = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(current) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else { continue };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file() && entry.file_name().as_encoded_bytes().ends_with(b".py") {
                found += 1;
                if found >= n {
                    return true;
                }
            }
        }
    }
    false
}

/// A prepare's scratch directory under the cache root, removed (never following links the
/// sandbox planted in it) when the prepare ends, however it ends.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn create(parent: &Path) -> Result<Scratch> {
        fsutil::create_dir_all(parent)?;
        let root = parent.join(fsutil::unique_suffix());
        fsutil::create_dir_all(&root)?;
        Ok(Scratch { root })
    }

    /// A subdirectory, created on first use.
    fn dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.root.join(name);
        fsutil::create_dir_all(&dir)?;
        // Readable by the sandbox user, who may be another uid than ours (a root caller's).
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(Error::io(format!("preparing {}", dir.display())))?;
        Ok(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A file a sandbox could write: opened without following a link, at most 4 MiB.
fn read_untrusted(path: &Path) -> Result<String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let what = || format!("reading {}", path.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(Error::io(what()))?;
    let mut text = String::new();
    file.take(4 << 20).read_to_string(&mut text).map_err(Error::io(what()))?;
    Ok(text)
}

/// The system's own interpreter directories, searched after the caller's `PATH`.
const SYSTEM_BIN_DIRS: [&str; 3] = ["/usr/local/bin", "/usr/bin", "/bin"];

/// Pure: where `uv python find` looks for an interpreter: the caller's `PATH`, then the
/// system's own directories, so a caller started with a bare `PATH` (a service, an agent's
/// sanitized environment, a shell with nothing on it) still finds `/usr/bin/python3` instead
/// of having a Python downloaded.
pub(crate) fn discovery_path(path: Option<&std::ffi::OsStr>) -> OsString {
    let mut dirs: Vec<PathBuf> =
        path.map(|p| std::env::split_paths(p).collect()).unwrap_or_default();
    for dir in SYSTEM_BIN_DIRS {
        if !dirs.iter().any(|d| d == Path::new(dir)) {
            dirs.push(PathBuf::from(dir));
        }
    }
    std::env::join_paths(dirs.iter().filter(|d| !d.as_os_str().is_empty()))
        .unwrap_or_else(|_| OsString::from(SYSTEM_BIN_DIRS.join(":")))
}
