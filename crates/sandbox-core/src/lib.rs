//! Engine-independent core of python-sandbox: the resolved [`RunSpec`], config precedence
//! (command line > inline `[tool.python-sandbox]` > defaults), boundary classification, the
//! one-shot [`Engine`] trait and the long-lived `Sandbox` protocol. No IO happens here.

mod spec;

pub use spec::{EnvVar, Mount, MountMode, Net, Publish, RunSpec};
