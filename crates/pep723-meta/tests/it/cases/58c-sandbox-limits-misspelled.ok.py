# /// script
# [tool.python-sandbox]
# memroy = "1g"
# pids_limit = 8
# ///
