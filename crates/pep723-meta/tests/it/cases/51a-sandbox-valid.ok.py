# /// script
# dependencies = ["rich"]
#
# [tool.python-sandbox]
# dependencies = ["pytest>=8"]
# mounts = ["/data/inputs:ro", "./out", "C:\\data:rw"]
# net = "on"
# publish = [8000]
# env = ["HOME", "MODE=fast"]
# timeout = 30
# ///
