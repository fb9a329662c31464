//! The precedence law `cli > inline > defaults`: a table of cases rendered into one snapshot,
//! then proptest properties over generated layers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use proptest::prelude::*;
use sandbox_core::{
    Cpus, EnvVar, Layer, LayerLimits, LayerMount, LimitSetting, MountMode, Net, Publish,
    ResolveCtx, RunSpec, resolve,
};

use crate::support::{ctx, layer, render_result};

/// (name, defaults, inline, cli)
const CASES: &[(&str, &str, &str, &str)] = &[
    ("script only: net defaults to on", "", "", "script=s.py"),
    ("no script anywhere", "net=off", "deps=requests", ""),
    ("script from inline is used when cli has none", "", "script=s.py", ""),
    ("cli script wins", "", "script=a.py", "script=b.py"),
    ("script path is normalized against the workspace", "", "", "script=sub/../s.py"),
    ("net: defaults off, nothing else", "net=off", "", "script=s.py"),
    ("net: inline on beats defaults off", "net=off", "net=on", "script=s.py"),
    ("net: cli on beats inline off", "", "net=off", "script=s.py & net=on"),
    ("net: cli off beats inline on", "net=on", "net=on", "script=s.py & net=off"),
    (
        "net: an inline list beats defaults on",
        "net=on",
        "net=pypi.org|*.example.com:443",
        "script=s.py",
    ),
    ("net: cli on widens an inline list", "", "net=pypi.org", "script=s.py & net=on"),
    ("net: cli off beats an inline list", "", "net=pypi.org", "script=s.py & net=off"),
    ("net: a cli list beats inline on", "", "net=on", "script=s.py & net=pypi.org"),
    ("net: a list with publish", "", "net=pypi.org & publish=8000", "script=s.py"),
    ("net: a script's list opens no private range", "", "net=10.1.2.3:5432", "script=s.py"),
    ("net: a user config list opens private ranges", "net=10.1.2.3:5432", "", "script=s.py"),
    ("timeout: cli beats inline", "timeout=60", "timeout=30", "script=s.py & timeout=10"),
    ("timeout: inline beats defaults", "timeout=60", "timeout=30", "script=s.py"),
    ("timeout zero is refused", "", "timeout=0", "script=s.py"),
    ("requires-python from inline", "", "py=>=3.11", "script=s.py"),
    ("requires-python: cli beats inline", "py=>=3.8", "py=>=3.11", "script=s.py & py=>=3.12"),
    ("args: cli replaces inline whole", "", "args=--fast -v", "script=s.py & args=--slow"),
    ("args: inline kept when cli sets none", "", "args=--fast -v", "script=s.py"),
    (
        "deps concatenate lowest first",
        "deps=rich",
        "deps=requests>=2|numpy",
        "script=s.py & deps=httpx",
    ),
    (
        "deps: same normalized name replaced in place",
        "",
        "deps=requests>=2|numpy",
        "script=s.py & deps=Requests==2.31",
    ),
    (
        "deps: pep 503 separators and case",
        "deps=zope.interface",
        "deps=Zope_Interface>=5",
        "script=s.py & deps=ZOPE--interface[extra]==6",
    ),
    (
        "deps: extras and markers keep the name",
        "",
        "deps=pkg[a]; python_version>'3'",
        "script=s.py & deps=PKG",
    ),
    ("deps: invalid requirement", "", "deps=>=3", "script=s.py"),
    ("deps: duplicates inside one layer, last wins", "", "deps=a==1|b|A==2", "script=s.py"),
    (
        "mounts concatenate",
        "mounts=/opt/tools:ro",
        "mounts=/data:ro",
        "script=s.py & mounts=/cache:rw",
    ),
    (
        "mounts: same target replaced in place",
        "",
        "mounts=./data:ro|/x",
        "script=s.py & mounts=/ws/data:rw",
    ),
    (
        "mounts: trailing slash and dots are the same target",
        "",
        "mounts=/data/:ro",
        "script=s.py & mounts=/data/./sub/..:rw",
    ),
    ("mounts: ~ expands to home", "", "mounts=~/datasets:ro", "script=s.py & mounts=~:ro"),
    ("mounts: relative to the workspace, may leave it", "", "mounts=../sibling|out", "script=s.py"),
    (
        "mounts: default mode rw inside workspace, ro outside",
        "",
        "mounts=./out|/data|/ws",
        "script=s.py",
    ),
    ("mounts: explicit mode kept", "", "mounts=./out:ro|/data:rw", "script=s.py"),
    (
        "mounts: duplicates inside one layer, last wins",
        "",
        "",
        "script=s.py & mounts=/d:ro|/e|/d:rw",
    ),
    ("mounts: ~user is refused", "", "mounts=~root/x", "script=s.py"),
    ("mounts: .. above root stays at root", "", "mounts=/../../etc:ro", "script=s.py"),
    ("publish concatenates", "publish=3000", "publish=8000", "script=s.py & publish=9000"),
    (
        "publish: same port replaced in place",
        "",
        "publish=8000|8080",
        "script=s.py & publish=0.0.0.0:8000",
    ),
    ("publish: port 0 refused", "", "publish=0", "script=s.py"),
    (
        "publish: the command line asks any host port for an inline port",
        "",
        "publish=8000|9000",
        "script=s.py & publish=0:8000|[::1]:9090:9000",
    ),
    ("publish: one host port twice refused", "", "publish=8080", "script=s.py & publish=8080:8000"),
    ("publish with the network off is refused", "", "publish=8000", "script=s.py & net=off"),
    ("publish with net off below, on above", "net=off", "publish=8000", "script=s.py & net=on"),
    (
        "env concatenates, same name replaced in place",
        "env=LANG=C.UTF-8",
        "env=A=1|B",
        "script=s.py & env=A=2|C",
    ),
    ("env: cli bare name replaces inline value", "", "env=TOKEN=abc", "script=s.py & env=TOKEN"),
    ("env: empty name refused", "", "env==oops", "script=s.py"),
    (
        "limits: each of the three resolves on its own",
        "memory=2g & pids=512",
        "memory=1g & cpus=0.5",
        "script=s.py & memory=256m",
    ),
    ("limits: inline alone", "", "cpus=2 & pids=64", "script=s.py"),
    (
        "limits: none beats a lower value",
        "memory=1g",
        "memory=none & pids=64",
        "script=s.py & pids=none",
    ),
    ("limits: a value beats a lower none", "", "cpus=none", "script=s.py & cpus=1"),
    ("limits: memory below 4m refused", "", "memory=1m", "script=s.py"),
    ("limits: zero pids refused", "", "", "script=s.py & pids=0"),
    ("limits: pids above pid_max refused", "", "pids=4194305", "script=s.py"),
    (
        "everything at once",
        "net=off & timeout=600 & env=LANG=C.UTF-8 & mounts=/opt/ref:ro",
        "deps=requests|rich & py=>=3.10 & mounts=/data:ro|./out & net=on & publish=8000 & env=MODE=dev & timeout=60",
        "script=tools/run.py & net=on & args=--all & deps=rich==13 & mounts=/data:rw & publish=127.0.0.1:8000 & env=MODE=prod & timeout=5",
    ),
];

#[test]
fn precedence_table() {
    let mut out = String::new();
    for (name, defaults, inline, cli) in CASES {
        let result = resolve(&layer(defaults), &layer(inline), &layer(cli), &ctx());
        out.push_str(&format!(
            "## {name}\ndefaults: {defaults}\ninline:   {inline}\ncli:      {cli}\n---\n{}\n\n",
            render_result(&result)
        ));
    }
    insta::assert_snapshot!(out);
}

#[test]
fn context_errors() {
    let empty = Layer::default();
    let cli = layer("script=s.py & mounts=~/x");
    let relative_ws = ResolveCtx { workspace: PathBuf::from("ws"), home: None };
    let relative_home =
        ResolveCtx { workspace: PathBuf::from("/ws"), home: Some(PathBuf::from("me")) };
    let no_home = ResolveCtx { workspace: PathBuf::from("/ws"), home: None };
    let out = [
        ("relative workspace", relative_ws),
        ("relative home", relative_home),
        ("unknown home with ~", no_home),
    ]
    .into_iter()
    .map(|(name, ctx)| {
        let result = resolve(&empty, &empty, &cli, &ctx);
        format!("{name}: {}", result.err().map_or("ok".to_owned(), |error| error.to_string()))
    })
    .collect::<Vec<_>>()
    .join("\n");
    insta::assert_snapshot!(out);
}

#[test]
fn workspace_is_normalized() {
    let ctx = ResolveCtx { workspace: PathBuf::from("/ws/./a/.."), home: None };
    let spec =
        resolve(&Layer::default(), &Layer::default(), &layer("script=s.py & mounts=out"), &ctx)
            .expect("resolves");
    assert_eq!(spec.workspace, PathBuf::from("/ws"));
    assert_eq!(spec.mounts[0].path, PathBuf::from("/ws/out"));
    assert_eq!(spec.mounts[0].mode, MountMode::ReadWrite);
}

// ---- properties -------------------------------------------------------------------------

/// Mount spellings and the target each resolves to with workspace `/ws`, home `/home/me`.
const MOUNT_PATHS: &[(&str, &str)] = &[
    ("/data", "/data"),
    ("/data/", "/data"),
    ("/a/../data", "/data"),
    ("out", "/ws/out"),
    ("./out", "/ws/out"),
    ("/ws/out/", "/ws/out"),
    ("~/x", "/home/me/x"),
    ("/home/me/x", "/home/me/x"),
    ("../up", "/up"),
];

/// Requirement names and their PEP 503 normalized form.
const DEP_NAMES: &[(&str, &str)] = &[
    ("requests", "requests"),
    ("Requests", "requests"),
    ("zope.interface", "zope-interface"),
    ("Zope_Interface", "zope-interface"),
    ("zope--interface", "zope-interface"),
    ("numpy", "numpy"),
];

const DEP_SUFFIXES: &[&str] = &["", ">=2", "==1.0", "[socks]", " ; python_version>'3'"];
const ENV_NAMES: &[&str] = &["A", "B", "LANG", "TOKEN"];
const PORTS: &[u16] = &[80, 8000, 8080, 9000];

fn mount_key(path: &std::path::Path) -> String {
    let path = path.to_string_lossy();
    MOUNT_PATHS
        .iter()
        .find(|(spelling, _)| *spelling == path)
        .map_or_else(|| path.into_owned(), |(_, key)| (*key).to_owned())
}

fn dep_key(requirement: &str) -> String {
    DEP_NAMES
        .iter()
        .filter(|(name, _)| requirement.starts_with(name))
        .max_by_key(|(name, _)| name.len())
        .map(|(_, key)| (*key).to_owned())
        .unwrap_or_default()
}

fn arb_layer() -> impl Strategy<Value = Layer> {
    let mount = (
        prop::sample::select(MOUNT_PATHS),
        prop::option::of(prop::sample::select(&[MountMode::ReadOnly, MountMode::ReadWrite][..])),
    )
        .prop_map(|((path, _), mode)| LayerMount { path: PathBuf::from(path), mode });
    let dep = (prop::sample::select(DEP_NAMES), prop::sample::select(DEP_SUFFIXES))
        .prop_map(|((name, _), suffix)| format!("{name}{suffix}"));
    let publish = (prop::sample::select(PORTS), any::<bool>()).prop_map(|(port, local)| Publish {
        port,
        host: local.then(|| "127.0.0.1".parse().expect("ip")),
        host_port: sandbox_core::HostPort::Same,
    });
    let env = (prop::sample::select(ENV_NAMES), prop::option::of("[a-z]{0,3}"))
        .prop_map(|(name, value)| EnvVar { name: name.to_owned(), value });
    (
        prop::option::of(prop::sample::select(&["a.py", "b.py", "/abs/c.py"][..])),
        prop::option::of(prop::collection::vec("[a-z]{1,3}", 0..3)),
        prop::collection::vec(dep, 0..4),
        prop::option::of(prop::sample::select(&[">=3.8", ">=3.11", "==3.12.*"][..])),
        prop::collection::vec(mount, 0..4),
        prop::option::of(prop::sample::select(&[Net::On, Net::Off][..])),
        prop::collection::vec(publish, 0..3),
        prop::collection::vec(env, 0..4),
        prop::option::of((1u64..100).prop_map(Duration::from_secs)),
        limits(),
    )
        .prop_map(
            |(
                script,
                args,
                dependencies,
                requires_python,
                mounts,
                net,
                publish,
                env,
                timeout,
                limits,
            )| {
                Layer {
                    script: script.map(PathBuf::from),
                    args,
                    dependencies,
                    requires_python: requires_python.map(str::to_owned),
                    mounts,
                    net,
                    allow: None,
                    publish,
                    env,
                    timeout,
                    tmpfs_size: None,
                    limits,
                }
            },
        )
}

/// A setting of one limit: left out, a value, or `none`.
fn setting<T: std::fmt::Debug + Clone + 'static>(
    value: impl Strategy<Value = T>,
) -> impl Strategy<Value = Option<LimitSetting<T>>> {
    prop::option::of(prop_oneof![
        3 => value.prop_map(LimitSetting::Set),
        1 => Just(LimitSetting::Off),
    ])
}

/// Valid limits, each left out, set or turned off on its own.
fn limits() -> impl Strategy<Value = LayerLimits> {
    (
        setting((4u64..64).prop_map(|mib| mib << 20)),
        setting((1u32..4000).prop_map(|m| Cpus::from_millis(m).expect("in range"))),
        setting(1u64..1024),
    )
        .prop_map(|(memory, cpus, pids)| LayerLimits { memory, cpus, pids })
}

/// Three layers, the top one always naming a script so resolution succeeds.
fn arb_layers() -> impl Strategy<Value = (Layer, Layer, Layer)> {
    (arb_layer(), arb_layer(), arb_layer()).prop_map(|(mut d, mut i, mut c)| {
        c.script.get_or_insert_with(|| PathBuf::from("main.py"));
        // Published ports need the network; keep the layers consistent so they resolve.
        let net = [&c, &i, &d].iter().find_map(|layer| layer.net).unwrap_or_default();
        if net == Net::Off {
            for layer in [&mut d, &mut i, &mut c] {
                layer.publish.clear();
            }
        }
        (d, i, c)
    })
}

fn keys<T, K: Ord + Clone>(items: &[T], key: impl Fn(&T) -> K) -> Vec<K> {
    items.iter().map(key).collect()
}

/// Targets in order of first appearance across the layers.
fn first_appearance<K: PartialEq>(keys: impl IntoIterator<Item = K>) -> Vec<K> {
    let mut out = Vec::new();
    for key in keys {
        if !out.contains(&key) {
            out.push(key);
        }
    }
    out
}

/// The value for each target from the highest layer (last occurrence wins).
fn winners<T: Clone, K: Ord>(layers: [&[T]; 3], key: impl Fn(&T) -> K) -> BTreeMap<K, T> {
    let mut out = BTreeMap::new();
    for layer in layers {
        for item in layer {
            out.insert(key(item), item.clone());
        }
    }
    out
}

fn resolved(d: &Layer, i: &Layer, c: &Layer) -> RunSpec {
    resolve(d, i, c, &ctx()).expect("generated layers always resolve")
}

proptest! {
    #[test]
    fn idempotent((d, i, c) in arb_layers()) {
        let spec = resolved(&d, &i, &c);
        let again = Layer::from_spec(&spec);
        prop_assert_eq!(&resolved(&Layer::default(), &Layer::default(), &again), &spec);
        // Putting the result on top of the same layers changes nothing either.
        prop_assert_eq!(&resolved(&d, &i, &again), &spec);
    }

    #[test]
    fn higher_layer_wins_for_scalars((d, i, c) in arb_layers()) {
        let spec = resolved(&d, &i, &c);
        let layers = [&d, &i, &c];
        let top = |field: fn(&Layer) -> bool| layers.iter().rev().find(|layer| field(layer)).copied();
        prop_assert_eq!(spec.net, top(|l| l.net.is_some()).and_then(|l| l.net).unwrap_or(Net::On));
        prop_assert_eq!(spec.timeout, top(|l| l.timeout.is_some()).and_then(|l| l.timeout));
        prop_assert_eq!(
            spec.requires_python.clone(),
            top(|l| l.requires_python.is_some()).and_then(|l| l.requires_python.clone())
        );
        prop_assert_eq!(
            spec.args.clone(),
            top(|l| l.args.is_some()).and_then(|l| l.args.clone()).unwrap_or_default()
        );
        fn value<T: Copy>(s: Option<LimitSetting<T>>) -> Option<T> {
            match s { Some(LimitSetting::Set(v)) => Some(v), _ => None }
        }
        fn off<T>(s: Option<LimitSetting<T>>) -> bool { matches!(s, Some(LimitSetting::Off)) }
        let memory = top(|l| l.limits.memory.is_some()).and_then(|l| l.limits.memory);
        prop_assert_eq!((spec.limits.memory, spec.limits.off.memory), (value(memory), off(memory)));
        let cpus = top(|l| l.limits.cpus.is_some()).and_then(|l| l.limits.cpus);
        prop_assert_eq!((spec.limits.cpus, spec.limits.off.cpus), (value(cpus), off(cpus)));
        let pids = top(|l| l.limits.pids.is_some()).and_then(|l| l.limits.pids);
        prop_assert_eq!((spec.limits.pids, spec.limits.off.pids), (value(pids), off(pids)));
        let script = c.script.clone().expect("cli always has a script");
        prop_assert_eq!(spec.script.file_name(), script.file_name());
    }

    #[test]
    fn higher_layer_wins_for_list_targets((d, i, c) in arb_layers()) {
        let spec = resolved(&d, &i, &c);
        let env = winners([&d.env, &i.env, &c.env], |var| var.name.clone());
        for var in &spec.env {
            prop_assert_eq!(Some(var), env.get(&var.name));
        }
        let publish = winners([&d.publish, &i.publish, &c.publish], |entry| entry.port);
        for entry in &spec.publish {
            prop_assert_eq!(Some(entry), publish.get(&entry.port));
        }
        let deps = winners([&d.dependencies, &i.dependencies, &c.dependencies], |dep| dep_key(dep));
        for dep in &spec.dependencies {
            prop_assert_eq!(Some(dep), deps.get(&dep_key(dep)));
        }
        let mounts = winners([&d.mounts, &i.mounts, &c.mounts], |mount| mount_key(&mount.path));
        for mount in &spec.mounts {
            let winner = mounts.get(&mount_key(&mount.path)).expect("target came from a layer");
            if let Some(mode) = winner.mode {
                prop_assert_eq!(mount.mode, mode);
            }
        }
        prop_assert_eq!(spec.env.len(), env.len());
        prop_assert_eq!(spec.publish.len(), publish.len());
        prop_assert_eq!(spec.dependencies.len(), deps.len());
        prop_assert_eq!(spec.mounts.len(), mounts.len());
    }

    #[test]
    fn no_duplicate_targets((d, i, c) in arb_layers()) {
        let spec = resolved(&d, &i, &c);
        let unique = |mut keys: Vec<String>| { let n = keys.len(); keys.sort(); keys.dedup(); keys.len() == n };
        prop_assert!(unique(keys(&spec.mounts, |m| m.path.to_string_lossy().into_owned())));
        prop_assert!(unique(keys(&spec.publish, |p| p.port.to_string())));
        prop_assert!(unique(keys(&spec.env, |e| e.name.clone())));
        prop_assert!(unique(keys(&spec.dependencies, |dep| dep_key(dep))));
        for mount in &spec.mounts {
            prop_assert!(mount.path.is_absolute());
            prop_assert_eq!(mount.path.to_string_lossy(), mount_key(&mount.path));
        }
    }

    #[test]
    fn order_is_first_appearance((d, i, c) in arb_layers()) {
        let spec = resolved(&d, &i, &c);
        let layers = [&d, &i, &c];
        let mounts = first_appearance(layers.iter().flat_map(|l| l.mounts.iter().map(|m| mount_key(&m.path))));
        prop_assert_eq!(keys(&spec.mounts, |m| m.path.to_string_lossy().into_owned()), mounts);
        let ports = first_appearance(layers.iter().flat_map(|l| l.publish.iter().map(|p| p.port)));
        prop_assert_eq!(keys(&spec.publish, |p| p.port), ports);
        let names = first_appearance(layers.iter().flat_map(|l| l.env.iter().map(|e| e.name.clone())));
        prop_assert_eq!(keys(&spec.env, |e| e.name.clone()), names);
        let deps = first_appearance(layers.iter().flat_map(|l| l.dependencies.iter().map(|dep| dep_key(dep))));
        prop_assert_eq!(keys(&spec.dependencies, |dep| dep_key(dep)), deps);
    }

    #[test]
    fn empty_layer_is_neutral_wherever_it_sits((d, _i, c) in arb_layers()) {
        let empty = Layer::default();
        let ctx = ctx();
        prop_assert_eq!(resolve(&empty, &d, &c, &ctx), resolve(&d, &empty, &c, &ctx));
        // Alone, a layer resolves the same whichever position it takes.
        let mut alone = d.clone();
        alone.script = c.script.clone();
        prop_assert_eq!(resolve(&empty, &empty, &alone, &ctx), resolve(&alone, &empty, &empty, &ctx));
        prop_assert_eq!(resolve(&empty, &alone, &empty, &ctx), resolve(&alone, &empty, &empty, &ctx));
    }
}
