//! The crate's one error type. Messages are lower case, carry no trailing period and add a `hint:`
//! line where the fix is not obvious.

/// Everything that can go wrong in `reaper`: reading our labels back and learning who we are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A resource carries our managed-by label but lacks one every sandbox gets.
    #[error(
        "label `{key}` is missing\nhint: resources are labelled by `reaper::SandboxLabels`; was this one made by hand?"
    )]
    MissingLabel {
        /// The missing key.
        key: &'static str,
    },
    /// A label holds a value of the wrong shape.
    #[error("label `{key}` is `{value}`, expected {expected}")]
    InvalidLabel {
        /// The key.
        key: &'static str,
        /// The value found.
        value: String,
        /// What the value should look like, e.g. `unix seconds`.
        expected: &'static str,
    },
    /// The resource was labelled by a newer python-sandbox; its rules may differ from ours.
    #[error(
        "label schema {found} is newer than the {supported} this version understands\nhint: upgrade python-sandbox, or let the newer version clean up"
    )]
    NewerSchema {
        /// The schema on the resource.
        found: u32,
        /// The newest schema this crate reads.
        supported: u32,
    },
    /// A value cannot become a label value (Kubernetes allows at most 63 of `[A-Za-z0-9._-]`).
    #[error(
        "`{value}` cannot be a label value\nhint: label values are at most 63 characters of letters, digits, `.`, `_` and `-`"
    )]
    InvalidLabelValue {
        /// The rejected value.
        value: String,
    },
    /// `/proc/<pid>/stat` did not have the shape the kernel documents.
    #[error("cannot read the start time from `/proc/{pid}/stat`")]
    ProcStat {
        /// The process whose stat was read.
        pid: u32,
    },
    /// A directory's access ACL could not be read, granted or restored.
    #[error(
        "cannot {action} the POSIX ACL of `{path}`: {message}\nhint: a root caller's sandbox runs as uid 65534 and writes the workspace and read-write mounts through one ACL entry; the filesystem must support POSIX ACLs"
    )]
    Acl {
        /// `read`, `grant` or `restore`.
        action: &'static str,
        /// The directory.
        path: String,
        /// The OS error, as text.
        message: String,
    },
    /// The grants' state (records, locks and holds in the state dir) could not be used.
    #[error("cannot use `{path}`: {message}")]
    AclState {
        /// The file or directory.
        path: String,
        /// The OS error, as text.
        message: String,
    },
    /// A directory for python-sandbox's own files is one someone else could plant links in.
    #[error(
        "refusing to keep python-sandbox's files in `{path}`: it {problem}\nhint: it must be a directory you own that nobody else can write; set XDG_CACHE_HOME (or HOME) to one, or remove it if you did not make it"
    )]
    UnsafeDir {
        /// The directory (or the component that failed).
        path: String,
        /// What is wrong with it, e.g. `belongs to uid 1001, not to you (uid 0)`.
        problem: String,
    },
    /// One of python-sandbox's own files on the host could not be used.
    #[error("cannot use `{path}`: {message}")]
    HostFile {
        /// The file.
        path: String,
        /// The OS error, as text.
        message: String,
    },
    /// Reading a file under /proc failed.
    #[error("cannot read `{path}`: {message}")]
    Io {
        /// The file.
        path: String,
        /// The OS error, as text so the error stays `Clone + Eq`.
        message: String,
    },
}
