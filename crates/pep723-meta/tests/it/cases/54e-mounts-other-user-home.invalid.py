# /// script
# [tool.python-sandbox]
# mounts = ["~bob/data:ro", "~/notes:ro", "~", "./~x"]
# ///
