"""The caller's $HOME (a fake one full of marked secrets) is invisible, `ls ~` is empty, and
nothing written to either home reaches the host (the runner diffs the host home)."""
home = CTX["fake_home"]
hidden("ls ~", os.path.expanduser("~"))
hidden("ls the host home path", home)
for rel in CTX["home_files"]:
    must_fail(f"read ~/{rel}", lambda rel=rel: read(os.path.join(os.path.expanduser("~"), rel)))
    must_fail(f"read host home {rel}", lambda rel=rel: read(os.path.join(home, rel)))
must_fail("rename host ~/.aws/credentials into cwd",
          lambda: os.rename(os.path.join(home, ".aws", "credentials"), "stolen"))
# HOME inside may be a writable tmpfs, so these may succeed; what matters is the host home.
print("write ~/x:", attempt(lambda: write(os.path.expanduser("~/written-in-home")) and "written"))
print("write host home:", attempt(lambda: write(os.path.join(home, "written-in-home")) and "written"))
done()
