"""`--env NAME=VALUE` sets a variable, `--env NAME` passes the caller's value; nothing else leaks."""
require("--env NAME=VALUE arrives", os.environ.get("CONF_SET") == "set by flag", repr(os.environ.get("CONF_SET")))
require("--env NAME passes the host value", os.environ.get("CONF_PASS") == CTX["conf_pass"],
        repr(os.environ.get("CONF_PASS")))
expect("GITHUB_TOKEN still absent", "GITHUB_TOKEN" not in os.environ, "set")
done()
