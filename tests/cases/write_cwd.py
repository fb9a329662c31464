"""Files written in the workspace land on the host (the runner checks owner and content)."""
require("cwd is the workspace at its real path", os.getcwd() == CTX["workspace"], os.getcwd())
must_work("write ./out.txt", lambda: write("out.txt", f"written by {CTX['tag']}\n".encode()))
must_work("mkdir ./sub", lambda: os.makedirs("sub", exist_ok=True))
must_work("write ./sub/nested.txt", lambda: write(os.path.join("sub", "nested.txt"), b"nested\n"))
done()
