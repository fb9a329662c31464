//! Ephemeral runs on real engines.

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use crate::support::{self, engines, name, run, spec, workspace};

#[test]
fn compute_and_exit_code() {
    for engine in engines() {
        let (_dir, ws) = workspace(
            "import sys\nprint(sum(range(10)))\nprint('err', file=sys.stderr)\nsys.exit(3)\n",
        );
        let (outcome, out) = run(&engine, &spec(&ws));
        assert_eq!(out.stdout_lossy(), "45\n", "{}", name(&engine));
        assert_eq!(out.stderr_lossy(), "err\n", "{}", name(&engine));
        assert_eq!(outcome.exit_code, 3, "{}", name(&engine));
        assert!(!outcome.timed_out);
    }
}
