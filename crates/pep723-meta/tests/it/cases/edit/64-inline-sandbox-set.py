# /// script
# tool.python-sandbox = { net = "on" }
# ///
