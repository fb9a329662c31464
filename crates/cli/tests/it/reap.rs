//! `python-sandbox reap …` without an engine: argument errors come before any engine is touched.
//! The engine side (containers swept, environments pruned, `--dry-run --json`) is tested against
//! real docker and podman in engine-oci's integration tests.

use insta::assert_snapshot;

use crate::{Ctx, transcript};

#[test]
fn invalid_env_max_age_is_a_usage_error_with_a_hint() {
    let ctx = Ctx::new();
    assert_snapshot!(transcript(&ctx.run(&["reap", "--dry-run", "--env-max-age", "soon"])), @"
    exit: 2
    --- stdout
    --- stderr
    error: invalid --env-max-age `soon`
    hint: use `30d`, `12h`, `90m`, `45s`, or `0` for every environment not in use
    ");
}
