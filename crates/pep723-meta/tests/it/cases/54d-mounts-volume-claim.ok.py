# /// script
# [tool.python-sandbox]
# mounts = ["pvc:psbx-data-a:/data", "pvc:psbx-data-b:/models:ro", "pvc:psbx-data-a:/data:rw", "./pvc:x:ro"]
# ///
