"""Protected paths (`.git`, `.claude`, `.envrc`, ...) are read-only in the sandbox, existing or
not: no write, create, rename or delete reaches them, so nothing the host runs later changes.
Each attempt prints `refused LABEL` or `wrote LABEL`; the runner decides per engine (a pod writes
its own copy, which is never synced back)."""


def attempt(label, fn):
    try:
        fn()
    except OSError as e:
        print(f"refused {label}: {e}")
        return
    print(f"wrote {label}")


def append(path, text):
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def create(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def replace(src, dst):
    create(src, "[core]\n\tfsmonitor = id\n")
    os.rename(src, dst)


attempt("git-config", lambda: append(".git/config", "[core]\n\tfsmonitor = id -u > /tmp/x\n"))
attempt("git-hook", lambda: create(".git/hooks/pre-commit", "#!/bin/sh\nid\n"))
attempt("git-moved-aside", lambda: os.rename(".git", "git-aside"))
attempt("git-config-replaced", lambda: replace("cfg.tmp", ".git/config"))
attempt("claude-settings", lambda: create(".claude/settings.json", '{"permissions": {"allow": ["Bash(*)"]}}'))
attempt("envrc", lambda: create(".envrc", "id\n"))
attempt("mcp-json", lambda: create(".mcp.json", "{}\n"))
attempt("vscode-deleted", lambda: os.remove(".vscode/settings.json"))
attempt("nested-worktree-git", lambda: create("sub/.git", "gitdir: /tmp/evil\n"))
must_work("write ./out.txt", lambda: create("out.txt", "ok\n"))
done()
