//! Engine-independent core of python-sandbox: the resolved [`RunSpec`], config precedence
//! (command line > inline `[tool.python-sandbox]` > defaults), boundary classification, the
//! secret scrubber, the engine seam ([`Engine`] for runs, [`SessionEngine`] for warm sessions) and the
//! long-lived [`Sandbox`] protocol
//! (with the in-memory [`FakeSandbox`]).
//!
//! **Architecture invariant:** no IO happens here: no filesystem, no processes, no runtime.
//! Paths are handled lexically; engines canonicalize.

pub mod agent;
mod allow;
mod boundary;
#[cfg(any(test, feature = "contract"))]
pub mod contract;
mod engine;
mod error;
mod fake;
mod interactive;
mod io;
mod layer;
mod limits;
mod missing;
pub mod oci_seccomp;
mod parse;
mod paths;
mod policy;
pub mod pool;
pub mod protect;
mod publish;
mod route;
mod sandbox;
mod scrub;
mod seccomp;
mod session;
pub mod shell;
mod sniff;
mod spec;
pub mod sync;
mod tar;

pub use allow::{
    Allow, FlowName, HostPattern, NetRefused, Target as HostTarget, normal_name, other_host,
    refuse_allowlist,
};
pub use boundary::{
    Asker, Crossing, CrossingKind, EnvCrossing, HOME_SECRETS, HOST_SOCKETS, classify, classify_as,
    classify_copied_env, classify_script, classify_session,
};
pub use engine::{
    Capability, Classify, DynEngine, DynPrepared, Engine, EngineError, ErrorClass, Output,
    PublishedHook, RunIo, RunOutcome, Stdin, exit_code,
};
pub use error::Error;
pub use fake::{FakeCall, FakeFs, FakeReply, FakeSandbox};
pub use interactive::{Input, Interactive, InteractiveExec, TtySize};
pub use io::{Captured, EXIT_CLOSED_PIPE, OutputSink, Stream, same_file_out_err};
pub use layer::{Layer, LayerMount, MIN_TMPFS_SIZE, ResolveCtx, check_publish_net, resolve};
pub use limits::{
    Cpus, LayerLimits, LimitSetting, Limits, LimitsOff, MAX_CPUS, MAX_PIDS, MIN_MEMORY, NO_LIMIT,
    parse_cpus, parse_cpus_setting, parse_memory, parse_memory_setting, parse_pids,
    parse_pids_setting,
};
pub use missing::{MissingMount, missing_mount};
pub use parse::{MountSpellingError, mount_mode_hint, parse_size, split_mount};
pub use paths::absolutize;
pub use paths::check_home_form;
pub use policy::{
    CA_BUNDLE_CANDIDATES, NEVER_MOUNTED, PREPARE_ENV_ALLOWLIST, PathUse, RUN_ENV_ALLOWLIST,
    SANDBOX_CA_BUNDLE, SANDBOX_CONTAINER, SANDBOX_HOME, SANDBOX_HOSTNAME, SYSTEM_DIRS,
    check_host_path, run_env,
};
pub use pool::{PoolLease, PoolMember};
pub use publish::{
    DEFAULT_PUBLISH_ADDR, HostPort, PublishedPort, asked as asked_host_ports, busy_host_port,
    check_free as check_host_ports_free, choose as choose_host_ports, port_in_use,
};
pub use route::{
    Cidr, LINK_LOCAL, Lan, NEVER, PRIVATE, PROXY_VARS, RT_TABLE_LOCAL, RT_TABLE_MAIN,
    RTN_BROADCAST, RTN_LOCAL, RTN_MULTICAST, RTN_UNICAST, Route, Routes, ack_errors, acks_asked,
    canonical as canonical_ip, nameservers, netlink_attr, netlink_message, parse_routes,
    proxy_authority, refusal as net_refusal, refused_ranges, route_dump_request, route_get_request,
    unreachable_route, wall as net_wall, wall_messages,
};
pub use sandbox::{
    DirEntry, EntryKind, ExecRequest, PutSource, Sandbox, Service, ServiceSpec, SessionConfig,
};
pub use scrub::{
    Ignored, MASK, MIN_SECRET_LEN, SECRET_NAME_MARKERS, ScrubbingSink, Secrets, StreamScrubber,
    is_secret_name,
};
pub use seccomp::{
    Arch, ArgCheck, FAMILIES, Insn, SeccompAction, SeccompFamily, SeccompRule, WALL, bpf, compile,
    disassemble,
};
pub use session::{
    Driven, DynSession, DynSessionEngine, Executor, ScriptAsks, SessionEngine, SessionInfo,
    SessionPolicy, WarmSession,
};
pub use shell::{AgentShell, ScriptOptions, ScriptPlace};
pub use sniff::{
    Body as HttpBody, Head as HttpHead, Question as DnsQuestion, RequestHead,
    Requests as HttpRequests, SNIFF_LIMIT, Sniffed, Step as HttpStep, dns_addresses, dns_answer,
    dns_nxdomain, dns_question, flow_name, http_head,
};
pub use spec::{DEFAULT_TMPFS_SIZE, EnvVar, Mount, MountMode, Net, Publish, RunSpec};
