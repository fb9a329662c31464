# /// script
# tool.python-sandbox = { net = "on", publish = [8080, 8081] }
# ///
