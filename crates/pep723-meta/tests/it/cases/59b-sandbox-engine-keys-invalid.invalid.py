# /// script
# [tool.python-sandbox]
# image = "registry.example/psbx 1"
# runtime-class = "gVisor"
# ///
