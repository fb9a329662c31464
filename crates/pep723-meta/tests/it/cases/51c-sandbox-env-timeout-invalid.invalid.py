# /// script
# [tool.python-sandbox]
# env = ["1BAD", "A-B=1", "OK", "OK=2"]
# timeout = 0
# ///
