"""The interpreter, the environment and uv's cache are read-only at run time."""
import site
import sysconfig

name = f"python-sandbox-conformance-{CTX['tag']}"
targets = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
           sysconfig.get_paths()["purelib"], CTX["cache_dir"], CTX["data_dir"]}
targets.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
for target in sorted(targets):
    must_fail(f"write into {target}", lambda target=target: write(os.path.join(target, name)))
must_fail("replace the interpreter", lambda: write(os.path.realpath(sys.executable), b""))
done()
