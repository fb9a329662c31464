# /// script
# [tool.python-sandbox]
# mounts = ["", "/d:", "/d:rx"]
# ///
