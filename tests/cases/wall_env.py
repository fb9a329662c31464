"""Secrets in the caller's environment don't reach the script, not even through /proc/*/environ
of the sandbox's other processes: it starts empty plus an allowlist and explicit --env."""
SECRETS = ("AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "OPENAI_API_KEY", "SSH_AUTH_SOCK", "DOCKER_HOST",
           "KUBECONFIG", "CONF_PASS")
for name in SECRETS:
    expect(f"env {name} absent", name not in os.environ, f"{name} is set")
# Every value is printed: the runner fails the case if a secret marker shows up anywhere.
for name, value in sorted(os.environ.items()):
    print(f"env: {name}={value}")
expect("env is an allowlist", len(os.environ) <= 25, f"{len(os.environ)} variables: {sorted(os.environ)}")
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    try:
        environ = read(f"/proc/{pid}/environ").split(b"\0")
    except OSError:
        continue
    names = {e.split(b"=", 1)[0].decode(errors="replace") for e in environ if e}
    leaked = sorted(names & set(SECRETS))
    expect(f"/proc/{pid}/environ clean", not leaked, f"has {leaked}")
done()
