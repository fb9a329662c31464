# /// script
# [tool.python-sandbox]
# mounts = ["./sub:xx", "./a:b:rw", "C:/x", "/data:RO"]
# ///
