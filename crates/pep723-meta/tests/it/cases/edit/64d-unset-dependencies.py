# /// script
# dependencies = ["old"]
# requires-python = ">=3.11"
# ///
