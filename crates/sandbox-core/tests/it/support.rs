//! Shared test helpers: a compact layer notation for tables, a spec renderer for
//! snapshots, and `block_on` for the always-ready futures of the fake sandbox.

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use sandbox_core::{EnvVar, Error, Layer, MountMode, Net, Publish, ResolveCtx, RunSpec};

/// Parses `key=value & key=value` into a [`Layer`]. List values are separated by `|`:
/// `script=s.py & args=a b & deps=requests>=2|numpy & py=>=3.11 & mounts=/d:ro|./out &
/// net=off & publish=8000|127.0.0.1:9000 & env=A=1|B & timeout=30`.
pub(crate) fn layer(notation: &str) -> Layer {
    let mut layer = Layer::default();
    for field in notation.split('&').map(str::trim).filter(|field| !field.is_empty()) {
        let (key, value) = field.split_once('=').unwrap_or_else(|| panic!("bad field `{field}`"));
        let items = || value.split('|').map(str::trim).filter(|item| !item.is_empty());
        match key.trim() {
            "script" => layer.script = Some(PathBuf::from(value)),
            "args" => layer.args = Some(value.split_whitespace().map(str::to_owned).collect()),
            "deps" => layer.dependencies = items().map(str::to_owned).collect(),
            "py" => layer.requires_python = Some(value.to_owned()),
            "mounts" => layer.mounts = items().map(|item| item.parse().expect("mount")).collect(),
            "net" if value == "on" || value == "off" => {
                layer.net = Some(value.parse().expect("net"));
            }
            // A list, `|`-separated: `net=pypi.org|*.example.com:443`.
            "net" => layer.allow = Some(sandbox_core::Allow::parse(items()).expect("list")),
            "publish" => {
                // Port 0 must reach `resolve`, which owns that error.
                layer.publish = items()
                    .map(|item| match item {
                        "0" => Publish::same(0),
                        _ => item.parse().expect("publish"),
                    })
                    .collect()
            }
            "env" => layer.env = items().map(env).collect(),
            "timeout" => {
                layer.timeout = Some(Duration::from_secs(value.parse().expect("timeout secs")))
            }
            // Raw numbers, so values out of range reach `resolve`, which checks every layer.
            // `none` turns the limit off.
            "memory" => {
                layer.limits.memory =
                    Some(setting(value, |v| sandbox_core::parse_size(v).expect("size")))
            }
            "cpus" => {
                layer.limits.cpus =
                    Some(setting(value, |v| sandbox_core::parse_cpus(v).expect("cpus")))
            }
            "pids" => layer.limits.pids = Some(setting(value, |v| v.parse().expect("pids"))),
            other => panic!("unknown key `{other}`"),
        }
    }
    layer
}

/// `none`, or what `parse` makes of `value`.
fn setting<T>(value: &str, parse: impl Fn(&str) -> T) -> sandbox_core::LimitSetting<T> {
    match value {
        sandbox_core::NO_LIMIT => sandbox_core::LimitSetting::Off,
        _ => sandbox_core::LimitSetting::Set(parse(value)),
    }
}

/// `NAME[=VALUE]` without validation, so invalid names reach `resolve`.
fn env(item: &str) -> EnvVar {
    match item.split_once('=') {
        Some((name, value)) => EnvVar { name: name.to_owned(), value: Some(value.to_owned()) },
        None => EnvVar { name: item.to_owned(), value: None },
    }
}

/// The context every table uses: workspace `/ws`, home `/home/me`.
pub(crate) fn ctx() -> ResolveCtx {
    ResolveCtx { workspace: PathBuf::from("/ws"), home: Some(PathBuf::from("/home/me")) }
}

/// One line per field, stable and diff-friendly.
pub(crate) fn render_spec(spec: &RunSpec) -> String {
    let list = |items: Vec<String>| format!("[{}]", items.join(", "));
    let mounts = spec
        .mounts
        .iter()
        .map(|mount| {
            let mode = if mount.mode == MountMode::ReadOnly { "ro" } else { "rw" };
            format!("{}:{mode}", mount.path.display())
        })
        .collect();
    let publish = spec.publish.iter().map(ToString::to_string).collect();
    let env = spec
        .env
        .iter()
        .map(|var| match &var.value {
            Some(value) => format!("{}={value}", var.name),
            None => var.name.clone(),
        })
        .collect();
    [
        format!("script: {}", spec.script.display()),
        format!("args: {}", list(spec.args.clone())),
        format!("dependencies: {}", list(spec.dependencies.clone())),
        format!("requires-python: {}", spec.requires_python.as_deref().unwrap_or("-")),
        format!("mounts: {}", list(mounts)),
        match &spec.allow {
            Some(allow) if allow.opens_private() => format!("net: [{allow}] (opens private)"),
            Some(allow) => format!("net: [{allow}]"),
            None => format!("net: {}", if spec.net == Net::Off { "off" } else { "on" }),
        },
        format!("publish: {}", list(publish)),
        format!("env: {}", list(env)),
        format!(
            "timeout: {}",
            spec.timeout.map_or("-".to_owned(), |t| format!("{}s", t.as_secs()))
        ),
        format!("workspace: {}", spec.workspace.display()),
    ]
    .into_iter()
    .chain((spec.limits != sandbox_core::Limits::NONE).then(|| {
        let l = &spec.limits;
        let show = |v: Option<String>, off: bool| {
            v.unwrap_or_else(|| if off { "none" } else { "-" }.to_owned())
        };
        format!(
            "limits: memory {} cpus {} pids {}",
            show(l.memory.map(|m| m.to_string()), l.off.memory),
            show(l.cpus.map(|c| c.to_string()), l.off.cpus),
            show(l.pids.map(|p| p.to_string()), l.off.pids)
        )
    }))
    .collect::<Vec<_>>()
    .join("\n")
}

/// Renders a resolution result: the spec, or the error's message.
pub(crate) fn render_result(result: &Result<RunSpec, Error>) -> String {
    match result {
        Ok(spec) => render_spec(spec),
        Err(error) => format!("error: {error}"),
    }
}

/// Drives a future to completion on this thread. Only for futures that make progress on
/// every poll (the fake sandbox's are ready at once); a real engine needs a real runtime.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
    }
}
