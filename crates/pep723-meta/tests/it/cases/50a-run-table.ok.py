# /// script
# [run]
# dependencies = ["rich"]
# ///
