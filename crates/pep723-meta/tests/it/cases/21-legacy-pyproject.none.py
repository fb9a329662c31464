# /// pyproject
# [run]
# dependencies = ["rich"]
# ///
