# /// script
# [tool.python-sandbox]
# mounts = ['C:\data:ro', "/srv", "/srv:rw"]
# ///
