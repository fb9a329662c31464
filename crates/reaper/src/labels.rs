//! The label schema every engine puts on what it creates (containers, pods, services, ingresses,
//! volumes), and the builders engines call. Keys and values are valid both as Docker/Podman labels and
//! as Kubernetes labels (names of at most 63 of `[A-Za-z0-9._-]`), so one schema serves every engine.
//!
//! Docker and Podman labels cannot change after creation, so activity that happens later (execs into
//! a session) is not a label there: the engine reports it as [`crate::Resource::last_activity`]. On
//! Kubernetes, [`activity_label`] can be patched onto the pod.

use std::collections::BTreeMap;
use std::fmt;

use crate::Error;

/// The one label an engine filters on when listing (`label=…` in Docker's and Podman's list
/// filters, a label selector on Kubernetes); see [`MANAGED_FILTER`].
pub const MANAGED_BY: &str = "io.python-sandbox.managed-by";
/// The value of [`MANAGED_BY`]. Nothing without exactly this pair is ever touched.
pub const MANAGED_BY_VALUE: &str = "python-sandbox";
/// `key=value` of [`MANAGED_BY`], the form `docker ps --filter label=…`, bollard's
/// `filters: {"label": [MANAGED_FILTER]}` and a Kubernetes `labelSelector` all take.
pub const MANAGED_FILTER: &str = "io.python-sandbox.managed-by=python-sandbox";
/// The schema of the other labels, so a newer python-sandbox's resources are left to it.
pub const SCHEMA: &str = "io.python-sandbox.schema";
/// The schema this crate writes and reads.
pub const SCHEMA_VERSION: u32 = 1;
/// The sandbox a resource belongs to; a session's pod, service and ingress share it.
pub const ID: &str = "io.python-sandbox.id";
/// [`Kind`]: `run`, `session` or `prepare`.
pub const KIND: &str = "io.python-sandbox.kind";
/// Who started it (a user name or `uid-N`), for listing and per-user cleanup.
pub const OWNER: &str = "io.python-sandbox.owner";
/// The owner's host name, for people reading `docker ps`; liveness never trusts it (VM clones share
/// names), it uses [`OWNER_BOOT`] and [`OWNER_PIDNS`].
pub const OWNER_HOST: &str = "io.python-sandbox.owner-host";
/// The kernel boot id of the owner's host (`/proc/sys/kernel/random/boot_id`).
pub const OWNER_BOOT: &str = "io.python-sandbox.owner-boot";
/// The owner's pid namespace inode: pids only mean something inside the same namespace.
pub const OWNER_PIDNS: &str = "io.python-sandbox.owner-pidns";
/// The owner's pid.
pub const OWNER_PID: &str = "io.python-sandbox.owner-pid";
/// The owner's start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`), which tells a
/// reused pid from the original process.
pub const OWNER_START: &str = "io.python-sandbox.owner-start";
/// Creation time, unix seconds.
pub const CREATED: &str = "io.python-sandbox.created";
/// Idle time-to-live in seconds: a session unused for longer is removed.
pub const TTL: &str = "io.python-sandbox.ttl";
/// Absolute deadline, unix seconds: removed after it whatever else holds.
pub const EXPIRES: &str = "io.python-sandbox.expires";
/// Last activity, unix seconds, where the engine can update labels (Kubernetes).
pub const LAST_ACTIVITY: &str = "io.python-sandbox.last-activity";

/// What a sandbox resource is for; the policy treats each kind differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// One `python-sandbox run`: lives exactly as long as the CLI process that started it.
    Run,
    /// A named session: outlives the CLI, ends after [`TTL`] seconds without activity.
    Session,
    /// Preparing an environment or image: tied to its owner like a run.
    Prepare,
}

impl Kind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Run => "run",
            Kind::Session => "session",
            Kind::Prepare => "prepare",
        }
    }

    fn parse(value: &str) -> Option<Kind> {
        match value {
            "run" => Some(Kind::Run),
            "session" => Some(Kind::Session),
            "prepare" => Some(Kind::Prepare),
            _ => None,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The process that owns a sandbox, identified well enough to tell, later and from another process,
/// whether it still runs. [`Owner::current`] reads it from /proc.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    /// A user name or `uid-N`; must be a valid label value (see [`label_value`]).
    pub user: String,
    /// The host name, informational; must be a valid label value.
    pub host: String,
    /// The kernel boot id.
    pub boot_id: String,
    /// The pid namespace inode.
    pub pid_ns: u64,
    /// The pid.
    pub pid: u32,
    /// Start time in clock ticks since boot.
    pub start_time: u64,
}

/// Everything the labels of one resource say. Round-trips through [`SandboxLabels::to_labels`] and
/// [`SandboxLabels::from_labels`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLabels {
    /// The sandbox id, shared by all resources of one sandbox.
    pub id: String,
    /// What it is for.
    pub kind: Kind,
    /// Who started it.
    pub owner: Owner,
    /// Unix seconds.
    pub created: u64,
    /// Idle time-to-live in seconds.
    pub ttl: Option<u64>,
    /// Absolute deadline, unix seconds.
    pub expires: Option<u64>,
    /// Last activity, unix seconds, where labels can be updated.
    pub last_activity: Option<u64>,
}

/// Labels for one `python-sandbox run`. `expires` should be the run's timeout plus a grace period, so
/// a run whose owner cannot be checked (another host, another pid namespace) still goes away.
pub fn labels_for_run(
    id: &str,
    owner: &Owner,
    now: u64,
    expires: Option<u64>,
) -> Result<BTreeMap<String, String>, Error> {
    SandboxLabels::new(id, Kind::Run, owner, now).with_expires(expires).to_labels()
}

/// Labels for a session that ends after `ttl_secs` without activity.
pub fn labels_for_session(
    id: &str,
    owner: &Owner,
    now: u64,
    ttl_secs: u64,
) -> Result<BTreeMap<String, String>, Error> {
    let mut labels = SandboxLabels::new(id, Kind::Session, owner, now);
    labels.ttl = Some(ttl_secs);
    labels.to_labels()
}

/// Labels for a container that prepares an environment or image; tied to its owner like a run.
pub fn labels_for_prepare(
    id: &str,
    owner: &Owner,
    now: u64,
    expires: Option<u64>,
) -> Result<BTreeMap<String, String>, Error> {
    SandboxLabels::new(id, Kind::Prepare, owner, now).with_expires(expires).to_labels()
}

/// The label to patch onto a Kubernetes pod on each exec into a session.
pub fn activity_label(now: u64) -> (&'static str, String) {
    (LAST_ACTIVITY, now.to_string())
}

impl SandboxLabels {
    /// A sandbox created `now` with no deadlines.
    pub fn new(id: &str, kind: Kind, owner: &Owner, now: u64) -> SandboxLabels {
        SandboxLabels {
            id: id.to_owned(),
            kind,
            owner: owner.clone(),
            created: now,
            ttl: None,
            expires: None,
            last_activity: None,
        }
    }

    fn with_expires(mut self, expires: Option<u64>) -> SandboxLabels {
        self.expires = expires;
        self
    }

    /// The labels to create a resource with, [`MANAGED_BY`] included. Fails when a free-form value
    /// (id, user, host, boot id) is not a valid label value.
    pub fn to_labels(&self) -> Result<BTreeMap<String, String>, Error> {
        let mut map = BTreeMap::new();
        let mut put = |key: &str, value: String| -> Result<(), Error> {
            if !is_label_value(&value) {
                return Err(Error::InvalidLabelValue { value });
            }
            map.insert(key.to_owned(), value);
            Ok(())
        };
        put(MANAGED_BY, MANAGED_BY_VALUE.to_owned())?;
        put(SCHEMA, SCHEMA_VERSION.to_string())?;
        put(ID, self.id.clone())?;
        put(KIND, self.kind.as_str().to_owned())?;
        put(OWNER, self.owner.user.clone())?;
        put(OWNER_HOST, self.owner.host.clone())?;
        put(OWNER_BOOT, self.owner.boot_id.clone())?;
        put(OWNER_PIDNS, self.owner.pid_ns.to_string())?;
        put(OWNER_PID, self.owner.pid.to_string())?;
        put(OWNER_START, self.owner.start_time.to_string())?;
        put(CREATED, self.created.to_string())?;
        if let Some(ttl) = self.ttl {
            put(TTL, ttl.to_string())?;
        }
        if let Some(expires) = self.expires {
            put(EXPIRES, expires.to_string())?;
        }
        if let Some(at) = self.last_activity {
            put(LAST_ACTIVITY, at.to_string())?;
        }
        Ok(map)
    }

    /// Reads labels back. `Ok(None)` when the resource is not ours (no exact [`MANAGED_BY`] pair);
    /// `Err` when it is ours but the labels are incomplete, malformed or of a newer schema.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Result<Option<SandboxLabels>, Error> {
        if !is_managed(labels) {
            return Ok(None);
        }
        let schema: u32 = number(labels, SCHEMA)?;
        if schema > SCHEMA_VERSION {
            return Err(Error::NewerSchema { found: schema, supported: SCHEMA_VERSION });
        }
        let kind_text = text(labels, KIND)?;
        let kind = Kind::parse(kind_text).ok_or_else(|| Error::InvalidLabel {
            key: KIND,
            value: kind_text.to_owned(),
            expected: "`run`, `session` or `prepare`",
        })?;
        Ok(Some(SandboxLabels {
            id: text(labels, ID)?.to_owned(),
            kind,
            owner: Owner {
                user: text(labels, OWNER)?.to_owned(),
                host: text(labels, OWNER_HOST)?.to_owned(),
                boot_id: text(labels, OWNER_BOOT)?.to_owned(),
                pid_ns: number(labels, OWNER_PIDNS)?,
                pid: number(labels, OWNER_PID)?,
                start_time: number(labels, OWNER_START)?,
            },
            created: number(labels, CREATED)?,
            ttl: optional(labels, TTL)?,
            expires: optional(labels, EXPIRES)?,
            last_activity: optional(labels, LAST_ACTIVITY)?,
        }))
    }
}

/// Whether these labels mark a resource python-sandbox manages: the exact [`MANAGED_BY`] pair.
pub fn is_managed(labels: &BTreeMap<String, String>) -> bool {
    labels.get(MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
}

/// Whether `value` is valid as a label value everywhere: Kubernetes' rule (empty, or at most 63
/// characters of `[A-Za-z0-9._-]` starting and ending alphanumeric) is the strictest.
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    value.is_empty()
        || (bytes.len() <= 63
            && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
            && bytes.last().is_some_and(u8::is_ascii_alphanumeric))
}

/// Makes free text (a user or host name) a valid label value: other characters become `-`, the ends
/// are trimmed to alphanumerics and the length to 63.
pub fn label_value(text: &str) -> String {
    let mapped: String = text
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' })
        .collect();
    let mut value = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_owned();
    value.truncate(63);
    value.trim_end_matches(|c: char| !c.is_ascii_alphanumeric()).to_owned()
}

fn text<'a>(labels: &'a BTreeMap<String, String>, key: &'static str) -> Result<&'a str, Error> {
    labels.get(key).map(String::as_str).ok_or(Error::MissingLabel { key })
}

fn number<T: std::str::FromStr>(
    labels: &BTreeMap<String, String>,
    key: &'static str,
) -> Result<T, Error> {
    let value = text(labels, key)?;
    parse_number(key, value)
}

fn optional(labels: &BTreeMap<String, String>, key: &'static str) -> Result<Option<u64>, Error> {
    labels.get(key).map(|value| parse_number(key, value)).transpose()
}

fn parse_number<T: std::str::FromStr>(key: &'static str, value: &str) -> Result<T, Error> {
    // Only plain digits: `+5` or ` 5` parse in Rust but would mean a hand-edited label.
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::InvalidLabel {
            key,
            value: value.to_owned(),
            expected: "a decimal number",
        });
    }
    value.parse().map_err(|_| Error::InvalidLabel {
        key,
        value: value.to_owned(),
        expected: "a decimal number in range",
    })
}
